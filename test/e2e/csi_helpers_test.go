package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// The CSI tests' helpers: the test driver (test/csidriver) as a host
// process, the calls it records, static PVs of a driver.

// waitCSINodeDriver waits for the node's CSINode to list the driver.
func waitCSINodeDriver(t *testing.T, p *Podvisor, driverName string) {
	t.Helper()
	Eventually(t, 2*time.Minute, "CSINode "+p.NodeName+" to list driver "+driverName, func() (bool, error) {
		c, err := p.Admin.StorageV1().CSINodes().Get(context.Background(), p.NodeName, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		if err != nil {
			return false, err
		}
		return slices.ContainsFunc(c.Spec.Drivers, func(x storagev1.CSINodeDriver) bool {
			return x.Name == driverName && x.NodeID == p.NodeName
		}), nil
	})
}

// staticClaim makes a PV of a CSI driver's volume and a claim bound to it.
func staticClaim(t *testing.T, p *Podvisor, ns, claim, pvName, driver, handle string) {
	t.Helper()
	ctx := context.Background()
	size := v1.ResourceList{v1.ResourceStorage: resource.MustParse("1Mi")}
	pv := &v1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: pvName}, Spec: v1.PersistentVolumeSpec{
		Capacity: size, AccessModes: []v1.PersistentVolumeAccessMode{v1.ReadWriteOnce},
		PersistentVolumeReclaimPolicy: v1.PersistentVolumeReclaimRetain, StorageClassName: "",
		ClaimRef:               &v1.ObjectReference{Namespace: ns, Name: claim},
		PersistentVolumeSource: v1.PersistentVolumeSource{CSI: &v1.CSIPersistentVolumeSource{Driver: driver, VolumeHandle: handle}},
	}}
	if _, err := p.Admin.CoreV1().PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = p.Admin.CoreV1().PersistentVolumes().Delete(context.Background(), pvName, metav1.DeleteOptions{})
	})
	pvc := &v1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: claim}, Spec: v1.PersistentVolumeClaimSpec{
		StorageClassName: ptr.To(""), VolumeName: pvName, AccessModes: []v1.PersistentVolumeAccessMode{v1.ReadWriteOnce},
		Resources: v1.VolumeResourceRequirements{Requests: size}}}
	if _, err := p.Admin.CoreV1().PersistentVolumeClaims(ns).Create(ctx, pvc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// testCSIDriver is a running test/csidriver.
type testCSIDriver struct {
	endpoint           string // its CSI socket
	dataDir, callsFile string
	failFile           string // while it exists, NodeUnpublishVolume fails

	t      *testing.T
	args   []string // of the driver's binary
	cmd    *exec.Cmd
	stderr *syncBuffer
}

// csiCall is a line of the driver's calls file (test/csidriver's Call).
type csiCall struct {
	Method         string            `json:"method"`
	VolumeID       string            `json:"volumeID"`
	Target         string            `json:"target"`
	Staging        string            `json:"staging"`
	ReadOnly       bool              `json:"readOnly"`
	VolumeContext  map[string]string `json:"volumeContext"`
	PublishContext map[string]string `json:"publishContext"`
	Capacity       int64             `json:"capacity"`
}

// startTestCSIDriver builds and runs test/csidriver for p's node until the
// test ends.
func startTestCSIDriver(t *testing.T, p *Podvisor, name string) *testCSIDriver {
	t.Helper()
	return startTestCSIDriverOn(t, name, p.DataDir, p.NodeName, "")
}

// startTestCSIDriverOn runs test/csidriver for the node nodeName whose
// agent's data dir is agentDataDir, keeping its volumes in dataDir ("": a
// directory of its own), until the test ends. Drivers of several nodes
// given the same dataDir share their volumes, as nodes share a storage
// system.
func startTestCSIDriverOn(t *testing.T, name, agentDataDir, nodeName, dataDir string) *testCSIDriver {
	t.Helper()
	dir := t.TempDir()
	bin := filepath.Join(dir, "csidriver")
	build := exec.Command("go", "build", "-o", bin, "./test/csidriver")
	build.Dir = moduleRoot()
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building test/csidriver: %v\n%s", err, out)
	}
	if dataDir == "" {
		dataDir = filepath.Join(dir, "data")
	}
	d := &testCSIDriver{endpoint: filepath.Join(dir, "csi.sock"), dataDir: dataDir, callsFile: filepath.Join(dir, "calls.jsonl"), failFile: filepath.Join(dir, "fail-unpublish"),
		t: t, stderr: &syncBuffer{}}
	d.args = []string{bin, "--name", name, "--endpoint", d.endpoint,
		"--registration-dir", filepath.Join(agentDataDir, "agent", "plugins_registry"),
		"--data-dir", d.dataDir, "--node-id", nodeName, "--calls", d.callsFile, "--fail-unpublish-file", d.failFile}
	d.start()
	t.Cleanup(func() {
		d.stop()
		if t.Failed() {
			t.Logf("test CSI driver's output:\n%s", d.stderr)
		}
	})
	return d
}

// start runs the driver (again, after stop: its calls file goes on).
func (d *testCSIDriver) start() {
	d.t.Helper()
	d.cmd = exec.Command(d.args[0], d.args[1:]...)
	d.cmd.Stdout, d.cmd.Stderr = d.stderr, d.stderr
	if err := d.cmd.Start(); err != nil {
		d.t.Fatal(err)
	}
}

// stop ends the driver as its registrar does: the sockets go, which
// deregisters it; its mounts stay.
func (d *testCSIDriver) stop() {
	if d.cmd == nil || d.cmd.Process == nil || d.cmd.ProcessState != nil {
		return
	}
	_ = d.cmd.Process.Signal(os.Interrupt)
	_ = d.cmd.Wait()
}

func (d *testCSIDriver) calls(t *testing.T) []csiCall {
	t.Helper()
	f, err := os.Open(d.callsFile)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []csiCall
	s := bufio.NewScanner(f)
	for s.Scan() {
		var c csiCall
		if err := json.Unmarshal(s.Bytes(), &c); err != nil {
			t.Fatalf("driver calls file: %v", err)
		}
		out = append(out, c)
	}
	return out
}

func hasCall(calls []csiCall, method, volume string) bool {
	return slices.ContainsFunc(calls, func(c csiCall) bool { return c.Method == method && c.VolumeID == volume })
}

// waitCall waits for the driver to have been called and returns the call.
func (d *testCSIDriver) waitCall(t *testing.T, method, volume string) csiCall {
	t.Helper()
	var got csiCall
	Eventually(t, 2*time.Minute, fmt.Sprintf("%s of %s", method, volume), func() (bool, error) {
		for _, c := range d.calls(t) {
			if c.Method == method && c.VolumeID == volume {
				got = c
				return true, nil
			}
		}
		return false, nil
	})
	return got
}
