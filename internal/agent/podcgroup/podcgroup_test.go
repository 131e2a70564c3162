package podcgroup

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"
)

func ctr(req, lim string) v1.Container {
	c := v1.Container{Name: fmt.Sprint(req, lim)}
	parse := func(s string) v1.ResourceList {
		l := v1.ResourceList{}
		for _, kv := range strings.Fields(s) {
			k, v, _ := strings.Cut(kv, "=")
			l[v1.ResourceName(k)] = resource.MustParse(v)
		}
		return l
	}
	c.Resources.Requests, c.Resources.Limits = parse(req), parse(lim)
	return c
}

func TestParentAndConfig(t *testing.T) {
	for _, tc := range []struct {
		name   string
		init   []v1.Container
		ctrs   []v1.Container
		qos    v1.PodQOSClass
		parent string
		want   Limits
	}{
		{name: "BestEffort", ctrs: []v1.Container{ctr("", "")}, qos: v1.PodQOSBestEffort,
			parent: "/kubepods/besteffort/podu1", want: Limits{CPUShares: 2}},
		{name: "Guaranteed: the sums", ctrs: []v1.Container{ctr("cpu=500m memory=64Mi", "cpu=500m memory=64Mi"), ctr("cpu=250m memory=32Mi", "cpu=250m memory=32Mi")},
			qos: v1.PodQOSGuaranteed, parent: "/kubepods/podu1", want: Limits{CPUShares: 768, CPUQuota: 75000, MemoryBytes: 96 << 20}},
		{name: "Burstable, one container without limits: shares only", ctrs: []v1.Container{ctr("cpu=100m", "cpu=200m memory=64Mi"), ctr("", "")},
			qos: v1.PodQOSBurstable, parent: "/kubepods/burstable/podu1", want: Limits{CPUShares: 102}},
		{name: "Burstable, every container with a memory limit", ctrs: []v1.Container{ctr("memory=16Mi", "memory=64Mi"), ctr("", "memory=32Mi")},
			qos: v1.PodQOSBurstable, parent: "/kubepods/burstable/podu1", want: Limits{CPUShares: 2, MemoryBytes: 96 << 20}},
		{name: "an init container's larger limit counts, a tiny quota is raised", init: []v1.Container{ctr("cpu=1m memory=128Mi", "cpu=1m memory=128Mi")},
			ctrs: []v1.Container{ctr("cpu=1m memory=64Mi", "cpu=1m memory=64Mi")},
			qos:  v1.PodQOSGuaranteed, parent: "/kubepods/podu1", want: Limits{CPUShares: 2, CPUQuota: 1000, MemoryBytes: 128 << 20}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pod := &v1.Pod{Spec: v1.PodSpec{InitContainers: tc.init, Containers: tc.ctrs}}
			if got := Parent("u1", tc.qos); got != tc.parent {
				t.Errorf("parent %s, want %s", got, tc.parent)
			}
			if got := Config(pod, tc.qos); got != tc.want {
				t.Errorf("limits %+v, want %+v", got, tc.want)
			}
		})
	}
	// A sidecar runs beside the regular containers: its limit adds up.
	pod := &v1.Pod{Spec: v1.PodSpec{
		InitContainers: []v1.Container{ctr("memory=32Mi", "memory=32Mi")},
		Containers:     []v1.Container{ctr("memory=64Mi", "memory=64Mi")}}}
	pod.Spec.InitContainers[0].RestartPolicy = ptr.To(v1.ContainerRestartPolicyAlways)
	if got := Config(pod, v1.PodQOSBurstable); got.MemoryBytes != 96<<20 {
		t.Errorf("with a sidecar: memory %d, want %d", got.MemoryBytes, 96<<20)
	}
}

// On this machine's own cgroup file system (as root): the pod's cgroup is
// made with its limits and removed with whatever the runtime left below it.
func TestManagerOnTheRealCgroups(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	m, err := New("/sys/fs/cgroup")
	if err != nil {
		t.Skip(err)
	}
	parent := Parent(fmt.Sprintf("test-%d", os.Getpid()), v1.PodQOSBurstable)
	t.Cleanup(func() { _ = m.Remove(parent) })
	if err := m.Ensure(parent, Limits{CPUShares: 512, CPUQuota: 50000, MemoryBytes: 64 << 20}); err != nil {
		t.Fatal(err)
	}
	read := func(rel string) string {
		b, err := os.ReadFile(filepath.Join("/sys/fs/cgroup", rel))
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(string(b))
	}
	if m.v2 {
		if got := read(parent + "/memory.max"); got != fmt.Sprint(64<<20) {
			t.Errorf("memory.max %s", got)
		}
		if got := read(parent + "/cpu.max"); got != "50000 100000" {
			t.Errorf("cpu.max %s", got)
		}
	} else {
		if got := read("memory" + parent + "/memory.limit_in_bytes"); got != fmt.Sprint(64<<20) {
			t.Errorf("memory.limit_in_bytes %s", got)
		}
		if got := read("cpu" + parent + "/cpu.shares"); got != "512" {
			t.Errorf("cpu.shares %s", got)
		}
		if got := read("cpu" + parent + "/cpu.cfs_quota_us"); got != "50000" {
			t.Errorf("cpu.cfs_quota_us %s", got)
		}
	}
	// What a runtime makes below it (a container's cgroup) is counted and
	// goes too.
	child := filepath.Join("/sys/fs/cgroup", parent, "ctr")
	if !m.v2 {
		child = filepath.Join("/sys/fs/cgroup/pids", parent, "ctr")
	}
	if err := os.Mkdir(child, 0o755); err != nil {
		t.Fatal(err)
	}
	if n, err := m.Processes(parent); err != nil || n != 0 {
		t.Fatalf("processes of an empty pod cgroup: %d %v", n, err)
	}
	sleep := exec.Command("sleep", "30")
	if err := sleep.Start(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(child, "cgroup.procs"), []byte(fmt.Sprint(sleep.Process.Pid)), 0o644); err != nil {
		t.Fatal(err)
	}
	if n, err := m.Processes(parent); err != nil || n != 1 {
		t.Errorf("processes with one in a container's cgroup: %d %v, want 1", n, err)
	}
	sleep.Process.Kill()
	sleep.Wait()
	if err := m.Remove(parent); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Dir(child)); !os.IsNotExist(err) {
		t.Errorf("%s still there: %v", filepath.Dir(child), err)
	}
}

// What is left in a pod's cgroup, deep in a container's, is killed.
func TestKillProcesses(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	m, err := New("/sys/fs/cgroup")
	if err != nil {
		t.Skip(err)
	}
	parent := Parent(fmt.Sprintf("kill-%d", os.Getpid()), v1.PodQOSBestEffort)
	t.Cleanup(func() { _ = m.Remove(parent) })
	if err := m.Ensure(parent, Limits{}); err != nil {
		t.Fatal(err)
	}
	if pids, err := m.KillProcesses(parent); err != nil || len(pids) != 0 {
		t.Fatalf("an empty pod cgroup: killed %v, %v", pids, err)
	}
	child := filepath.Join("/sys/fs/cgroup", parent, "ctr")
	if !m.v2 {
		child = filepath.Join("/sys/fs/cgroup/pids", parent, "ctr")
	}
	if err := os.Mkdir(child, 0o755); err != nil {
		t.Fatal(err)
	}
	sleep := exec.Command("sleep", "300")
	if err := sleep.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sleep.Process.Kill() })
	if err := os.WriteFile(filepath.Join(child, "cgroup.procs"), []byte(fmt.Sprint(sleep.Process.Pid)), 0o644); err != nil {
		t.Fatal(err)
	}
	pids, err := m.KillProcesses(parent)
	if err != nil || len(pids) != 1 || pids[0] != sleep.Process.Pid {
		t.Fatalf("killed %v, %v; want [%d]", pids, err, sleep.Process.Pid)
	}
	if err := sleep.Wait(); err == nil || !strings.Contains(err.Error(), "killed") {
		t.Errorf("sleep ended with %v, want killed", err)
	}
	if err := m.Remove(parent); err != nil {
		t.Errorf("the pod cgroup after the kill: %v", err)
	}
}

// cgroup v2 (this machine runs v1): on a file tree shaped as a v2 mount,
// each level enables the controllers for the next, and the pod's cgroup
// gets cpu.weight, cpu.max and memory.max.
func TestManagerV2Layout(t *testing.T) {
	mount := t.TempDir()
	if err := os.WriteFile(filepath.Join(mount, "cgroup.controllers"), []byte("cpu memory pids\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	m, err := New(mount)
	if err != nil || !m.v2 {
		t.Fatalf("New: %v (v2 %v)", err, m != nil && m.v2)
	}
	parent := Parent("u1", v1.PodQOSBurstable)
	if err := m.Ensure(parent, Limits{CPUShares: 1024, CPUQuota: 50000, MemoryBytes: 1 << 30}); err != nil {
		t.Fatal(err)
	}
	for file, want := range map[string]string{
		"cgroup.subtree_control":                    "+cpu +memory +pids",
		"kubepods/cgroup.subtree_control":           "+cpu +memory +pids",
		"kubepods/burstable/cgroup.subtree_control": "+cpu +memory +pids",
		"kubepods/burstable/podu1/cpu.weight":       "39",
		"kubepods/burstable/podu1/cpu.max":          "50000 100000",
		"kubepods/burstable/podu1/memory.max":       fmt.Sprint(1 << 30),
	} {
		b, err := os.ReadFile(filepath.Join(mount, file))
		if err != nil || string(b) != want {
			t.Errorf("%s = %q (%v), want %q", file, b, err, want)
		}
	}
}

// While a pod is resized its cgroup holds the larger of the old and new
// limits; a limit not set is larger than any.
func TestLargerDuringResize(t *testing.T) {
	got := Larger(Limits{CPUShares: 20, CPUQuota: 2000, MemoryBytes: 40 << 20}, Limits{CPUShares: 25, CPUQuota: 1500, MemoryBytes: 0})
	if want := (Limits{CPUShares: 25, CPUQuota: 2000, MemoryBytes: 0}); got != want {
		t.Errorf("Larger: %+v, want %+v", got, want)
	}
}
