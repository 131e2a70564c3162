package lifecycle

import (
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestContainerStatus(t *testing.T) {
	inBackOff := func(s *Snapshot) {
		s.BackOff = map[string]BackOffEntry{"c1": {Delay: 20 * time.Second, LastUpdate: t0}}
	}
	tests := []struct {
		name    string
		pod     *v1.Pod
		recs    recs
		mods    []func(*Snapshot)
		c       string
		state   string
		last    string // lastState, "none" when empty
		restart int32
		ready   bool
		started bool
		id      string
		msg     string // waiting or terminated message, when checked
	}{
		{name: "§3: no instance yet -> waiting ContainerCreating",
			pod: newPod(containers("c1")), c: "c1", state: "waiting:ContainerCreating", last: "none"},
		{name: "§3: regular container while init containers run -> waiting PodInitializing",
			pod: newPod(inits("init1"), containers("c1")), recs: recs{"init1": rec(running("i", 0))},
			c: "c1", state: "waiting:PodInitializing", last: "none"},
		// Upstream's default waiting state: PodInitializing for every container
		// of a pod with init containers, ContainerCreating in a pod without.
		{name: "§3 default waiting: first init container not started yet -> waiting PodInitializing",
			pod: newPod(inits("init1"), containers("c1")), c: "init1", state: "waiting:PodInitializing", last: "none"},
		{name: "§3 default waiting: first init container being created -> waiting PodInitializing",
			pod: newPod(inits("init1"), containers("c1")), recs: recs{"init1": {Starting: true}},
			c: "init1", state: "waiting:PodInitializing", last: "none"},
		{name: "§3 default waiting: second init container behind a crash-looping first -> waiting PodInitializing",
			pod:  newPod(inits("init1", "init2"), containers("c1")),
			recs: recs{"init1": {Current: exited("b", 1, 1), Previous: exited("a", 0, 1)}},
			mods: []func(*Snapshot){func(s *Snapshot) {
				s.BackOff = map[string]BackOffEntry{"init1": {Delay: 20 * time.Second, LastUpdate: t0}}
			}},
			c: "init2", state: "waiting:PodInitializing", last: "none"},
		{name: "§3 default waiting: sidecar not started yet -> waiting PodInitializing",
			pod: newPod(sidecars("sc"), containers("c1")), c: "sc", state: "waiting:PodInitializing", last: "none"},
		{name: "§3 default waiting: init container created, postStart in flight -> waiting PodInitializing",
			pod:  newPod(inits("init1"), containers("c1")),
			recs: recs{"init1": rec(&Instance{ID: "podvisor://x", State: StateRunning})},
			c:    "init1", state: "waiting:PodInitializing", last: "none", id: "podvisor://x"},
		{name: "§3 default waiting: regular container of an initialized pod not started yet -> waiting PodInitializing",
			pod:  newPod(inits("init1"), containers("c1", "c2")),
			recs: recs{"init1": rec(exited("i", 0, 0)), "c1": rec(running("x", 0))},
			c:    "c2", state: "waiting:PodInitializing", last: "none"},
		{name: "§3 default waiting: a volume not ready in a pod with init containers -> waiting PodInitializing",
			pod:  newPod(inits("init1"), containers("c1")),
			recs: recs{"init1": {Waiting: &v1.ContainerStateWaiting{Reason: "ContainerCreating"}, WaitingSince: t0}},
			c:    "init1", state: "waiting:PodInitializing", last: "none"},
		{name: "§3: a recorded reason wins over the default in a pod with init containers",
			pod: newPod(inits("init1"), containers("c1")),
			recs: recs{"init1": {Waiting: &v1.ContainerStateWaiting{Reason: "CreateContainerConfigError",
				Message: `configmap "x" not found`}, WaitingSince: t0}},
			c: "init1", state: "waiting:CreateContainerConfigError", last: "none", msg: `configmap "x" not found`},
		{name: "§3: a start in flight -> waiting ContainerCreating",
			pod: newPod(containers("c1")), recs: recs{"c1": {Starting: true}}, c: "c1", state: "waiting:ContainerCreating", last: "none"},
		{name: "§3: instance created, not started -> waiting ContainerCreating",
			pod:  newPod(containers("c1")),
			recs: recs{"c1": rec(&Instance{ID: "podvisor://x", State: StateCreated})},
			c:    "c1", state: "waiting:ContainerCreating", last: "none", id: "podvisor://x"},
		{name: "§3 §7: running but postStart not done -> waiting ContainerCreating, not started",
			pod:  newPod(containers("c1")),
			recs: recs{"c1": rec(&Instance{ID: "podvisor://x", State: StateRunning})},
			c:    "c1", state: "waiting:ContainerCreating", last: "none", id: "podvisor://x"},
		{name: "§3: running, no probes -> running, started and ready",
			pod: newPod(containers("c1")), recs: recs{"c1": rec(running("x", 0))},
			c: "c1", state: "running", last: "none", ready: true, started: true, id: "podvisor://x"},
		{name: "§6: startup probe not passed -> running, not started, not ready",
			pod: newPod(containers("c1"), modify("c1", startupProbe)), recs: recs{"c1": rec(running("x", 0))},
			c: "c1", state: "running", last: "none", id: "podvisor://x"},
		{name: "§6: startup probe passed -> started and ready",
			pod: newPod(containers("c1"), modify("c1", startupProbe)), recs: recs{"c1": rec(running("x", 0))},
			mods: []func(*Snapshot){probes(map[string]ProbeState{"c1": {Started: true}})},
			c:    "c1", state: "running", last: "none", ready: true, started: true, id: "podvisor://x"},
		{name: "§6: readiness probe not yet successful -> started, not ready",
			pod: newPod(containers("c1"), modify("c1", readinessProbe)), recs: recs{"c1": rec(running("x", 0))},
			c: "c1", state: "running", last: "none", started: true, id: "podvisor://x"},
		{name: "§6: readiness probe successful -> ready",
			pod: newPod(containers("c1"), modify("c1", readinessProbe)), recs: recs{"c1": rec(running("x", 0))},
			mods: []func(*Snapshot){probes(map[string]ProbeState{"c1": {Ready: true}})},
			c:    "c1", state: "running", last: "none", ready: true, started: true, id: "podvisor://x"},
		{name: "§11: a sidecar follows the regular rules for started/ready",
			pod:  newPod(sidecars("sc"), containers("c1"), modify("sc", readinessProbe)),
			recs: recs{"sc": rec(running("s", 0))},
			c:    "sc", state: "running", last: "none", started: true, id: "podvisor://s"},
		{name: "§3: exit 0, no restart -> terminated Completed",
			pod: newPod(containers("c1"), policy(v1.RestartPolicyNever)), recs: recs{"c1": rec(exited("x", 0, 0))},
			c: "c1", state: "terminated:Completed(0)", last: "none", id: "podvisor://x"},
		{name: "§3: exit 1, no restart -> terminated Error",
			pod: newPod(containers("c1"), policy(v1.RestartPolicyNever)), recs: recs{"c1": rec(exited("x", 0, 1))},
			c: "c1", state: "terminated:Error(1)", last: "none", id: "podvisor://x"},
		{name: "§3: runtime reason and message are kept (StartError 128)",
			pod: newPod(containers("c1"), policy(v1.RestartPolicyNever)),
			recs: recs{"c1": rec(&Instance{ID: "podvisor://x", State: StateExited, ExitCode: 128,
				Reason: "StartError", Message: "exec: \"nope\": not found"})},
			c: "c1", state: "terminated:StartError(128)", last: "none", id: "podvisor://x", msg: "exec: \"nope\": not found"},
		{name: "§3: regular init container completed -> terminated Completed and ready",
			pod: newPod(inits("init1"), containers("c1")), recs: recs{"init1": rec(exited("i", 0, 0))},
			c: "init1", state: "terminated:Completed(0)", last: "none", ready: true, id: "podvisor://i"},
		{name: "§3: could not create -> waiting with the recorded reason",
			pod: newPod(containers("c1")),
			recs: recs{"c1": {Waiting: &v1.ContainerStateWaiting{Reason: "CreateContainerConfigError",
				Message: `couldn't find key k in ConfigMap ns/cm`}, WaitingSince: t0}},
			c: "c1", state: "waiting:CreateContainerConfigError", last: "none", msg: `couldn't find key k in ConfigMap ns/cm`},
		{name: "§3: lastState from Previous while the new instance runs; restartCount = Attempt",
			pod:  newPod(containers("c1")),
			recs: recs{"c1": {Current: running("b", 1), Previous: exited("a", 0, 1)}},
			c:    "c1", state: "running", last: "terminated:Error(1)", restart: 1, ready: true, started: true, id: "podvisor://b"},
		{name: "§4: in back-off -> waiting CrashLoopBackOff, lastState is the crashed instance",
			pod:  newPod(containers("c1")),
			recs: recs{"c1": {Current: exited("b", 1, 2), Previous: exited("a", 0, 1)}},
			mods: []func(*Snapshot){inBackOff},
			c:    "c1", state: "waiting:CrashLoopBackOff", last: "terminated:Error(2)", restart: 1, id: "podvisor://b",
			msg: "back-off 20s restarting failed container=c1 pod=p_ns(u)"},
		{name: "§4: restart due now -> waiting ContainerCreating, lastState is the exited instance",
			pod:  newPod(containers("c1")),
			recs: recs{"c1": rec(exited("a", 0, 1))},
			c:    "c1", state: "waiting:ContainerCreating", last: "terminated:Error(1)", id: "podvisor://a"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := Compute(snap(tc.pod, tc.recs, tc.mods...))
			st := status(t, p, tc.c)
			if got := stateString(st.State); got != tc.state {
				t.Errorf("state = %s, want %s", got, tc.state)
			}
			if got := stateString(st.LastTerminationState); got != tc.last {
				t.Errorf("lastState = %s, want %s", got, tc.last)
			}
			if st.RestartCount != tc.restart {
				t.Errorf("restartCount = %d, want %d", st.RestartCount, tc.restart)
			}
			if st.Ready != tc.ready {
				t.Errorf("ready = %v, want %v", st.Ready, tc.ready)
			}
			if st.Started == nil || *st.Started != tc.started {
				t.Errorf("started = %v, want %v", st.Started, tc.started)
			}
			if st.ContainerID != tc.id {
				t.Errorf("containerID = %q, want %q", st.ContainerID, tc.id)
			}
			if st.Image != "img-"+tc.c || st.ImageID != "" || st.Name != tc.c {
				t.Errorf("name/image/imageID = %q/%q/%q", st.Name, st.Image, st.ImageID)
			}
			if tc.msg != "" {
				msg := ""
				if st.State.Waiting != nil {
					msg = st.State.Waiting.Message
				} else if st.State.Terminated != nil {
					msg = st.State.Terminated.Message
				}
				if msg != tc.msg {
					t.Errorf("message = %q, want %q", msg, tc.msg)
				}
			}
		})
	}
}

func TestTerminatedFields(t *testing.T) {
	in := &Instance{ID: "podvisor://x", State: StateExited, ExitCode: 137, Signal: 9, Reason: "OOMKilled",
		Message: "m", StartedAt: t0.Add(1500 * time.Millisecond), FinishedAt: t0.Add(3 * time.Second)}
	got := terminated(in)
	want := v1.ContainerStateTerminated{ExitCode: 137, Signal: 9, Reason: "OOMKilled", Message: "m",
		StartedAt: metav1.NewTime(t0.Add(time.Second)), FinishedAt: metav1.NewTime(t0.Add(3 * time.Second)), ContainerID: "podvisor://x"}
	if !got.StartedAt.Equal(&want.StartedAt) || !got.FinishedAt.Equal(&want.FinishedAt) ||
		got.ExitCode != want.ExitCode || got.Signal != want.Signal || got.Reason != want.Reason ||
		got.Message != want.Message || got.ContainerID != want.ContainerID {
		t.Errorf("§3 terminated fields: got %+v, want %+v (times in whole seconds)", *got, want)
	}
}

func TestFinalStatusesOfATerminatedPod(t *testing.T) {
	// §8 after upstream's status manager: once the pod ended, a container that
	// never reported a termination is terminated ContainerStatusUnknown (137).
	pod := newPod(inits("init1"), containers("c1", "c2"))
	p := Compute(snap(pod, recs{"init1": rec(exited("i", 0, 0)), "c1": rec(exited("a", 0, 143))},
		terminating(Termination{Since: t0, Grace: 30 * time.Second})))
	if !p.Done || p.Status.Phase != v1.PodFailed {
		t.Fatalf("done=%v phase=%s, want done Failed", p.Done, p.Status.Phase)
	}
	if got := stateString(status(t, p, "c2").State); got != "terminated:ContainerStatusUnknown(137)" {
		t.Errorf("c2 = %s", got)
	}
	if got := stateString(status(t, p, "c1").State); got != "terminated:Error(143)" {
		t.Errorf("c1 = %s", got)
	}

	// Not initialized: the regular containers stay waiting.
	pod = newPod(inits("init1", "init2"), containers("c1"))
	p = Compute(snap(pod, recs{"init1": rec(running("i", 0))}, terminating(Termination{Since: t0})))
	if p.Done {
		t.Fatalf("done with init1 running")
	}
	p = Compute(snap(pod, recs{"init1": rec(exited("i", 0, 143))}, terminating(Termination{Since: t0})))
	for name, want := range map[string]string{
		"init1": "terminated:Error(143)", "init2": "waiting:PodInitializing", "c1": "waiting:PodInitializing",
	} {
		if got := stateString(status(t, p, name).State); got != want {
			t.Errorf("%s = %s, want %s", name, got, want)
		}
	}
}

// §3 image and imageID: the spec's image until an instance exists; then
// what the runtime reports for the newest instance (its tag and digest), as
// upstream; a runtime without images reports none, and the spec's stays.
func TestContainerStatusImage(t *testing.T) {
	withImage := func(in *Instance) *Instance {
		in.Image, in.ImageID = "docker.io/library/busybox:1.36", "docker.io/library/busybox@sha256:b0b0"
		return in
	}
	failing := ContainerRecord{Current: withImage(exited("a", 0, 1)),
		Waiting: &v1.ContainerStateWaiting{Reason: "ErrImagePull"}, WaitingSince: t0}
	for _, tc := range []struct {
		name           string
		rec            ContainerRecord
		image, imageID string
	}{
		{"no instance yet", ContainerRecord{}, "img-c1", ""},
		{"waiting for its image", ContainerRecord{Waiting: &v1.ContainerStateWaiting{Reason: "ErrImagePull"}, WaitingSince: t0}, "img-c1", ""},
		{"running, runtime with images", rec(withImage(running("a", 0))), "docker.io/library/busybox:1.36", "docker.io/library/busybox@sha256:b0b0"},
		{"exited, its replacement's image failing", failing, "docker.io/library/busybox:1.36", "docker.io/library/busybox@sha256:b0b0"},
		{"running, runtime without images", rec(running("a", 0)), "img-c1", ""},
	} {
		st := status(t, Compute(snap(newPod(containers("c1")), recs{"c1": tc.rec})), "c1")
		if st.Image != tc.image || st.ImageID != tc.imageID {
			t.Errorf("%s: image %q imageID %q, want %q %q", tc.name, st.Image, st.ImageID, tc.image, tc.imageID)
		}
	}
}
