package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// Persistent volumes from the built-in local-path provisioner, as a k3s
// user meets them: a StatefulSet's volumeClaimTemplates with the default
// StorageClass keep each pod's data across the pods' deletion, a generic
// ephemeral volume gets its claim from the controller manager, deleting
// the claims removes the volumes' directories, and a claim that never
// binds holds only its own pod back with FailedMount.
func TestPersistentVolumesLocalPath(t *testing.T) {
	t.Parallel()
	p := Shared(t)
	ns := p.Namespace("pv-local-path")
	ctx := context.Background()
	t.Cleanup(func() { _ = p.Admin.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{}) })
	mountPath := t.TempDir() // the process runtime's containers share the host's filesystem
	log := filepath.Join(mountPath, "log")

	// A claim of a class nobody provisions never binds; its pod, put on
	// the node directly (the scheduler would wait for the claim), waits.
	stuckClaim := &v1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "never"}, Spec: v1.PersistentVolumeClaimSpec{
		StorageClassName: ptr.To("nobody-provisions-this"), AccessModes: []v1.PersistentVolumeAccessMode{v1.ReadWriteOnce},
		Resources: v1.VolumeResourceRequirements{Requests: v1.ResourceList{v1.ResourceStorage: resource.MustParse("1Mi")}}}}
	if _, err := p.Admin.CoreV1().PersistentVolumeClaims(ns).Create(ctx, stuckClaim, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	stuck := p.pod(ns, "stuck", v1.RestartPolicyAlways, sh("c", "sleep 3600"))
	stuck.Spec.NodeName = p.NodeName
	stuck.Spec.Volumes = []v1.Volume{{Name: "data", VolumeSource: v1.VolumeSource{PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: "never"}}}}
	stuck.Spec.Containers[0].VolumeMounts = []v1.VolumeMount{{Name: "data", MountPath: mountPath}}
	p.create(t, stuck)

	// The StatefulSet: every start of a pod appends its UID to a file of
	// its volume.
	script := `echo "$POD_UID" >> ` + log + `; exec sleep 3600`
	tmpl := p.pod(ns, "", v1.RestartPolicyAlways, sh("c", script))
	tmpl.Spec.Containers[0].Env = []v1.EnvVar{{Name: "POD_UID", ValueFrom: &v1.EnvVarSource{FieldRef: &v1.ObjectFieldSelector{FieldPath: "metadata.uid"}}}}
	tmpl.Spec.Containers[0].VolumeMounts = []v1.VolumeMount{{Name: "data", MountPath: mountPath}}
	p.adapt(tmpl)
	labels := map[string]string{"app": "db"}
	claimSpec := v1.PersistentVolumeClaimSpec{AccessModes: []v1.PersistentVolumeAccessMode{v1.ReadWriteOnce},
		Resources: v1.VolumeResourceRequirements{Requests: v1.ResourceList{v1.ResourceStorage: resource.MustParse("1Mi")}}}
	sts := &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "db"}, Spec: appsv1.StatefulSetSpec{
		Replicas: ptr.To[int32](2), Selector: &metav1.LabelSelector{MatchLabels: labels}, ServiceName: "db",
		PodManagementPolicy:  appsv1.ParallelPodManagement,
		Template:             v1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: tmpl.Spec},
		VolumeClaimTemplates: []v1.PersistentVolumeClaim{{ObjectMeta: metav1.ObjectMeta{Name: "data"}, Spec: claimSpec}},
	}}
	if _, err := p.Admin.AppsV1().StatefulSets(ns).Create(ctx, sts, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// A generic ephemeral volume of the default class beside it, asking
	// (as k3s's annotation does) for a local PV, whose node affinity the
	// node checks.
	eph := p.pod(ns, "scratch", v1.RestartPolicyAlways, sh("c", "echo hi > "+log+"; exec sleep 3600"))
	eph.Spec.Volumes = []v1.Volume{{Name: "tmp", VolumeSource: v1.VolumeSource{Ephemeral: &v1.EphemeralVolumeSource{
		VolumeClaimTemplate: &v1.PersistentVolumeClaimTemplate{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{"volumeType": "local"}}, Spec: claimSpec}}}}}
	eph.Spec.Containers[0].VolumeMounts = []v1.VolumeMount{{Name: "tmp", MountPath: mountPath}}
	p.create(t, eph)

	running := func(pod *v1.Pod) bool { return pod.Status.Phase == v1.PodRunning }
	dirs := map[string]string{} // claim: the PV's directory on the node
	uids := map[string]string{} // pod: its first UID
	for _, name := range []string{"db-0", "db-1"} {
		pod := p.waitPod(t, ns, name, 3*time.Minute, "Running", running)
		uids[name] = string(pod.UID)
		dirs["data-"+name] = p.claimDir(t, ns, "data-"+name, false)
	}
	p.waitPod(t, ns, "scratch", 3*time.Minute, "Running", running)
	dirs["scratch-tmp"] = p.claimDir(t, ns, "scratch-tmp", true)
	for claim, dir := range dirs {
		if !strings.HasPrefix(dir, filepath.Join(p.DataDir, "storage")+"/") {
			t.Errorf("claim %s: volume at %s, not under the data dir's storage", claim, dir)
		}
	}
	waitLines(t, filepath.Join(dirs["data-db-0"], "log"), uids["db-0"])
	waitLines(t, filepath.Join(dirs["data-db-1"], "log"), uids["db-1"])
	waitLines(t, filepath.Join(dirs["scratch-tmp"], "log"), "hi")

	// Deleted, the pods come back with the same claims and find their data.
	for _, name := range []string{"db-0", "db-1"} {
		if err := p.Admin.CoreV1().Pods(ns).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range []string{"db-0", "db-1"} {
		pod := p.waitPod(t, ns, name, 3*time.Minute, "recreated and Running", func(pod *v1.Pod) bool {
			return string(pod.UID) != uids[name] && running(pod)
		})
		waitLines(t, filepath.Join(dirs["data-"+name], "log"), uids[name], string(pod.UID))
	}

	// The stuck pod waited all along, with the kubelet's reason.
	pod, err := p.Admin.CoreV1().Pods(ns).Get(ctx, "stuck", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if pod.Status.Phase != v1.PodPending {
		t.Errorf("the pod of a claim that never binds is %s, want Pending:\n%s", pod.Status.Phase, describe(pod))
	}
	Eventually(t, 2*time.Minute, "FailedMount event of pod stuck", func() (bool, error) {
		evs, err := p.Admin.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "reason=FailedMount,involvedObject.name=stuck"})
		if err != nil {
			return false, err
		}
		for _, e := range evs.Items {
			if strings.Contains(e.Message, "error processing PVC "+ns+"/never: PVC is not bound") {
				return true, nil
			}
		}
		return false, nil
	})

	// Deleting the claims (once their pods are gone) deletes the volumes'
	// directories: reclaim policy Delete.
	if err := p.Admin.AppsV1().StatefulSets(ns).Delete(ctx, "db", metav1.DeleteOptions{PropagationPolicy: ptr.To(metav1.DeletePropagationForeground)}); err != nil {
		t.Fatal(err)
	}
	for _, claim := range []string{"data-db-0", "data-db-1"} {
		if err := p.Admin.CoreV1().PersistentVolumeClaims(ns).Delete(ctx, claim, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, claim := range []string{"data-db-0", "data-db-1"} {
		dir := dirs[claim]
		Eventually(t, 3*time.Minute, "the directory of deleted claim "+claim+" to be removed", func() (bool, error) {
			_, err := os.Stat(dir)
			return os.IsNotExist(err), err
		})
	}
	if _, err := os.Stat(dirs["scratch-tmp"]); err != nil {
		t.Errorf("the ephemeral volume of a running pod is gone: %v", err)
	}
}

// claimDir waits for claim to be bound to a hostPath (or local) PV and
// returns its directory.
func (p *Podvisor) claimDir(t *testing.T, ns, claim string, local bool) string {
	t.Helper()
	var dir string
	Eventually(t, 2*time.Minute, fmt.Sprintf("claim %s/%s bound to a PV (local: %v)", ns, claim, local), func() (bool, error) {
		pvc, err := p.Admin.CoreV1().PersistentVolumeClaims(ns).Get(context.Background(), claim, metav1.GetOptions{})
		if err != nil || pvc.Spec.VolumeName == "" {
			return false, err
		}
		pv, err := p.Admin.CoreV1().PersistentVolumes().Get(context.Background(), pvc.Spec.VolumeName, metav1.GetOptions{})
		switch {
		case err != nil:
			return false, err
		case local && pv.Spec.Local != nil:
			dir = pv.Spec.Local.Path
		case !local && pv.Spec.HostPath != nil:
			dir = pv.Spec.HostPath.Path
		default:
			return false, fmt.Errorf("PV %s is not of the type wanted: %+v", pv.Name, pv.Spec.PersistentVolumeSource)
		}
		return true, nil
	})
	return dir
}

// waitLines waits until the file holds exactly the given lines.
func waitLines(t *testing.T, file string, lines ...string) {
	t.Helper()
	want := strings.Join(lines, "\n") + "\n"
	Eventually(t, 2*time.Minute, file+" to hold "+strings.Join(lines, ","), func() (bool, error) {
		b, err := os.ReadFile(file)
		return string(b) == want, err
	})
}

// localPathOnAgent: a joined agent provisions (with the node's own
// credentials) the default-class claim of a pod put on it, in its own data
// dir, and removes the directory when the claim is deleted.
func localPathOnAgent(t *testing.T, cp *Podvisor, ns string, agent *labAgent) {
	ctx := context.Background()
	claim := &v1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "agent-data"}, Spec: v1.PersistentVolumeClaimSpec{
		AccessModes: []v1.PersistentVolumeAccessMode{v1.ReadWriteOnce},
		Resources:   v1.VolumeResourceRequirements{Requests: v1.ResourceList{v1.ResourceStorage: resource.MustParse("1Mi")}}}}
	if _, err := cp.Admin.CoreV1().PersistentVolumeClaims(ns).Create(ctx, claim, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod := cp.pod(ns, "agent-writer", v1.RestartPolicyAlways, sh("c", "echo "+agent.Node+" > /data/f; exec sleep 3600"))
	pod.Spec.NodeSelector = map[string]string{v1.LabelHostname: agent.Node}
	pod.Spec.Volumes = []v1.Volume{{Name: "data", VolumeSource: v1.VolumeSource{PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: "agent-data"}}}}
	pod.Spec.Containers[0].VolumeMounts = []v1.VolumeMount{{Name: "data", MountPath: "/data"}}
	cp.create(t, pod)
	cp.waitPod(t, ns, "agent-writer", 3*time.Minute, "Running", func(pod *v1.Pod) bool { return pod.Status.Phase == v1.PodRunning })
	dir := cp.claimDir(t, ns, "agent-data", false)
	if !strings.HasPrefix(dir, filepath.Join(agent.DataDir, "storage")+"/") {
		t.Errorf("volume at %s, not in the data dir of node %s (%s)", dir, agent.Node, agent.DataDir)
	}
	waitLines(t, filepath.Join(dir, "f"), agent.Node)
	if err := cp.Admin.CoreV1().Pods(ns).Delete(ctx, "agent-writer", metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
		t.Fatal(err)
	}
	if err := cp.Admin.CoreV1().PersistentVolumeClaims(ns).Delete(ctx, "agent-data", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	Eventually(t, 3*time.Minute, "the directory of the deleted claim to be removed", func() (bool, error) {
		_, err := os.Stat(dir)
		return os.IsNotExist(err), err
	})
}
