package e2e

import (
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/podvisor/podvisor/test/images"
)

// kubectl debug: an ephemeral container joins a running pod, gets stdin
// with -i, shows in ephemeralContainerStatuses, is never restarted, and
// leaves the pod's own containers and readiness alone; on containerd it sees
// its target container's processes (--target). (The process runtime has no
// PID namespaces, so --target means nothing there.)
func TestKubectlDebug(t *testing.T) {
	t.Parallel()
	p := NewPodvisor(t)
	p.Start()
	ns := p.Namespace("debug")
	pod := p.imagePod(ns, "web", images.BusyboxImage, v1.RestartPolicyAlways, []string{"sleep", "3600"}, nil)
	pod.Spec.Containers[0].Name = "app"
	pod.Spec.TerminationGracePeriodSeconds = new(int64)
	p.create(t, pod)
	p.waitRunning(t, ns, "web")

	if p.Runtime == "containerd" {
		out, errOut, code := p.kubectl(t, "", nil, "-n", ns, "debug", "web", "--image="+images.BusyboxImage,
			"--image-pull-policy=IfNotPresent", "--target=app", "-c", "peek", "--", "sh", "-c", "cat /proc/1/cmdline | tr '\\0' ' '; echo")
		if code != 0 {
			t.Fatalf("kubectl debug: exit %d, stdout %q, stderr %q", code, out, errOut)
		}
		got := p.waitPod(t, ns, "web", 60*time.Second, "peek terminated", func(pod *v1.Pod) bool {
			for _, st := range pod.Status.EphemeralContainerStatuses {
				if st.Name == "peek" && st.State.Terminated != nil {
					return true
				}
			}
			return false
		})
		p.waitLogs(t, ns, "web", "peek", 10*time.Second, "sleep 3600")
		for _, st := range got.Status.EphemeralContainerStatuses {
			if st.Name == "peek" && (st.State.Terminated.ExitCode != 0 || st.RestartCount != 0) {
				t.Errorf("peek %+v, want exit 0 and no restart", st)
			}
		}
	}

	// -i attaches to the new container's stdin. (Its answer comes in the
	// container's log: with stdin piped and closed at once, the runtime ends
	// the attach session when stdin closes, as containerd does under a
	// kubelet, since kubectl debug does not set stdinOnce.)
	_, errOut, code := p.kubectl(t, "hello\n", nil, "-n", ns, "debug", "web", "-i", "--image="+images.BusyboxImage,
		"--image-pull-policy=IfNotPresent", "-c", "talk", "--", "sh", "-c", "read x; echo got:$x; exit 3")
	if code != 0 {
		t.Errorf("kubectl debug -i: exit %d, stderr %q", code, errOut)
	}
	p.waitLogs(t, ns, "web", "talk", 30*time.Second, "got:hello")
	final := p.waitPod(t, ns, "web", 60*time.Second, "talk terminated", func(pod *v1.Pod) bool {
		for _, st := range pod.Status.EphemeralContainerStatuses {
			if st.Name == "talk" && st.State.Terminated != nil {
				return true
			}
		}
		return false
	})
	if final.Status.Phase != v1.PodRunning || len(final.Status.ContainerStatuses) != 1 || !final.Status.ContainerStatuses[0].Ready ||
		final.Status.ContainerStatuses[0].RestartCount != 0 {
		t.Errorf("the pod after its ephemeral containers: phase %s, statuses %+v", final.Status.Phase, final.Status.ContainerStatuses)
	}
	p.deletePod(t, ns, "web", 0)
	p.waitGone(t, ns, "web", 60*time.Second)
}
