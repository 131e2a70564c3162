package lifecycle

import (
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// res is requests and limits of cpu and memory ("" leaves one unset).
func res(cpuReq, memReq, cpuLim, memLim string) v1.ResourceRequirements {
	var r v1.ResourceRequirements
	set := func(l *v1.ResourceList, name v1.ResourceName, v string) {
		if v == "" {
			return
		}
		if *l == nil {
			*l = v1.ResourceList{}
		}
		(*l)[name] = resource.MustParse(v)
	}
	set(&r.Requests, v1.ResourceCPU, cpuReq)
	set(&r.Requests, v1.ResourceMemory, memReq)
	set(&r.Limits, v1.ResourceCPU, cpuLim)
	set(&r.Limits, v1.ResourceMemory, memLim)
	return r
}

func withResources(name string, r v1.ResourceRequirements, policies ...v1.ContainerResizePolicy) podOpt {
	return modify(name, func(c *v1.Container) {
		c.Resources = r
		c.ResizePolicy = policies
	})
}

func restartOn(name v1.ResourceName) v1.ContainerResizePolicy {
	return v1.ContainerResizePolicy{ResourceName: name, RestartPolicy: v1.RestartContainer}
}

func resize(r Resize) func(*Snapshot) { return func(s *Snapshot) { s.Resize = r } }

type alloc = map[string]v1.ResourceRequirements

var (
	small = res("20m", "35Mi", "20m", "35Mi")
	big   = res("25m", "40Mi", "25m", "40Mi")
)

// The allocation and actuation rules of in-place resize (KEP-1287), as the
// kubelet applies them.
func TestResizePlan(t *testing.T) {
	for _, tc := range []struct {
		name        string
		pod         *v1.Pod
		recs        recs
		resize      Resize
		wantActions string
		// wantPending and wantInProgress: the conditions' reasons ("-":
		// absent, "" present without reason).
		wantPending, wantInProgress string
	}{
		{
			name: "nothing allocated differs: no action, no condition",
			pod:  newPod(containers("c"), withResources("c", small)),
			recs: recs{"c": rec(running("1", 0))}, resize: Resize{Allocated: alloc{"c": small}},
			wantPending: "-", wantInProgress: "-",
		},
		{
			name: "a new allocation is actuated in place (NotRequired by default)",
			pod:  newPod(containers("c"), withResources("c", big)),
			recs: recs{"c": rec(running("1", 0))}, resize: Resize{Allocated: alloc{"c": big}, Actuated: alloc{"c": small}},
			wantActions: "resize c", wantPending: "-", wantInProgress: "",
		},
		{
			name: "equivalent quantities are no resize (1000m is 1)",
			pod:  newPod(containers("c"), withResources("c", res("1", "", "", ""))),
			recs: recs{"c": rec(running("1", 0))}, resize: Resize{Allocated: alloc{"c": res("1000m", "", "", "")}, Actuated: alloc{"c": res("1", "", "", "")}},
			wantPending: "-", wantInProgress: "-",
		},
		{
			name:        "decreases come before increases",
			pod:         newPod(containers("up", "down"), withResources("up", big), withResources("down", small)),
			recs:        recs{"up": rec(running("1", 0)), "down": rec(running("2", 0))},
			resize:      Resize{Allocated: alloc{"up": big, "down": small}, Actuated: alloc{"up": small, "down": big}},
			wantActions: "resize down resize up", wantPending: "-", wantInProgress: "",
		},
		{
			name: "resizePolicy RestartContainer for a changed resource restarts the container",
			pod:  newPod(containers("c"), withResources("c", big, restartOn(v1.ResourceMemory))),
			recs: recs{"c": rec(running("1", 0))}, resize: Resize{Allocated: alloc{"c": big}, Actuated: alloc{"c": small}},
			wantActions: "kill c(30s)[resize]", wantPending: "-", wantInProgress: "",
		},
		{
			name:        "RestartContainer for a resource that did not change: in place",
			pod:         newPod(containers("c"), withResources("c", res("25m", "35Mi", "25m", "35Mi"), restartOn(v1.ResourceMemory))),
			recs:        recs{"c": rec(running("1", 0))},
			resize:      Resize{Allocated: alloc{"c": res("25m", "35Mi", "25m", "35Mi")}, Actuated: alloc{"c": small}},
			wantActions: "resize c", wantPending: "-", wantInProgress: "",
		},
		{
			name:        "a container stopped for a resize starts again at once, whatever the restart policy",
			pod:         newPod(containers("c"), policy(v1.RestartPolicyOnFailure), withResources("c", big, restartOn(v1.ResourceCPU))),
			recs:        recs{"c": {Current: exited("1", 0, 0), ResizeRestart: true}},
			resize:      Resize{Allocated: alloc{"c": big}},
			wantActions: "start c#1", wantPending: "-", wantInProgress: "",
		},
		{
			name: "while resizes are in flight nothing more is planned",
			pod:  newPod(containers("c"), withResources("c", big)),
			recs: recs{"c": rec(running("1", 0))}, resize: Resize{Allocated: alloc{"c": big}, Actuated: alloc{"c": small}, InFlight: true},
			wantPending: "-", wantInProgress: "",
		},
		{
			name: "a failed actuation is PodResizeInProgress with reason Error, and is tried again",
			pod:  newPod(containers("c"), withResources("c", big)),
			recs: recs{"c": rec(running("1", 0))}, resize: Resize{Allocated: alloc{"c": big}, Actuated: alloc{"c": small}, Error: "boom"},
			wantActions: "resize c", wantPending: "-", wantInProgress: "Error",
		},
		{
			name:        "a resize that could not be allocated is pending; the allocation stays actuated",
			pod:         newPod(containers("c"), withResources("c", big)),
			recs:        recs{"c": rec(running("1", 0))},
			resize:      Resize{Allocated: alloc{"c": small}, Pending: &ResizePending{Reason: ReasonResizeDeferred, Message: "Node didn't have enough resource: cpu"}},
			wantPending: "Deferred", wantInProgress: "-",
		},
		{
			name: "a container not running is not resized: its next instance gets the allocation",
			pod:  newPod(containers("c"), withResources("c", big)),
			recs: recs{"c": rec(exited("1", 0, 1))}, resize: Resize{Allocated: alloc{"c": big}, Actuated: alloc{"c": small}},
			wantActions: "start c#1", wantPending: "-", wantInProgress: "-",
		},
		{
			name:        "a sidecar is resizable",
			pod:         newPod(sidecars("s"), containers("c"), withResources("s", big)),
			recs:        recs{"s": rec(running("1", 0)), "c": rec(running("2", 0))},
			resize:      Resize{Allocated: alloc{"s": big, "c": {}}, Actuated: alloc{"s": small}},
			wantActions: "resize s", wantPending: "-", wantInProgress: "",
		},
		{
			name: "a terminating pod is not resized",
			pod:  newPod(containers("c"), withResources("c", big)),
			recs: recs{"c": rec(running("1", 0))}, resize: Resize{Allocated: alloc{"c": big}, Actuated: alloc{"c": small}},
			wantActions: "kill c(28s)", wantPending: "-", wantInProgress: "-",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mods := []func(*Snapshot){resize(tc.resize)}
			if tc.name == "a terminating pod is not resized" {
				mods = append(mods, terminating(Termination{Since: t0, Grace: podGrace(tc.pod)}))
			}
			p := Compute(snap(tc.pod, tc.recs, mods...))
			if got := actionsString(p.Actions); got != tc.wantActions {
				t.Errorf("actions %q, want %q", got, tc.wantActions)
			}
			for ct, want := range map[v1.PodConditionType]string{v1.PodResizePending: tc.wantPending, v1.PodResizeInProgress: tc.wantInProgress} {
				c := conditionOf(p.Status.Conditions, ct)
				switch {
				case want == "-" && c != nil:
					t.Errorf("condition %s %q: %s, want none", ct, c.Reason, c.Message)
				case want != "-" && c == nil:
					t.Errorf("no condition %s, want reason %q", ct, want)
				case c != nil && (c.Reason != want || c.Status != v1.ConditionTrue):
					t.Errorf("condition %s: %s %q, want True %q", ct, c.Status, c.Reason, want)
				}
			}
		})
	}
}

// The status shows what a running container runs with (resources) and
// what it is allocated (allocatedResources); a container not running shows
// its allocation; one never created neither.
func TestResizeStatusResources(t *testing.T) {
	pod := newPod(containers("run", "gone", "new"), withResources("run", big), withResources("gone", big), withResources("new", big))
	p := Compute(snap(pod, recs{"run": rec(running("1", 0)), "gone": rec(exited("2", 0, 0))},
		resize(Resize{Allocated: alloc{"run": big, "gone": big, "new": big}, Actuated: alloc{"run": small, "gone": small}})))
	run := status(t, p, "run")
	if run.Resources == nil || !sameCPUAndMemory(*run.Resources, small) || !run.AllocatedResources.Memory().Equal(resource.MustParse("40Mi")) {
		t.Errorf("running container: resources %v allocated %v; want the actuated %v and the allocated requests", run.Resources, run.AllocatedResources, small)
	}
	if gone := status(t, p, "gone"); gone.Resources == nil || !sameCPUAndMemory(*gone.Resources, big) {
		t.Errorf("exited container: resources %v, want its allocation %v", gone.Resources, big)
	}
	if n := status(t, p, "new"); n.Resources != nil || n.AllocatedResources != nil {
		t.Errorf("container never created: resources %v allocated %v, want none", n.Resources, n.AllocatedResources)
	}
	// Unset requests or limits stay unset (the API compares them with the spec's).
	only := newPod(containers("c"), withResources("c", res("20m", "", "", "")))
	st := status(t, Compute(snap(only, recs{"c": rec(running("1", 0))})), "c")
	if st.Resources == nil || st.Resources.Limits != nil || st.Resources.Requests.Cpu().MilliValue() != 20 {
		t.Errorf("cpu request only: resources %+v, want requests {cpu: 20m} and no limits", st.Resources)
	}
}

// The decision on a resize the node cannot take: Deferred unless the
// admission says it can never fit.
func TestResizeVerdict(t *testing.T) {
	if v := ResizeVerdict("", ""); v != nil {
		t.Errorf("admitted: %+v, want allocate", v)
	}
	if v := ResizeVerdict("OutOfcpu", "Node didn't have enough resource: cpu, requested: 3000, used: 100, capacity: 2000"); v == nil || v.Reason != "Deferred" || v.Message == "" {
		t.Errorf("out of cpu: %+v, want Deferred with the message", v)
	}
	if v := ResizeVerdict("Infeasible", "x"); v == nil || v.Reason != "Infeasible" {
		t.Errorf("infeasible: %+v", v)
	}
	pod := newPod(containers("c"), sidecars("s"), inits("i"), withResources("c", big), withResources("s", big), withResources("i", big))
	if ResizeRequested(pod, AllocationOf(pod)) {
		t.Errorf("a pod as allocated asks for a resize")
	}
	if !ResizeRequested(pod, alloc{"c": small}) {
		t.Errorf("a bigger spec than allocated asks for no resize")
	}
	if got := AllocatedPod(pod, alloc{"c": small, "s": small}); !sameCPUAndMemory(got.Spec.Containers[0].Resources, small) ||
		!sameCPUAndMemory(got.Spec.InitContainers[0].Resources, small) || !sameCPUAndMemory(pod.Spec.Containers[0].Resources, big) {
		t.Errorf("AllocatedPod: %v, %v (the pod given must stay as it was)", got.Spec.Containers[0].Resources, got.Spec.InitContainers[0].Resources)
	}
	if _, ok := AllocationOf(pod)["i"]; ok {
		t.Errorf("an init container that is not a sidecar is allocated: it cannot be resized")
	}
}

// Retries: a deferred resize is looked at again after ResizeDeferredRetry;
// a failed actuation is not planned again before NotBefore, when the plan
// wakes; the end of PodResizeInProgress is the ResizeCompleted event.
func TestResizeRetriesAndCompletion(t *testing.T) {
	pod := newPod(containers("c"), withResources("c", big))
	now := t0.Add(2 * time.Second)
	p := Compute(snap(pod, recs{"c": rec(running("1", 0))},
		resize(Resize{Allocated: alloc{"c": small}, Pending: &ResizePending{Reason: ReasonResizeDeferred}})))
	if want := now.Add(ResizeDeferredRetry); !p.WakeAt.Equal(want) {
		t.Errorf("deferred: wake at %v, want %v", p.WakeAt, want)
	}

	retry := now.Add(ResizeErrorRetry)
	p = Compute(snap(pod, recs{"c": rec(running("1", 0))},
		resize(Resize{Allocated: alloc{"c": big}, Actuated: alloc{"c": small}, Error: "boom", NotBefore: retry})))
	if len(p.Actions) != 0 || !p.WakeAt.Equal(retry) || condition(t, p, v1.PodResizeInProgress).Reason != "Error" {
		t.Errorf("before NotBefore: actions %q wake %v, want none and a wake at %v, with the error shown", actionsString(p.Actions), p.WakeAt, retry)
	}

	inProgress := newPod(containers("c"), withResources("c", big), func(p *v1.Pod) {
		p.Generation = 2
		p.Status.Conditions = []v1.PodCondition{{Type: v1.PodResizeInProgress, Status: v1.ConditionTrue, ObservedGeneration: 2}}
	})
	p = Compute(snap(inProgress, recs{"c": rec(running("1", 0))}, resize(Resize{Allocated: alloc{"c": big}, Actuated: alloc{"c": big}})))
	if c := conditionOf(p.Status.Conditions, v1.PodResizeInProgress); c != nil {
		t.Errorf("actuated: PodResizeInProgress still there")
	}
	var completed []Event
	for _, e := range p.Events {
		if e.Reason == EventResizeCompleted {
			completed = append(completed, e)
		}
	}
	if len(completed) != 1 || !strings.HasPrefix(completed[0].Message, `Pod resize completed: {"containers":[{"name":"c","resources":{"limits":{"cpu":"25m","memory":"40Mi"}`) ||
		!strings.HasSuffix(completed[0].Message, `"generation":2}`) {
		t.Errorf("events %+v, want one ResizeCompleted with upstream's summary", completed)
	}
}
