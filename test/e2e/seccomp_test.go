package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	"github.com/podvisor/podvisor/test/images"
)

// seccomp Localhost on containerd, as the kubelet passes it: the profile is
// a file under the node's seccomp root (DATA_DIR/agent/seccomp, the kubelet's
// <root-dir>/seccomp) and the container runs under it — here mkdir is
// refused with EPERM, seen from inside. A profile the node does not have is
// not silently dropped: the container is not created (CreateContainerError
// with the runtime's message naming the file, a Failed event), as under a
// kubelet, and the pod's other container runs.
func TestContainerdSeccompLocalhost(t *testing.T) {
	t.Parallel()
	p := NewContainerdPodvisor(t)
	p.Start()
	root := filepath.Join(p.DataDir, "agent", "seccomp")
	if err := os.MkdirAll(filepath.Join(root, "test"), 0o755); err != nil {
		t.Fatal(err)
	}
	profile := `{"defaultAction": "SCMP_ACT_ALLOW", "syscalls": [{"names": ["mkdir", "mkdirat"], "action": "SCMP_ACT_ERRNO"}]}`
	if err := os.WriteFile(filepath.Join(root, "test", "no-mkdir.json"), []byte(profile), 0o644); err != nil {
		t.Fatal(err)
	}
	ns := p.Namespace("seccomp")
	localhost := func(name string) *v1.SecurityContext {
		return &v1.SecurityContext{SeccompProfile: &v1.SeccompProfile{Type: v1.SeccompProfileTypeLocalhost, LocalhostProfile: ptr.To(name)}}
	}

	confined := p.imagePod(ns, "confined", images.BusyboxImage, v1.RestartPolicyNever,
		[]string{"sh", "-c", "grep '^Seccomp:' /proc/self/status; mkdir /tmp/x && echo made || echo refused"}, nil)
	confined.Spec.Containers[0].SecurityContext = localhost("test/no-mkdir.json")
	p.create(t, confined)

	missing := p.imagePod(ns, "missing", images.BusyboxImage, v1.RestartPolicyAlways, []string{"sleep", "3600"}, nil)
	missing.Spec.Containers[0].SecurityContext = localhost("test/absent.json")
	other := missing.Spec.Containers[0]
	other.Name, other.SecurityContext = "other", nil
	missing.Spec.Containers = append(missing.Spec.Containers, other)
	missing.Spec.TerminationGracePeriodSeconds = ptr.To[int64](0)
	p.create(t, missing)

	p.waitPod(t, ns, "confined", 60*time.Second, "succeeded", func(pod *v1.Pod) bool { return pod.Status.Phase == v1.PodSucceeded })
	log, err := p.logs(ns, "confined", "c")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(log, "Seccomp:\t2") || !strings.Contains(log, "Operation not permitted") || !strings.Contains(log, "refused") {
		t.Errorf("confined container's output %q: want seccomp filtering (Seccomp: 2) and mkdir refused", log)
	}

	got := p.waitPod(t, ns, "missing", 60*time.Second, "c not created, other running", func(pod *v1.Pod) bool {
		var waiting, running bool
		for _, st := range pod.Status.ContainerStatuses {
			switch {
			case st.Name == "c" && st.State.Waiting != nil && st.State.Waiting.Reason == "CreateContainerError":
				waiting = true
			case st.Name == "other" && st.State.Running != nil:
				running = true
			}
		}
		return waiting && running
	})
	for _, st := range got.Status.ContainerStatuses {
		if st.Name == "c" && !strings.Contains(st.State.Waiting.Message, "absent.json") {
			t.Errorf("waiting message %q does not name the missing profile", st.State.Waiting.Message)
		}
	}
	p.waitEvent(t, ns, "missing", "Failed")
	p.deletePod(t, ns, "missing", 0)
	p.waitGone(t, ns, "missing", 60*time.Second)
}
