package e2e

import (
	"context"
	"encoding/json"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.opentelemetry.io/otel/trace/noop"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	internalapi "k8s.io/cri-api/pkg/apis"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	criclient "k8s.io/cri-client/pkg"

	"github.com/podvisor/podvisor/internal/runtime/containerd"
	"github.com/podvisor/podvisor/test/images"
)

// podSandboxes returns the pod's sandboxes as podvisor's containerd has
// them, through the CRI (as crictl pods would show them).
func (p *Podvisor) podSandboxes(t *testing.T, uid string) []*runtimeapi.PodSandbox {
	t.Helper()
	rs := p.criClient(t)
	list, err := rs.ListPodSandbox(context.Background(), &runtimeapi.PodSandboxFilter{
		LabelSelector: map[string]string{"io.kubernetes.pod.uid": uid}})
	if err != nil {
		t.Fatal(err)
	}
	return list
}

func (p *Podvisor) criClient(t *testing.T) internalapi.RuntimeService {
	t.Helper()
	paths, err := containerd.PathsFor(p.DataDir)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rs, err := criclient.NewRemoteRuntimeService(ctx, paths.Endpoint(), 10*time.Second, noop.NewTracerProvider(), false)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rs.Close(context.Background()) })
	return rs
}

// killSandbox kills the pause process of the pod's ready sandbox, as when
// it crashes or the OOM killer picks it; it returns the sandbox's ID.
func (p *Podvisor) killSandbox(t *testing.T, pod *v1.Pod) string {
	t.Helper()
	var ready *runtimeapi.PodSandbox
	for _, sb := range p.podSandboxes(t, string(pod.UID)) {
		if sb.State == runtimeapi.PodSandboxState_SANDBOX_READY {
			ready = sb
		}
	}
	if ready == nil {
		t.Fatalf("pod %s has no ready sandbox", pod.Name)
	}
	pid := p.sandboxPid(t, ready.Id)
	if comm, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/comm"); !strings.Contains(string(comm), "pause") {
		t.Fatalf("process %d of sandbox %s is %q, not the pause process", pid, ready.Id, comm)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	t.Logf("killed the pause process %d of sandbox %s", pid, ready.Id)
	return ready.Id
}

// sandboxPid is the pause process of sandbox id, from the CRI's verbose status.
func (p *Podvisor) sandboxPid(t *testing.T, id string) int {
	t.Helper()
	resp, err := p.criClient(t).PodSandboxStatus(context.Background(), id, true)
	if err != nil {
		t.Fatal(err)
	}
	var info struct {
		Pid int `json:"pid"`
	}
	if err := json.Unmarshal([]byte(resp.Info["info"]), &info); err != nil || info.Pid <= 1 {
		t.Fatalf("pid of sandbox %s: %v (info %q)", id, err, resp.Info["info"])
	}
	return info.Pid
}

// A pod sandbox that dies behind podvisor's back (its pause process
// killed), as upstream's kubelet handles it: the containers still running
// in it are stopped, the event SandboxChanged says "Pod sandbox changed, it
// will be killed and re-created.", the dead sandbox is stopped (its network
// released), and the pod runs again in a new sandbox, init containers
// first, each container counting one restart. A pod with restartPolicy
// Never gets no new sandbox: it fails with the exits it has.
func TestContainerdDeadSandboxIsReplaced(t *testing.T) {
	t.Parallel()
	p := NewContainerdPodvisor(t)
	p.Start()
	ns := p.Namespace("sandbox")
	ctx := context.Background()

	pod := p.pod(ns, "always", v1.RestartPolicyAlways, v1.Container{Name: "app", Image: images.BusyboxImage,
		ImagePullPolicy: v1.PullIfNotPresent, Command: []string{"sh", "-c", "trap 'exit 0' TERM; while true; do sleep 1; done"}})
	pod.Spec.InitContainers = []v1.Container{{Name: "init", Image: images.BusyboxImage, ImagePullPolicy: v1.PullIfNotPresent,
		Command: []string{"true"}}}
	never := p.pod(ns, "never", v1.RestartPolicyNever, v1.Container{Name: "app", Image: images.BusyboxImage,
		ImagePullPolicy: v1.PullIfNotPresent, Command: []string{"sleep", "3600"}})
	never.Spec.TerminationGracePeriodSeconds = new(int64) // sleep ignores SIGTERM as PID 1: no need to wait 30 s
	created := p.create(t, pod)
	createdNever := p.create(t, never)
	before := p.waitRunning(t, ns, "always")
	p.waitRunning(t, ns, "never")

	deadID := p.killSandbox(t, created)
	p.waitEventMessage(t, ns, "always", "SandboxChanged", "Pod sandbox changed, it will be killed and re-created.")
	after := p.waitPod(t, ns, "always", 90*time.Second, "running again in a new sandbox", func(pod *v1.Pod) bool {
		return len(pod.Status.ContainerStatuses) == 1 && pod.Status.ContainerStatuses[0].State.Running != nil &&
			pod.Status.ContainerStatuses[0].RestartCount == 1 && pod.Status.InitContainerStatuses[0].RestartCount == 1 &&
			pod.Status.InitContainerStatuses[0].State.Terminated != nil
	})
	app := after.Status.ContainerStatuses[0]
	if last := app.LastTerminationState.Terminated; last == nil || last.ContainerID != before.Status.ContainerStatuses[0].ContainerID || last.ExitCode != 0 {
		t.Errorf("app's last state %+v, want the first instance, stopped by SIGTERM (exit 0)", last)
	}
	if after.Status.PodIP == "" {
		t.Errorf("no pod IP in the new sandbox")
	}
	var readyIDs, stopped []string
	for _, sb := range p.podSandboxes(t, string(created.UID)) {
		if sb.State == runtimeapi.PodSandboxState_SANDBOX_READY {
			readyIDs = append(readyIDs, sb.Id)
		} else {
			stopped = append(stopped, sb.Id)
		}
	}
	if len(readyIDs) != 1 || readyIDs[0] == deadID || len(stopped) != 1 || stopped[0] != deadID {
		t.Errorf("ready sandboxes %v, stopped %v: want one new ready one and the dead %s", readyIDs, stopped, deadID)
	}
	// The dead sandbox's network was released: CRI reports no IP for it.
	st, err := p.criClient(t).PodSandboxStatus(ctx, deadID, false)
	if err != nil {
		t.Fatal(err)
	}
	if ip := st.GetStatus().GetNetwork().GetIp(); ip != "" {
		t.Errorf("the dead sandbox still has IP %s", ip)
	}
	if c := podConditionOf(after, v1.PodReadyToStartContainers); c == nil || c.Status != v1.ConditionTrue {
		t.Errorf("PodReadyToStartContainers %+v, want True again", c)
	}

	p.killSandbox(t, createdNever)
	failed := p.waitPod(t, ns, "never", 60*time.Second, "Failed", func(pod *v1.Pod) bool { return pod.Status.Phase == v1.PodFailed })
	if term := failed.Status.ContainerStatuses[0].State.Terminated; term == nil || term.ExitCode != 137 {
		t.Errorf("never's container %+v, want terminated by SIGKILL (137)", failed.Status.ContainerStatuses[0].State)
	}
	sbs := p.podSandboxes(t, string(createdNever.UID))
	if len(sbs) != 1 {
		t.Errorf("%d sandboxes for the Never pod, want only the dead one", len(sbs))
	}
	evs, err := p.Admin.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "reason=SandboxChanged,involvedObject.name=never"})
	if err != nil {
		t.Fatal(err)
	}
	if len(evs.Items) != 0 {
		t.Errorf("SandboxChanged on the Never pod, which gets no new sandbox: %q", evs.Items[0].Message)
	}
}

func podConditionOf(pod *v1.Pod, t v1.PodConditionType) *v1.PodCondition {
	for i := range pod.Status.Conditions {
		if pod.Status.Conditions[i].Type == t {
			return &pod.Status.Conditions[i]
		}
	}
	return nil
}
