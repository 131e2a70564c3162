package lifecycle

import (
	"fmt"
	"math"
	"math/rand"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// FuzzCompute drives Compute the way a pod worker does, with a fake runtime
// and probe manager whose every move (start stages, exits, kills, probe
// results, clock ticks, deletions, agent restarts) is chosen by the fuzz
// input, and checks after each step what docs/lifecycle.md promises
// whatever happens:
//   - Compute does not panic;
//   - restartCount never decreases, a terminal phase never changes (§2 rule 7),
//     a recorded exit never changes and its container ID never runs again (§3);
//   - nothing is started that is alive or busy, nor after the pod began
//     terminating, passed its active deadline or became terminal (§8);
//     a start's attempt is the previous one plus one; an exited container
//     is started again only if its restart policy says so (§4);
//   - init containers start in order, regular ones after initialization (§11);
//     a regular init container never runs again once the pod is initialized,
//     unless all containers were restarted since (KEP-5532);
//   - a restart of all containers (KEP-5532) follows an exit its first
//     matching rule asks it for, in a pod that is not ending; it resets only
//     containers with an instance or a failed start, with nothing else in
//     the plan, and starts nothing until every container is removed, after
//     which the pod starts again from its first init container; an
//     instance's attempt is always above every earlier one's of its
//     container (fuzz_restartall_test.go);
//   - nothing is killed twice at once or after it exited; a kill's grace is
//     never negative; sidecars stop after the others, in reverse order (§8);
//   - every container has a status with exactly one state (§3);
//     lastTransitionTime moves only with status; others' conditions stay (§5);
//   - WakeAt is never now or in the past (the worker would spin);
//   - a pod with nothing alive or in flight either does something, sets a
//     timer, or is Done (it is never stuck), and Done means terminal;
//   - once deleted, a pod whose runtime cooperates reaches Done.
func FuzzCompute(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte{0, 0, 0, 0, 0, 0, 0, 0, 1})
	f.Add([]byte("\x02\x03\x01\x04\x05\x00\x00\x10\x20\x30\x40\x50\x60\x70\x80\x90\xa0\xb0\xc0\xd0\xe0\xf0"))
	// Deterministic pseudo-random inputs of a few lengths: a seed corpus that
	// reaches deep into pod lives without a long hand-written list.
	rng := rand.New(rand.NewSource(18))
	for _, n := range []int{16, 64, 128, 256, 512, 1024, 2048} {
		for range 4 {
			b := make([]byte, n)
			rng.Read(b)
			f.Add(b)
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		w := newFuzzWorld(t, &fuzzBytes{b: data})
		w.run()
	})
}

// fuzzBytes hands out the fuzz input; once it is used up it gives zeros.
type fuzzBytes struct{ b []byte }

func (r *fuzzBytes) byte() byte {
	if len(r.b) == 0 {
		return 0
	}
	x := r.b[0]
	r.b = r.b[1:]
	return x
}

func (r *fuzzBytes) intn(n int) int {
	if n <= 1 {
		return 0
	}
	return int(r.byte()) % n
}

func (r *fuzzBytes) bool() bool { return r.byte()&1 == 1 }

func pick[T any](r *fuzzBytes, xs ...T) T { return xs[r.intn(len(xs))] }

const fuzzGate = v1.PodConditionType("example.com/gate")

// fuzzPod is an API-valid pod: 0–3 init containers (some sidecars), 1–3
// regular ones, probes where the API allows them, pod and container restart
// policies and rules, in a third of the pods rules that restart all
// containers on init, sidecar and regular containers, grace periods from 0
// to the int64 limit, active deadlines from 1 to the int32 limit, maybe a
// readiness gate.
func fuzzPod(r *fuzzBytes) *v1.Pod {
	p := newPod()
	p.Spec.RestartPolicy = pick(r, v1.RestartPolicyAlways, v1.RestartPolicyOnFailure, v1.RestartPolicyNever, "")
	p.Spec.TerminationGracePeriodSeconds = pick(r, nil, ptr.To[int64](0), ptr.To[int64](1), ptr.To[int64](30),
		ptr.To[int64](86400*365*100), ptr.To[int64](math.MaxInt64/int64(time.Second)+1), ptr.To[int64](math.MaxInt64))
	p.Spec.ActiveDeadlineSeconds = pick(r, nil, nil, ptr.To[int64](1), ptr.To[int64](5), ptr.To[int64](300), ptr.To[int64](math.MaxInt32))
	if r.bool() {
		p.Spec.ReadinessGates = []v1.PodReadinessGate{{ConditionType: fuzzGate}}
	}
	restartAll := r.intn(3) == 0 // some containers restart all (KEP-5532)
	probe := func() *v1.Probe {
		if r.intn(3) != 0 {
			return nil
		}
		return &v1.Probe{PeriodSeconds: pick[int32](r, 1, 10, math.MaxInt32),
			TerminationGracePeriodSeconds: pick(r, nil, ptr.To[int64](1), ptr.To[int64](math.MaxInt64))}
	}
	for i := range r.intn(4) {
		c := v1.Container{Name: fmt.Sprintf("init%d", i), Image: "img"}
		if r.bool() { // a sidecar: the only init container that may have probes
			c.RestartPolicy = ptr.To(v1.ContainerRestartPolicyAlways)
			c.StartupProbe, c.ReadinessProbe, c.LivenessProbe = probe(), probe(), probe()
		}
		if restartAll && r.bool() { // rules need a container restartPolicy
			if c.RestartPolicy == nil {
				c.RestartPolicy = ptr.To(pick(r, v1.ContainerRestartPolicyNever, v1.ContainerRestartPolicyOnFailure))
			}
			c.RestartPolicyRules = fuzzRestartAllRules(r)
		}
		p.Spec.InitContainers = append(p.Spec.InitContainers, c)
	}
	for i := range 1 + r.intn(3) {
		c := v1.Container{Name: fmt.Sprintf("c%d", i), Image: "img"}
		c.StartupProbe, c.ReadinessProbe, c.LivenessProbe = probe(), probe(), probe()
		switch r.intn(5) { // KEP-5307
		case 1:
			c.RestartPolicy = ptr.To(v1.ContainerRestartPolicyNever)
		case 2:
			c.RestartPolicy = ptr.To(v1.ContainerRestartPolicyOnFailure)
		case 3:
			c.RestartPolicy = ptr.To(v1.ContainerRestartPolicyAlways)
		case 4:
			c.RestartPolicy = ptr.To(v1.ContainerRestartPolicyNever)
			c.RestartPolicyRules = []v1.ContainerRestartRule{{Action: v1.ContainerRestartRuleActionRestart,
				ExitCodes: &v1.ContainerRestartRuleOnExitCodes{
					Operator: pick(r, v1.ContainerRestartRuleOnExitCodesOpIn, v1.ContainerRestartRuleOnExitCodesOpNotIn),
					Values:   []int32{pick[int32](r, 0, 1, 42, 137)}}}}
		}
		if restartAll && r.intn(3) == 0 {
			if c.RestartPolicy == nil {
				c.RestartPolicy = ptr.To(pick(r, v1.ContainerRestartPolicyNever, v1.ContainerRestartPolicyOnFailure, v1.ContainerRestartPolicyAlways))
			}
			c.RestartPolicyRules = append(c.RestartPolicyRules, fuzzRestartAllRules(r)...)
		}
		p.Spec.Containers = append(p.Spec.Containers, c)
	}
	return p
}

// fuzzStart is a start in flight: stage 0 before the container exists, 1
// created, 2 running with postStart in flight.
type fuzzStart struct {
	attempt int32
	stage   int
	old     bool // the sandbox died meanwhile: the instance is in the dead one
}

// fuzzWorld is the fake worker, runtime and probe manager around Compute,
// plus what the invariants remember of earlier steps.
type fuzzWorld struct {
	t        *testing.T
	r        *fuzzBytes
	s        Snapshot
	ids      int
	hook     map[string]bool // container has a postStart hook
	starts   map[string]*fuzzStart
	steps    int
	deletion *int64 // deletionGracePeriodSeconds once deleted
	gone     bool   // force-deleted: the API object is gone

	restarts map[string]int32
	exits    map[string]v1.ContainerStateTerminated // by container ID
	terminal v1.PodPhase
	gate     *v1.PodCondition // the readiness gate condition another writer set
	history  []string         // what happened, for failure messages

	// Restart of all containers (KEP-5532).
	resets    map[string]bool  // a reset in flight, by container
	resetting bool             // a reset was planned and some container is not removed yet
	tried     map[string]bool  // containers started since the pod (re)started from its first init container
	regular   bool             // a regular container was started since then: the pod is initialized
	created   map[string]int32 // the attempt of the newest instance ever created, by container
}

func newFuzzWorld(t *testing.T, r *fuzzBytes) *fuzzWorld {
	pod := fuzzPod(r)
	cfg := Config{
		InitialBackOff: pick(r, 0, time.Second, 10*time.Second),
		MaxBackOff:     pick(r, 0, time.Second, 20*time.Second, 300*time.Second),
		BackOffReset:   pick(r, 0, time.Minute, 10*time.Minute),
	}
	w := &fuzzWorld{t: t, r: r,
		s: Snapshot{Pod: pod, Now: t0, Config: cfg, SandboxReady: true, HostIP: "10.0.0.1", PodIP: "10.0.0.1",
			Containers: map[string]ContainerRecord{}, Probes: map[string]ProbeState{}},
		hook: map[string]bool{}, starts: map[string]*fuzzStart{},
		restarts: map[string]int32{}, exits: map[string]v1.ContainerStateTerminated{},
		resets: map[string]bool{}, tried: map[string]bool{}, created: map[string]int32{},
	}
	for _, c := range allContainers(pod) {
		w.hook[c.Name] = r.bool()
	}
	w.logf("pod %s", podSummary(pod))
	return w
}

func allContainers(pod *v1.Pod) []v1.Container {
	return append(append([]v1.Container{}, pod.Spec.InitContainers...), pod.Spec.Containers...)
}

func podSummary(pod *v1.Pod) string {
	var b strings.Builder
	fmt.Fprintf(&b, "policy=%q", pod.Spec.RestartPolicy)
	if g := pod.Spec.TerminationGracePeriodSeconds; g != nil {
		fmt.Fprintf(&b, " grace=%d", *g)
	}
	if d := pod.Spec.ActiveDeadlineSeconds; d != nil {
		fmt.Fprintf(&b, " deadline=%d", *d)
	}
	for _, c := range allContainers(pod) {
		fmt.Fprintf(&b, " %s", c.Name)
		if c.RestartPolicy != nil {
			fmt.Fprintf(&b, "(%s)", *c.RestartPolicy)
		}
		if c.StartupProbe != nil {
			b.WriteString("+startup")
		}
		if c.ReadinessProbe != nil {
			b.WriteString("+readiness")
		}
		for _, r := range c.RestartPolicyRules {
			fmt.Fprintf(&b, "[%s %s %v]", r.Action, r.ExitCodes.Operator, r.ExitCodes.Values)
		}
	}
	return b.String()
}

func (w *fuzzWorld) logf(format string, args ...any) {
	w.history = append(w.history, fmt.Sprintf("+%s ", w.s.Now.Sub(t0))+fmt.Sprintf(format, args...))
}

func (w *fuzzWorld) failf(format string, args ...any) {
	w.t.Helper()
	w.t.Fatalf("%s\nhistory:\n  %s", fmt.Sprintf(format, args...), strings.Join(w.history, "\n  "))
}

// run plays the input's events, then deletes the pod and lets the runtime
// cooperate until the pod is done.
func (w *fuzzWorld) run() {
	for len(w.r.b) > 0 && w.steps < 400 {
		w.event()
	}
	w.step()
	w.drain()
}

func (w *fuzzWorld) names() []string {
	var out []string
	for _, c := range allContainers(w.s.Pod) {
		out = append(out, c.Name)
	}
	return out
}

// event plays one event chosen by the input. Events that need a container
// in some state pick among the containers in that state, so that most inputs
// get far into a pod's life; terminations are rare for the same reason.
func (w *fuzzWorld) event() {
	switch w.r.intn(16) {
	case 0, 1, 2, 3:
		w.step()
	case 4:
		d := pick(w.r, 0, time.Millisecond, 500*time.Millisecond, time.Second, 2*time.Second, 10*time.Second,
			30*time.Second, 5*time.Minute, 11*time.Minute, 1000*time.Hour)
		w.s.Now = w.s.Now.Add(d)
		w.logf("tick %s", d)
	case 5, 6, 7:
		if name, ok := w.pickWhere(func(r fuzzRecord) bool { return w.starts[r.name] != nil }); ok {
			w.progressStart(name, w.r.intn(4))
		}
	case 8, 9:
		if name, ok := w.pickWhere(func(r fuzzRecord) bool {
			return r.Current != nil && (r.Current.State == StateRunning || r.Current.State == StateUnknown)
		}); ok {
			w.exit(name, pick[int32](w.r, 0, 0, 1, 2, 42, 128, 137, 143, 255), pick[int32](w.r, 0, 0, 9, 15))
		}
	case 10:
		if name, ok := w.pickWhere(func(r fuzzRecord) bool { return r.Stopping }); ok {
			if w.resets[name] {
				w.progressReset(name)
			} else {
				w.completeKill(name, pick[int32](w.r, 137, 143, 0))
			}
		}
	case 11, 12:
		if name, ok := w.pickWhere(func(r fuzzRecord) bool { return r.Current != nil && r.Current.State == StateRunning }); ok {
			w.probe(name)
		}
	case 13:
		w.setGate(pick(w.r, v1.ConditionTrue, v1.ConditionFalse))
	case 14:
		switch w.r.intn(8) {
		case 0:
			if name, ok := w.pickWhere(func(r fuzzRecord) bool { return r.Current != nil && r.Current.State == StateRunning }); ok {
				w.unknown(name)
			}
		case 1:
			w.agentRestart()
		case 2:
			w.sandboxDies()
		}
	case 15:
		switch w.r.intn(16) {
		case 0:
			w.delete(pick(w.r, ptr.To[int64](0), ptr.To[int64](1), ptr.To[int64](30), w.s.Pod.Spec.TerminationGracePeriodSeconds))
		case 1:
			w.shutdown(pick(w.r, 0, time.Second, 20*time.Second))
		case 2:
			if w.s.Termination == nil {
				w.delete(nil) // force delete: the object is gone
			}
		}
	}
}

// pickWhere picks, by the input, one of the containers whose record
// satisfies ok.
func (w *fuzzWorld) pickWhere(ok func(fuzzRecord) bool) (string, bool) {
	var names []string
	for _, n := range w.names() {
		if ok(fuzzRecord{w.s.Containers[n], n}) {
			names = append(names, n)
		}
	}
	if len(names) == 0 {
		return "", false
	}
	return names[w.r.intn(len(names))], true
}

// fuzzRecord is a record with its container's name.
type fuzzRecord struct {
	ContainerRecord
	name string
}

// step runs Compute as the worker does, checks the plan, carries out its
// actions (a start or kill goes in flight) and publishes its status.
func (w *fuzzWorld) step() Plan {
	w.t.Helper()
	w.steps++
	prev := w.s.Pod.Status
	in := w.s
	p := Compute(in)
	w.logf("compute: phase=%s actions=[%s] wake=%v done=%v", p.Status.Phase, actionsString(p.Actions), wakeString(p.WakeAt), p.Done)
	w.checkPlan(in, prev, p)
	w.s.BackOff = p.BackOff
	w.s.Pod = w.s.Pod.DeepCopy()
	w.s.Pod.Status = p.Status
	for _, a := range p.Actions {
		r := w.s.Containers[a.Container]
		switch a.Kind {
		case ActionStart:
			r.Starting = true
			w.starts[a.Container] = &fuzzStart{attempt: a.Attempt}
			w.tried[a.Container] = true
			w.regular = w.regular || !a.Init
		case ActionKill:
			r.Stopping = true
		case ActionReset:
			r.Stopping = true
			w.resets[a.Container] = true
			w.resetting = true
		case ActionRunSandbox:
			w.s.SandboxReady = true // made at once
			w.logf("new sandbox")
			continue
		}
		w.s.Containers[a.Container] = r
	}
	return p
}

func wakeString(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return "+" + t.Sub(t0).String()
}

// progressStart moves a start in flight one stage on; how is up to choice:
// 0 success, 1 failure, 2 failure of another kind.
func (w *fuzzWorld) progressStart(name string, choice int) {
	st := w.starts[name]
	if st == nil {
		return
	}
	r := w.s.Containers[name]
	done := func() {
		r.Starting = false
		delete(w.starts, name)
	}
	switch st.stage {
	case 0:
		switch choice {
		case 1: // as the worker: the spec could not be built or the create failed
			r.Waiting = &v1.ContainerStateWaiting{Reason: pick(w.r, "CreateContainerConfigError", "CreateContainerError"), Message: "boom"}
			r.WaitingSince = w.s.Now
			done()
			w.logf("start %s failed before create", name)
		default:
			w.ids++
			r.Previous = r.Current
			r.Current = &Instance{ID: fmt.Sprintf("podvisor://%d", w.ids), Attempt: st.attempt, State: StateCreated,
				CreatedAt: w.s.Now, PostStartDone: !w.hook[name], OldSandbox: st.old}
			r.Waiting, r.WaitingSince = nil, time.Time{}
			delete(w.s.Probes, name) // the probe manager starts afresh for a new instance
			w.created[name] = st.attempt
			st.stage = 1
			w.logf("created %s %s#%d", name, r.Current.ID, st.attempt)
		}
	case 1:
		cur := *r.Current
		if choice == 1 { // the process could not be started
			cur.State, cur.ExitCode, cur.Reason, cur.Message = StateExited, 128, "StartError", "exec: not found"
			cur.StartedAt, cur.FinishedAt = w.s.Now, w.s.Now
			done()
			w.logf("start %s: StartError", name)
		} else {
			cur.State, cur.StartedAt = StateRunning, w.s.Now
			st.stage = 2
			w.logf("started %s", name)
		}
		r.Current = &cur
	case 2:
		cur := *r.Current
		if choice == 1 && cur.State == StateRunning { // postStart failed: the worker kills the container
			cur.State, cur.ExitCode, cur.Signal, cur.FinishedAt = StateExited, 137, 9, w.s.Now
			w.logf("postStart of %s failed, killed", name)
		} else {
			w.logf("postStart of %s done", name)
		}
		cur.PostStartDone = true
		r.Current = &cur
		done()
	}
	w.s.Containers[name] = r
}

// sandboxDies: the pod's sandbox stops behind the agent's back. Its
// instances (and those being created in it) keep running until stopped;
// the pod runs again from its first init container in a new one.
func (w *fuzzWorld) sandboxDies() {
	if !w.s.SandboxReady {
		return
	}
	w.s.SandboxReady = false
	for name, r := range w.s.Containers {
		if r.Current != nil {
			cur := *r.Current
			cur.OldSandbox = true
			r.Current = &cur
		}
		w.s.Containers[name] = r
	}
	for _, st := range w.starts {
		st.old = true
	}
	w.regular = false
	w.tried = map[string]bool{}
	w.logf("sandbox died")
}

// exit: a running (or unknown) instance ends on its own.
func (w *fuzzWorld) exit(name string, code, signal int32) {
	r := w.s.Containers[name]
	if r.Current == nil || (r.Current.State != StateRunning && r.Current.State != StateUnknown) {
		return
	}
	cur := *r.Current
	cur.State, cur.ExitCode, cur.Signal, cur.FinishedAt = StateExited, code, signal, w.s.Now
	if cur.StartedAt.IsZero() {
		cur.StartedAt = w.s.Now
	}
	r.Current = &cur
	w.s.Containers[name] = r
	w.logf("exit %s code=%d signal=%d", name, code, signal)
}

// unknown: the runtime can no longer tell the state of a running instance.
func (w *fuzzWorld) unknown(name string) {
	r := w.s.Containers[name]
	if r.Current == nil || r.Current.State != StateRunning {
		return
	}
	cur := *r.Current
	cur.State = StateUnknown
	r.Current = &cur
	w.s.Containers[name] = r
	w.logf("state of %s unknown", name)
}

// completeKill ends a kill in flight: the instance exited (if it had not).
func (w *fuzzWorld) completeKill(name string, code int32) {
	r := w.s.Containers[name]
	if !r.Stopping {
		return
	}
	r.Stopping = false
	if cur := r.Current; cur != nil && cur.State != StateExited {
		c := *cur
		c.State, c.ExitCode, c.FinishedAt = StateExited, code, w.s.Now
		if code == 137 {
			c.Signal = 9
		}
		r.Current = &c
	}
	w.s.Containers[name] = r
	w.logf("kill of %s done, exit %d", name, code)
}

func (w *fuzzWorld) probe(name string) {
	r := w.s.Containers[name]
	c, _ := findSpec(w.s.Pod, name)
	if r.Current == nil || r.Current.State != StateRunning || c == nil {
		return
	}
	ps := ProbeState{Started: w.r.bool(), Ready: w.r.bool()}
	if (c.LivenessProbe != nil || c.StartupProbe != nil) && w.r.intn(3) == 0 {
		ps.Unhealthy = true
		ps.KillMessage = "Container " + name + " failed liveness probe, will be restarted"
		probe := c.LivenessProbe
		if probe == nil {
			probe = c.StartupProbe
		}
		ps.Grace = probe.TerminationGracePeriodSeconds
	}
	w.s.Probes[name] = ps
	w.logf("probe %s %+v", name, ps)
}

func findSpec(pod *v1.Pod, name string) (*v1.Container, bool) {
	for _, list := range [][]v1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for i := range list {
			if list[i].Name == name {
				return &list[i], true
			}
		}
	}
	return nil, false
}

// delete is an API deletion with that grace (nil: a force deletion, the
// object is gone), as the worker turns it into a Termination: a second,
// shorter one shortens the termination in progress (§8).
func (w *fuzzWorld) delete(grace *int64) {
	g := time.Duration(0)
	w.gone = w.gone || grace == nil
	if grace != nil {
		g = Seconds(*grace)
		if w.s.Pod.DeletionTimestamp == nil {
			pod := w.s.Pod.DeepCopy()
			pod.DeletionTimestamp = &metav1.Time{Time: w.s.Now.Add(g)}
			pod.DeletionGracePeriodSeconds = grace
			w.s.Pod = pod
			w.deletion = grace
		}
	}
	switch t := w.s.Termination; {
	case t == nil:
		w.s.Termination = &Termination{Since: w.s.Now, Grace: g}
	case t.Reason == "" && g < t.Grace-w.s.Now.Sub(t.Since):
		w.s.Termination = &Termination{Since: w.s.Now, Grace: g}
	}
	w.logf("delete grace=%v", g)
}

// shutdown is the agent's own termination (node shutdown), as TerminatePod.
func (w *fuzzWorld) shutdown(grace time.Duration) {
	t := w.s.Termination
	if t != nil && t.Reason != "" {
		return
	}
	if t != nil {
		grace = min(grace, t.Grace-w.s.Now.Sub(t.Since))
	}
	w.s.Termination = &Termination{Since: w.s.Now, Grace: max(grace, 0), Reason: "Terminated",
		Message: "Pod was terminated in response to imminent node shutdown."}
	w.logf("shutdown grace=%v", grace)
}

// setGate is another writer's PATCH of the readiness gate's condition.
func (w *fuzzWorld) setGate(status v1.ConditionStatus) {
	if len(w.s.Pod.Spec.ReadinessGates) == 0 {
		return
	}
	pod := w.s.Pod.DeepCopy()
	c := v1.PodCondition{Type: fuzzGate, Status: status, LastTransitionTime: apiTime(w.s.Now)}
	if old := conditionOf(pod.Status.Conditions, fuzzGate); old != nil {
		*old = c
	} else {
		pod.Status.Conditions = append(pod.Status.Conditions, c)
	}
	w.s.Pod = pod
	w.gate = &c
	w.logf("gate %s", status)
}

// agentRestart: a new worker for the pod, as after an agent restart. What
// was in flight is forgotten (an instance already created stays, its
// postStart counted done), so are waiting reasons, back-off and probe
// results; a deletion restarts its termination with the full grace (§8.7),
// and a pod whose object is gone only has what is left stopped.
func (w *fuzzWorld) agentRestart() {
	for name, r := range w.s.Containers {
		r.Starting, r.Stopping = false, false
		r.Waiting, r.WaitingSince = nil, time.Time{}
		if r.Current != nil && !r.Current.PostStartDone {
			cur := *r.Current
			cur.PostStartDone = true
			r.Current = &cur
		}
		w.s.Containers[name] = r
	}
	w.starts = map[string]*fuzzStart{}
	w.resets = map[string]bool{}
	w.s.BackOff = nil
	w.s.Probes = map[string]ProbeState{}
	w.s.Termination = nil
	switch {
	case w.deletion != nil:
		w.s.Termination = &Termination{Since: w.s.Now, Grace: Seconds(*w.deletion)}
	case w.gone:
		w.s.Termination = &Termination{Since: w.s.Now}
	}
	w.logf("agent restart")
}

// drain deletes the pod (unless it is terminating already) and lets the
// runtime do everything asked of it at once, moving the clock to each
// WakeAt, until the pod is done.
func (w *fuzzWorld) drain() {
	w.t.Helper()
	if w.s.Termination == nil {
		w.delete(ptr.To[int64](30))
	}
	for range 50 {
		p := w.step()
		if p.Done && len(w.starts) == 0 {
			return
		}
		for _, name := range w.names() {
			for w.starts[name] != nil {
				w.progressStart(name, 0)
			}
			for w.resets[name] {
				w.progressReset(name)
			}
			w.completeKill(name, 137)
		}
		if !p.WakeAt.IsZero() {
			w.s.Now = p.WakeAt
		}
	}
	w.failf("a deleted pod whose runtime does everything asked is not done after 50 steps")
}

// checkPlan checks p, computed from in, against the invariants of the
// file's comment; prev is the status published before.
func (w *fuzzWorld) checkPlan(in Snapshot, prev v1.PodStatus, p Plan) {
	w.t.Helper()
	pod := in.Pod
	st := p.Status

	// §2 rule 7.
	if isTerminal(prev.Phase) && st.Phase != prev.Phase {
		w.failf("terminal phase %s became %s", prev.Phase, st.Phase)
	}
	if p.Done && !isTerminal(st.Phase) {
		w.failf("done with phase %s", st.Phase)
	}
	if p.Done {
		for name, r := range in.Containers {
			if r.Starting || r.Stopping || (r.Current != nil && r.Current.State != StateExited) {
				w.failf("done while %s is alive or busy: %+v", name, r)
			}
		}
	}
	if t := in.Termination; p.Done && t != nil && t.Reason != "" && st.Phase != v1.PodFailed && st.Phase != v1.PodSucceeded {
		w.failf("terminated with reason %s, phase %s", t.Reason, st.Phase)
	}

	w.checkStatuses(pod, st)
	w.checkConditions(prev, st)
	w.checkActions(in, prev, p)

	if !p.WakeAt.IsZero() && !p.WakeAt.After(in.Now) {
		w.failf("WakeAt %v is not after now %v", p.WakeAt, in.Now)
	}
	idle := len(p.Actions) == 0 && p.WakeAt.IsZero() && !p.Done
	for _, r := range in.Containers {
		if r.Starting || r.Stopping || (r.Current != nil && r.Current.State != StateExited) {
			idle = false
		}
	}
	if idle {
		w.failf("stuck: nothing alive or in flight, no action, no timer, not done (phase %s)", st.Phase)
	}
}

// checkStatuses: one status per container, in spec order, with exactly one
// state (§3); restartCount never decreases; a recorded exit never changes and
// its ID never shows running again.
func (w *fuzzWorld) checkStatuses(pod *v1.Pod, st v1.PodStatus) {
	w.t.Helper()
	for _, pair := range []struct {
		spec []v1.Container
		sts  []v1.ContainerStatus
	}{{pod.Spec.InitContainers, st.InitContainerStatuses}, {pod.Spec.Containers, st.ContainerStatuses}} {
		if len(pair.spec) != len(pair.sts) {
			w.failf("%d statuses for %d containers", len(pair.sts), len(pair.spec))
		}
		for i := range pair.sts {
			cs := &pair.sts[i]
			if cs.Name != pair.spec[i].Name {
				w.failf("status %d is %s, want %s", i, cs.Name, pair.spec[i].Name)
			}
			n := 0
			for _, set := range []bool{cs.State.Waiting != nil, cs.State.Running != nil, cs.State.Terminated != nil} {
				if set {
					n++
				}
			}
			if n != 1 {
				w.failf("%s: %d states set: %+v", cs.Name, n, cs.State)
			}
			if cs.RestartCount < w.restarts[cs.Name] {
				w.failf("%s: restartCount went from %d to %d", cs.Name, w.restarts[cs.Name], cs.RestartCount)
			}
			w.restarts[cs.Name] = cs.RestartCount
			if r := cs.State.Running; r != nil {
				if _, ok := w.exits[cs.ContainerID]; ok {
					w.failf("%s: %s runs again after it terminated", cs.Name, cs.ContainerID)
				}
			}
			for _, term := range []*v1.ContainerStateTerminated{cs.State.Terminated, cs.LastTerminationState.Terminated} {
				if term == nil || term.ContainerID == "" {
					continue
				}
				if old, ok := w.exits[term.ContainerID]; ok && !equalTerminated(&old, term) {
					w.failf("%s: exit of %s changed from %+v to %+v", cs.Name, term.ContainerID, old, *term)
				}
				w.exits[term.ContainerID] = *term.DeepCopy()
			}
		}
	}
}

// equalTerminated compares two terminated states field by field.
func equalTerminated(a, b *v1.ContainerStateTerminated) bool {
	return a.ExitCode == b.ExitCode && a.Signal == b.Signal && a.Reason == b.Reason && a.Message == b.Message &&
		a.StartedAt.Equal(&b.StartedAt) && a.FinishedAt.Equal(&b.FinishedAt) && a.ContainerID == b.ContainerID
}

// checkConditions: lastTransitionTime moves only when status does; a
// condition of another writer is never dropped (§5).
func (w *fuzzWorld) checkConditions(prev, st v1.PodStatus) {
	w.t.Helper()
	for _, c := range st.Conditions {
		if old := conditionOf(prev.Conditions, c.Type); old != nil && old.Status == c.Status && !old.LastTransitionTime.Equal(&c.LastTransitionTime) {
			w.failf("condition %s stayed %s but lastTransitionTime moved", c.Type, c.Status)
		}
	}
	for _, old := range prev.Conditions {
		if !owned(old.Type) && conditionOf(st.Conditions, old.Type) == nil {
			w.failf("condition %s of another writer was dropped", old.Type)
		}
	}
	if w.gate != nil && conditionOf(st.Conditions, fuzzGate) == nil {
		w.failf("readiness gate condition was dropped")
	}
}

func (w *fuzzWorld) checkActions(in Snapshot, prev v1.PodStatus, p Plan) {
	w.t.Helper()
	seen := map[string]bool{}
	specOrder := w.names()
	index := map[string]int{}
	for i, n := range specOrder {
		index[n] = i
	}
	deadline, hasDeadline := activeDeadline(in)
	ending := in.Termination != nil || isTerminal(prev.Phase) || (hasDeadline && !in.Now.Before(deadline))
	w.checkResets(in, prev, p, ending)
	staleAlive := false
	for _, r := range in.Containers {
		if r.Current != nil && r.Current.OldSandbox && (r.Starting || r.Stopping || r.Current.State != StateExited) {
			staleAlive = true
		}
	}
	for _, a := range p.Actions {
		if a.Kind == ActionRunSandbox {
			w.checkRunSandbox(in, p, staleAlive, ending)
			continue
		}
		r := in.Containers[a.Container]
		c, ok := findSpec(in.Pod, a.Container)
		if !ok {
			w.failf("action on unknown container %s", a.Container)
		}
		if seen[a.Container] {
			w.failf("two actions for %s in one plan", a.Container)
		}
		seen[a.Container] = true
		if r.Starting || r.Stopping {
			w.failf("%v on %s while it is busy", a.Kind, a.Container)
		}
		isInit := index[a.Container] < len(in.Pod.Spec.InitContainers)
		if a.Init != isInit {
			w.failf("%s: Init=%v", a.Container, a.Init)
		}
		switch a.Kind {
		case ActionStart:
			if r.Current != nil && r.Current.State != StateExited {
				w.failf("start of %s whose instance is alive (%v)", a.Container, r.Current.State)
			}
			if in.Termination != nil || isTerminal(prev.Phase) || isTerminal(p.Status.Phase) {
				w.failf("start of %s in a terminating or terminal pod", a.Container)
			}
			if hasDeadline && !in.Now.Before(deadline) {
				w.failf("start of %s past the active deadline", a.Container)
			}
			if w.resetting {
				w.failf("start of %s while a restart of all containers is under way", a.Container)
			}
			if !in.SandboxReady || staleAlive {
				w.failf("start of %s without a ready sandbox, or while a container of the dead one is alive", a.Container)
			}
			if isInit && !isSidecar(c) && w.regular {
				w.failf("init container %s runs again after the pod was initialized, with no restart of all containers since", a.Container)
			}
			// A container never tried, or removed by a restart of all
			// containers, starts with the restartCount it shows.
			want := w.restarts[a.Container]
			if r.Current != nil {
				want = r.Current.Attempt + 1
				rerun := isInit && r.Current.OldSandbox // a new sandbox runs init containers again
				if !rerun && !fuzzMayRestart(in.Pod, c, isInit, r.Current.ExitCode) {
					w.failf("restart of %s after exit %d against its restart policy", a.Container, r.Current.ExitCode)
				}
			}
			if a.Attempt != want {
				w.failf("start of %s with attempt %d, want %d", a.Container, a.Attempt, want)
			}
			if last, ok := w.created[a.Container]; ok && a.Attempt <= last {
				w.failf("start of %s with attempt %d, not above its earlier instance's %d", a.Container, a.Attempt, last)
			}
			w.checkStartOrder(in, a, isInit)
		case ActionKill:
			if r.Current == nil || r.Current.State == StateExited {
				w.failf("kill of %s that is not alive", a.Container)
			}
			if a.Grace < 0 {
				w.failf("kill of %s with negative grace %v", a.Container, a.Grace)
			}
			if isInit && isSidecar(c) && (in.Termination != nil || isTerminal(p.Status.Phase)) {
				// §8 step 3: sidecars after every other container, in reverse order.
				for _, other := range allContainers(in.Pod) {
					o := in.Containers[other.Name]
					alive := o.Starting || o.Stopping || (o.Current != nil && o.Current.State != StateExited)
					if !alive || other.Name == a.Container {
						continue
					}
					otherSidecar := index[other.Name] < len(in.Pod.Spec.InitContainers) && isSidecar(&other)
					if !otherSidecar || index[other.Name] > index[a.Container] {
						w.failf("sidecar %s stopped while %s is alive", a.Container, other.Name)
					}
				}
			}
		case ActionReset:
			if r.Current == nil && r.Waiting == nil {
				w.failf("reset of %s, which has neither an instance nor a failed start", a.Container)
			}
			if ending {
				w.failf("reset of %s in a terminating or terminal pod", a.Container)
			}
		default:
			w.failf("action of unknown kind %v", a.Kind)
		}
	}
}

// checkRunSandbox: a new sandbox is made only when the pod's is not ready,
// nothing of the dead one is alive, the pod is not ending, and a pod that
// never restarts had no container yet.
func (w *fuzzWorld) checkRunSandbox(in Snapshot, p Plan, staleAlive, ending bool) {
	w.t.Helper()
	if in.SandboxReady || staleAlive || ending || isTerminal(p.Status.Phase) {
		w.failf("new sandbox: ready=%v staleAlive=%v ending=%v phase=%s", in.SandboxReady, staleAlive, ending, p.Status.Phase)
	}
	if in.Pod.Spec.RestartPolicy == v1.RestartPolicyNever {
		for name, r := range in.Containers {
			if r.Current != nil {
				w.failf("new sandbox for a pod that never restarts, whose %s ran", name)
			}
		}
	}
}

// checkStartOrder: the first start of a container needs every init
// container before it (every one, for a regular container) completed, or
// started for a sidecar (§11).
func (w *fuzzWorld) checkStartOrder(in Snapshot, a Action, isInit bool) {
	w.t.Helper()
	if in.Containers[a.Container].Current != nil {
		return
	}
	for _, ic := range in.Pod.Spec.InitContainers {
		if isInit && ic.Name == a.Container {
			return
		}
		r := in.Containers[ic.Name]
		cur := r.Current
		if isSidecar(&ic) {
			started := cur != nil && cur.State == StateRunning && cur.PostStartDone && !r.Starting &&
				(ic.StartupProbe == nil || in.Probes[ic.Name].Started)
			if !started && !w.anyRegularTried(in) {
				w.failf("start of %s before sidecar %s started", a.Container, ic.Name)
			}
			continue
		}
		if (cur == nil || cur.State != StateExited || cur.ExitCode != 0) && !w.anyRegularTried(in) {
			w.failf("start of %s before init container %s completed", a.Container, ic.Name)
		}
	}
}

// anyRegularTried: a regular container was tried already since the pod
// (re)started from its first init container, after which init containers do
// not hold anything back (they are not run again).
func (w *fuzzWorld) anyRegularTried(in Snapshot) bool {
	for _, c := range in.Pod.Spec.Containers {
		r := in.Containers[c.Name]
		if (r.Current != nil || r.Waiting != nil || r.Starting) && w.tried[c.Name] {
			return true
		}
	}
	return false
}

// fuzzMayRestart is §4 and §11 read from the spec, independently of
// wantsRestart: may c be started again in place after exiting with code?
// Not when its first matching rule restarts all containers: it is then
// removed and started afresh with the others (KEP-5532).
func fuzzMayRestart(pod *v1.Pod, c *v1.Container, isInit bool, code int32) bool {
	rule := fuzzMatchingRule(c, code)
	if rule != nil && rule.Action == v1.ContainerRestartRuleActionRestartAllContainers {
		return false
	}
	if isInit && isSidecar(c) {
		return true
	}
	if isInit && code == 0 {
		return false
	}
	policy := string(pod.Spec.RestartPolicy)
	if c.RestartPolicy != nil {
		if rule != nil {
			return true
		}
		policy = string(*c.RestartPolicy)
	}
	switch policy {
	case "Never":
		return false
	case "OnFailure":
		return code != 0
	}
	return true
}
