package e2e

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// provisionerModule is the upstream external-provisioner, built from its
// Go module (the proxy serves it; its images are not reachable here).
const provisionerModule = "github.com/kubernetes-csi/external-provisioner/v5@v5.3.0"

// resizerModule is the upstream external-resizer, built the same way (the
// proxy serves the /v2 module path only).
const resizerModule = "github.com/kubernetes-csi/external-resizer/v2@v2.3.0"

// Dynamic provisioning as a user meets it with a CSI driver: the upstream
// external-provisioner, run beside the test driver (test/csidriver) as a
// host process with the admin's credentials, provisions a claim of the
// driver's StorageClass (CreateVolume: a directory); a pod mounts it
// through the node; deleting the claim deletes the volume (DeleteVolume).
func TestCSIDynamicProvisioning(t *testing.T) {
	t.Parallel()
	p := Shared(t)
	ns := p.Namespace("csi-provisioning")
	ctx := context.Background()
	const driverName = "prov.csi.podvisor.test"
	provisioner := buildSidecar(t, provisionerModule, "./cmd/csi-provisioner")
	d := startTestCSIDriver(t, p, driverName)
	waitCSINodeDriver(t, p, driverName)
	if _, err := p.Admin.StorageV1().CSIDrivers().Create(ctx, &storagev1.CSIDriver{ObjectMeta: metav1.ObjectMeta{Name: driverName},
		Spec: storagev1.CSIDriverSpec{AttachRequired: ptr.To(false)}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = p.Admin.StorageV1().CSIDrivers().Delete(context.Background(), driverName, metav1.DeleteOptions{})
	})
	sc := &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: "csi-e2e-prov"}, Provisioner: driverName,
		ReclaimPolicy: ptr.To(v1.PersistentVolumeReclaimDelete), VolumeBindingMode: ptr.To(storagev1.VolumeBindingImmediate)}
	if _, err := p.Admin.StorageV1().StorageClasses().Create(ctx, sc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = p.Admin.StorageV1().StorageClasses().Delete(context.Background(), sc.Name, metav1.DeleteOptions{})
	})

	runSidecar(t, p, d, provisioner)

	claim := &v1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "dynamic"}, Spec: v1.PersistentVolumeClaimSpec{
		StorageClassName: ptr.To(sc.Name), AccessModes: []v1.PersistentVolumeAccessMode{v1.ReadWriteOnce},
		Resources: v1.VolumeResourceRequirements{Requests: v1.ResourceList{v1.ResourceStorage: resource.MustParse("1Mi")}}}}
	if _, err := p.Admin.CoreV1().PersistentVolumeClaims(ns).Create(ctx, claim, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var pv *v1.PersistentVolume
	Eventually(t, 3*time.Minute, "claim dynamic bound to a PV of "+driverName, func() (bool, error) {
		c, err := p.Admin.CoreV1().PersistentVolumeClaims(ns).Get(ctx, "dynamic", metav1.GetOptions{})
		if err != nil || c.Status.Phase != v1.ClaimBound {
			return false, err
		}
		pv, err = p.Admin.CoreV1().PersistentVolumes().Get(ctx, c.Spec.VolumeName, metav1.GetOptions{})
		return err == nil && pv.Spec.CSI != nil && pv.Spec.CSI.Driver == driverName, err
	})
	volDir := filepath.Join(d.dataDir, "volumes", pv.Spec.CSI.VolumeHandle)
	if _, err := os.Stat(volDir); err != nil {
		t.Fatalf("CreateVolume made no directory for %s: %v", pv.Spec.CSI.VolumeHandle, err)
	}

	mountPath := t.TempDir()
	pod := p.pod(ns, "user", v1.RestartPolicyAlways, sh("c", "echo dynamic > "+mountPath+"/f; exec sleep 3600"))
	pod.Spec.Volumes = []v1.Volume{{Name: "data", VolumeSource: v1.VolumeSource{PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: "dynamic"}}}}
	pod.Spec.Containers[0].VolumeMounts = []v1.VolumeMount{{Name: "data", MountPath: mountPath}}
	p.create(t, pod)
	p.waitPod(t, ns, "user", 3*time.Minute, "Running", func(pod *v1.Pod) bool { return pod.Status.Phase == v1.PodRunning })
	waitLines(t, filepath.Join(volDir, "f"), "dynamic")

	if err := p.Admin.CoreV1().Pods(ns).Delete(ctx, "user", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	p.waitGone(t, ns, "user", 3*time.Minute)
	if err := p.Admin.CoreV1().PersistentVolumeClaims(ns).Delete(ctx, "dynamic", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	Eventually(t, 3*time.Minute, "the deleted claim's volume "+volDir+" removed by DeleteVolume", func() (bool, error) {
		_, err := os.Stat(volDir)
		return os.IsNotExist(err), nil
	})
	Eventually(t, 2*time.Minute, "PV "+pv.Name+" deleted", func() (bool, error) {
		_, err := p.Admin.CoreV1().PersistentVolumes().Get(ctx, pv.Name, metav1.GetOptions{})
		return err != nil, nil
	})

	// Online expansion is the volume manager's, whatever the runtime: the
	// containerd half alone tests it.
	if e2eRuntime() == "containerd" {
		testCSIOnlineExpansion(t, p, d, ns, driverName)
	}
}

// runSidecar runs an upstream sidecar beside the driver d as a host process
// with the admin's credentials until the test ends; it is stopped before
// the driver (cleanups run last first), after what the test deletes.
func runSidecar(t *testing.T, p *Podvisor, d *testCSIDriver, bin string, args ...string) {
	t.Helper()
	var out syncBuffer
	cmd := exec.Command(bin, append([]string{"--csi-address", d.endpoint, "--kubeconfig", filepath.Join(p.DataDir, "admin.kubeconfig"), "--v", "3"}, args...)...)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("%s's output:\n%s", filepath.Base(bin), out.String())
		}
	})
}

// buildSidecar builds an upstream CSI sidecar (the package pkg of module)
// from its module, in the module's own directory so that its go.mod (and
// its replace directives) rule the build. The first build on a machine
// takes minutes (its k8s.io dependencies are of another minor version than
// podvisor's); later ones come from the build cache.
func buildSidecar(t *testing.T, module, pkg string) string {
	t.Helper()
	dl := exec.Command("go", "mod", "download", "-json", module)
	dl.Dir = t.TempDir() // outside podvisor's module: its go.mod is not touched
	dl.Env = append(os.Environ(), "GOFLAGS=")
	b, err := dl.Output()
	if err != nil {
		t.Fatalf("go mod download %s: %v", module, err)
	}
	var mod struct{ Dir string }
	if err := json.Unmarshal(b, &mod); err != nil || mod.Dir == "" {
		t.Fatalf("go mod download %s: %v %s", module, err, b)
	}
	bin := filepath.Join(t.TempDir(), filepath.Base(pkg))
	build := exec.Command("go", "build", "-o", bin, pkg)
	build.Dir = mod.Dir
	build.Env = append(os.Environ(), "GOFLAGS=", "GOWORK=off") // its go.sum is complete: a read-only build
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building %s of %s: %v\n%s", pkg, module, err, out)
	}
	return bin
}
