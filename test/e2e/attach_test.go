package e2e

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/podvisor/podvisor/test/images"
)

// stdin, stdinOnce and tty on either runtime, driven by the real kubectl:
// `kubectl run -i` feeds the container's stdin and prints what it answers;
// `kubectl attach -i` reaches a running container's stdin (closed when the
// session ends, with stdinOnce); a tty container runs on a terminal. (On
// the process runtime the image is not used: sh is the host's.)
func TestStdinAttachAndTTY(t *testing.T) {
	t.Parallel()
	p := NewPodvisor(t)
	p.Start()
	ns := p.Namespace("attach")

	out, errOut, code := p.kubectl(t, "hello\n", nil, "-n", ns, "run", "reader", "-i", "--restart=Never",
		"--image="+images.BusyboxImage, "--image-pull-policy=IfNotPresent", "--command", "--", "sh", "-c", "read line; echo got:$line")
	if code != 0 || !strings.Contains(out, "got:hello") {
		t.Errorf("kubectl run -i: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	p.waitPod(t, ns, "reader", 30*time.Second, "succeeded", func(pod *v1.Pod) bool { return pod.Status.Phase == v1.PodSucceeded })

	echo := p.imagePod(ns, "echo", images.BusyboxImage, v1.RestartPolicyNever,
		[]string{"sh", "-c", "while read l; do echo echo:$l; done; echo stdin closed"}, nil)
	echo.Spec.Containers[0].Stdin, echo.Spec.Containers[0].StdinOnce = true, true
	p.create(t, echo)
	p.waitRunning(t, ns, "echo")
	out, errOut, code = p.kubectl(t, "a\nb\n", nil, "-n", ns, "attach", "echo", "-c", "c", "-i")
	if code != 0 || !strings.Contains(out, "echo:a\necho:b\n") {
		t.Errorf("kubectl attach -i: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	done := p.waitPod(t, ns, "echo", 30*time.Second, "succeeded once its stdin closed", func(pod *v1.Pod) bool {
		return pod.Status.Phase == v1.PodSucceeded
	})
	if term := terminated(done, "c"); term == nil || term.ExitCode != 0 {
		t.Errorf("echo terminated %+v, want exit 0", term)
	}
	p.waitLogs(t, ns, "echo", "c", 10*time.Second, "echo:a", "echo:b", "stdin closed")

	// kubectl run -it on a terminal (script gives kubectl one), as a user
	// types it; --rm deletes the pod afterwards.
	cmdline := fmt.Sprintf("%s kubectl --kubeconfig %s -n %s run shell -it --rm --restart=Never --image=%s --image-pull-policy=IfNotPresent --command -- sh -c 'read x; echo tty-got:$x'",
		binary, filepath.Join(p.DataDir, "admin.kubeconfig"), ns, images.BusyboxImage)
	term := exec.Command("script", "-qec", cmdline, "/dev/null")
	term.Stdin = strings.NewReader("hello\r")
	termOut, err := term.CombinedOutput()
	if err != nil || !strings.Contains(string(termOut), "tty-got:hello") {
		t.Errorf("kubectl run -it on a terminal: %v, output %q", err, termOut)
	}
	p.waitGone(t, ns, "shell", 60*time.Second)

	tty := p.imagePod(ns, "tty", images.BusyboxImage, v1.RestartPolicyNever,
		[]string{"sh", "-c", "[ -t 0 ] && [ -t 1 ] && echo on a terminal; stty size"}, nil)
	tty.Spec.Containers[0].Stdin, tty.Spec.Containers[0].TTY = true, true
	p.create(t, tty)
	p.waitPod(t, ns, "tty", 30*time.Second, "succeeded", func(pod *v1.Pod) bool { return pod.Status.Phase == v1.PodSucceeded })
	p.waitLogs(t, ns, "tty", "c", 10*time.Second, "on a terminal")
}
