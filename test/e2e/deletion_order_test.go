package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podvisor/podvisor/internal/host/proctree"
)

// A pod leaves the API only once its termination is complete, as the
// kubelet's status manager deletes a pod only once its resources are
// reclaimed: when the watch delivers DELETED, every sandbox of the pod is
// stopped (StopPodSandbox returned: NOTREADY, its network released, its
// pause process gone) or already removed. The sandboxes are read through
// the CRI the moment the watch delivers the deletion.
func TestContainerdPodIsDeletedAfterItsSandboxStopped(t *testing.T) {
	t.Parallel()
	p := NewContainerdPodvisor(t)
	p.Start()
	requireContainerdBinary(t, p.DataDir)
	ns := p.Namespace("delorder")
	ctx := context.Background()
	pods := p.Admin.CoreV1().Pods(ns)

	const n = 5
	for i := range n {
		p.create(t, p.pod(ns, fmt.Sprintf("p%d", i), v1.RestartPolicyAlways,
			sh("app", "trap 'exit 0' TERM; while true; do sleep 1; done")))
	}
	type sandbox struct{ id, pod string }
	var sandboxes []sandbox
	pauses := map[string]int{} // sandbox ID -> its pause process
	rs := p.criClient(t)
	for i := range n {
		pod := p.waitRunning(t, ns, fmt.Sprintf("p%d", i))
		for _, sb := range p.podSandboxes(t, string(pod.UID)) {
			sandboxes = append(sandboxes, sandbox{sb.Id, pod.Name})
			pauses[sb.Id] = p.sandboxPid(t, sb.Id)
		}
	}
	if len(sandboxes) != n {
		t.Fatalf("%d sandboxes for %d running pods", len(sandboxes), n)
	}

	list, err := pods.List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	w, err := pods.Watch(ctx, metav1.ListOptions{ResourceVersion: list.ResourceVersion})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	for i := range n {
		if err := pods.Delete(ctx, fmt.Sprintf("p%d", i), metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	var violations []string
	deleted := map[string]bool{}
	deadline := time.After(3 * time.Minute)
	for len(deleted) < n {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				t.Fatalf("the watch ended after %d of %d deletions", len(deleted), n)
			}
			pod, isPod := ev.Object.(*v1.Pod)
			if ev.Type != watch.Deleted || !isPod {
				continue
			}
			deleted[pod.Name] = true
			// Read at once, before anything else: the check is of the
			// moment the pod left the API.
			for _, sb := range sandboxes {
				if sb.pod == pod.Name {
					if why := sandboxNotStopped(ctx, rs, sb.id, pauses[sb.id]); why != "" {
						violations = append(violations, fmt.Sprintf("pod %s left the API while its sandbox %s %s", pod.Name, sb.id, why))
					}
				}
			}
		case <-deadline:
			t.Fatalf("only %d of %d pods deleted after 3 minutes", len(deleted), n)
		}
	}
	for _, v := range violations {
		t.Error(v)
	}
	t.Logf("%d pods deleted, %d while their sandbox was not stopped yet", n, len(violations))
}

// sandboxNotStopped says how sandbox id is not stopped yet, or "" when it
// is stopped (or gone): NOTREADY, no IP, its pause process pid dead.
func sandboxNotStopped(ctx context.Context, rs interface {
	PodSandboxStatus(context.Context, string, bool) (*runtimeapi.PodSandboxStatusResponse, error)
}, id string, pid int) string {
	var why []string
	if proctree.Alive(pid) {
		why = append(why, fmt.Sprintf("had its pause process %d alive", pid))
	}
	resp, err := rs.PodSandboxStatus(ctx, id, false)
	switch {
	case status.Code(err) == codes.NotFound:
	case err != nil:
		why = append(why, "could not be read: "+err.Error())
	default:
		if st := resp.GetStatus().GetState(); st != runtimeapi.PodSandboxState_SANDBOX_NOTREADY {
			why = append(why, "was "+st.String())
		}
		if ip := resp.GetStatus().GetNetwork().GetIp(); ip != "" {
			why = append(why, "still had its IP "+ip)
		}
	}
	return strings.Join(why, ", ")
}
