package lifecycle

import (
	"flag"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"
)

// Golden scripts (testdata/scripts/*.txt), in the style of etcd raft's
// testdata: each command drives one pod through Compute and a fake runtime
// (script_runtime_test.go), and is followed by what the agent would do and
// publish. They read as the specification; each names the sections of
// docs/lifecycle.md it checks.
//
// Commands:
//
//	pod [restart=Always|OnFailure|Never] [grace=S] [deadline=S]
//	  one line per container, in spec order:
//	  init|sidecar|container NAME [startup] [readiness] [liveness]
//	    [prestop=DURATION] [ignore-term] [start-error]
//	  or a Pod in YAML
//	sync                      Compute, then carry out its actions
//	exit NAME [code=N] [reason=R]
//	tick DURATION | tick wake the clock moves on (to the plan's WakeAt)
//	probe NAME [startup=ok|fail] [readiness=ok|fail] [liveness=ok|fail]
//	delete [grace=S]          a deletion through the API (again: a second one)
//	sandbox-dies
//	condition TYPE=True|False another writer patches the pod's status
//
// go test ./internal/agent/lifecycle -run TestScripts -update rewrites the
// expectations from what the code does: read the diff before committing it.

var update = flag.Bool("update", false, "rewrite the golden scripts' expectations (same as datadriven's -rewrite)")

func TestScripts(t *testing.T) {
	if *update {
		if err := flag.Set("rewrite", "true"); err != nil {
			t.Fatal(err)
		}
	}
	datadriven.Walk(t, "testdata/scripts", func(t *testing.T, path string) {
		sc := &script{}
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			out, err := sc.run(d)
			if err != nil {
				d.Fatalf(t, "%v", err)
			}
			return out
		})
	})
}

// script is the state of one script: the snapshot the agent keeps and the
// last plan.
type script struct {
	s    Snapshot
	rt   *fakeRuntime
	plan Plan
}

func (sc *script) run(d *datadriven.TestData) (string, error) {
	if d.Cmd != "pod" && sc.s.Pod == nil {
		return "", fmt.Errorf("%s before pod", d.Cmd)
	}
	switch d.Cmd {
	case "pod":
		return sc.pod(d)
	case "sync":
		return sc.sync(), nil
	case "exit":
		code, reason := int32(0), ""
		for _, a := range d.CmdArgs[1:] {
			switch a.Key {
			case "code":
				n, err := strconv.Atoi(a.Vals[0])
				if err != nil {
					return "", err
				}
				code = int32(n)
			case "reason":
				reason = a.Vals[0]
			}
		}
		return "", sc.rt.exit(&sc.s, name(d), code, reason)
	case "tick":
		return sc.tick(d)
	case "probe":
		return "", sc.probe(d)
	case "delete":
		return sc.delete(d)
	case "sandbox-dies":
		sandboxDies(&sc.s)
		return "", nil
	case "condition":
		return "", sc.condition(d)
	}
	return "", fmt.Errorf("unknown command %q", d.Cmd)
}

func name(d *datadriven.TestData) string {
	if len(d.CmdArgs) == 0 {
		return ""
	}
	return d.CmdArgs[0].Key
}

func (sc *script) pod(d *datadriven.TestData) (string, error) {
	sc.rt = &fakeRuntime{traits: map[string]traits{}}
	p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "u"}}
	if strings.Contains(d.Input, "spec:") {
		if err := yaml.UnmarshalStrict([]byte(d.Input), p); err != nil {
			return "", err
		}
		p.Name, p.Namespace, p.UID = "p", "ns", "u"
	} else if err := sc.compactPod(p, d.Input); err != nil {
		return "", err
	}
	for _, a := range d.CmdArgs {
		n, _ := strconv.ParseInt(a.Vals[0], 10, 64)
		switch a.Key {
		case "restart":
			p.Spec.RestartPolicy = v1.RestartPolicy(a.Vals[0])
		case "grace":
			p.Spec.TerminationGracePeriodSeconds = ptr.To(n)
		case "deadline":
			p.Spec.ActiveDeadlineSeconds = ptr.To(n)
		default:
			return "", fmt.Errorf("pod: unknown argument %s", a.Key)
		}
	}
	if p.Spec.RestartPolicy == "" {
		p.Spec.RestartPolicy = v1.RestartPolicyAlways
	}
	for _, c := range append(append([]v1.Container{}, p.Spec.InitContainers...), p.Spec.Containers...) {
		if h := c.Lifecycle; h != nil && h.PreStop != nil {
			tr := sc.rt.traits[c.Name]
			tr.hasPreStop = true
			if h.PreStop.Sleep != nil {
				tr.preStop = Seconds(h.PreStop.Sleep.Seconds)
			}
			sc.rt.traits[c.Name] = tr
		}
	}
	sc.s = Snapshot{Pod: p, Now: t0, Config: DefaultConfig(), SandboxReady: true,
		HostIP: "10.0.0.1", PodIP: "10.1.0.5",
		Containers: map[string]ContainerRecord{}, Probes: map[string]ProbeState{}}
	return "", nil
}

// compactPod reads the one-line-per-container form.
func (sc *script) compactPod(p *v1.Pod, in string) error {
	for _, line := range strings.Split(strings.TrimSpace(in), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			return fmt.Errorf("pod: bad line %q", line)
		}
		c := v1.Container{Name: f[1], Image: "img-" + f[1]}
		var tr traits
		for _, opt := range f[2:] {
			k, v, _ := strings.Cut(opt, "=")
			switch k {
			case "startup":
				c.StartupProbe = &v1.Probe{}
			case "readiness":
				c.ReadinessProbe = &v1.Probe{}
			case "liveness":
				c.LivenessProbe = &v1.Probe{}
			case "prestop":
				dur, err := time.ParseDuration(v)
				if err != nil {
					return err
				}
				c.Lifecycle = &v1.Lifecycle{PreStop: &v1.LifecycleHandler{Sleep: &v1.SleepAction{Seconds: int64(dur / time.Second)}}}
			case "ignore-term":
				tr.ignoreTerm = true
			case "start-error":
				tr.startError = true
			default:
				return fmt.Errorf("pod: unknown option %q", opt)
			}
		}
		sc.rt.traits[c.Name] = tr
		switch f[0] {
		case "init":
			p.Spec.InitContainers = append(p.Spec.InitContainers, c)
		case "sidecar":
			c.RestartPolicy = ptr.To(v1.ContainerRestartPolicyAlways)
			p.Spec.InitContainers = append(p.Spec.InitContainers, c)
		case "container":
			p.Spec.Containers = append(p.Spec.Containers, c)
		default:
			return fmt.Errorf("pod: unknown kind %q", f[0])
		}
	}
	return nil
}

// sync runs Compute on the snapshot, publishes the status (the next
// snapshot's pod status) and carries out the actions.
func (sc *script) sync() string {
	s := &sc.s
	p := Compute(*s)
	sc.plan = p
	s.BackOff = p.BackOff
	s.Pod = s.Pod.DeepCopy()
	s.Pod.Status = p.Status
	var rt []string
	for _, a := range p.Actions {
		switch a.Kind {
		case ActionStart:
			rt = append(rt, sc.rt.start(s, a.Container, a.Attempt))
		case ActionKill:
			rt = append(rt, sc.rt.kill(s, a.Container, a.Grace))
		case ActionReset:
			s.Containers[a.Container] = ContainerRecord{}
		case ActionRunSandbox:
			s.SandboxReady = true
			rt = append(rt, "sandbox ready")
		}
	}
	rt = append(rt, sc.rt.advance(s, s.Now)...)
	return renderPlan(p, rt)
}

func (sc *script) tick(d *datadriven.TestData) (string, error) {
	to := sc.s.Now
	switch arg := name(d); arg {
	case "wake":
		if sc.plan.WakeAt.IsZero() {
			return "", fmt.Errorf("tick wake: the last plan has no WakeAt")
		}
		to = sc.plan.WakeAt
	default:
		dur, err := time.ParseDuration(arg)
		if err != nil {
			return "", err
		}
		to = to.Add(dur)
	}
	lines := sc.rt.advance(&sc.s, to)
	lines = append(lines, "now +"+rel(to))
	return strings.Join(lines, "\n") + "\n", nil
}

func (sc *script) probe(d *datadriven.TestData) error {
	n := name(d)
	ps := sc.s.Probes[n]
	for _, a := range d.CmdArgs[1:] {
		ok := a.Vals[0] == "ok"
		switch a.Key {
		case "startup":
			ps.Started = ok
			if !ok {
				ps.Unhealthy, ps.KillMessage = true, "Container "+n+" failed startup probe, will be restarted"
			}
		case "readiness":
			ps.Ready = ok
		case "liveness":
			ps.Unhealthy = !ok
			ps.KillMessage = ""
			if !ok {
				ps.KillMessage = "Container " + n + " failed liveness probe, will be restarted"
			}
		default:
			return fmt.Errorf("probe: unknown probe %s", a.Key)
		}
	}
	sc.s.Probes[n] = ps
	return nil
}

// delete is a deletion through the API: the worker merges it into the
// termination in progress (NextTermination) and cuts the stops in flight
// when it came earlier.
func (sc *script) delete(d *datadriven.TestData) (string, error) {
	grace := podGrace(sc.s.Pod)
	for _, a := range d.CmdArgs {
		if a.Key != "grace" {
			return "", fmt.Errorf("delete: unknown argument %s", a.Key)
		}
		n, err := strconv.ParseInt(a.Vals[0], 10, 64)
		if err != nil {
			return "", err
		}
		grace = Seconds(n)
	}
	now := sc.s.Now
	if sc.s.Pod.DeletionTimestamp == nil {
		sc.s.Pod = sc.s.Pod.DeepCopy()
		sc.s.Pod.DeletionTimestamp = ptr.To(metav1.NewTime(now))
	}
	next, shortened := NextTermination(sc.s.Termination, StopRequest{Grace: grace}, now)
	sc.s.Termination = next
	out := fmt.Sprintf("termination since +%s grace %s", rel(next.Since), next.Grace)
	lines := []string{out}
	if shortened {
		lines[0] += " (shortened)"
		lines = append(lines, sc.rt.shorten(now, next.Grace)...)
	}
	lines = append(lines, sc.rt.advance(&sc.s, now)...)
	return strings.Join(lines, "\n") + "\n", nil
}

// condition sets a condition of the published status as another writer
// would (a readiness gate's, for one).
func (sc *script) condition(d *datadriven.TestData) error {
	if len(d.CmdArgs) != 1 || len(d.CmdArgs[0].Vals) != 1 {
		return fmt.Errorf("condition: want TYPE=STATUS")
	}
	c := v1.PodCondition{Type: v1.PodConditionType(d.CmdArgs[0].Key), Status: v1.ConditionStatus(d.CmdArgs[0].Vals[0]),
		LastTransitionTime: metav1.NewTime(sc.s.Now)}
	sc.s.Pod = sc.s.Pod.DeepCopy()
	if old := conditionOf(sc.s.Pod.Status.Conditions, c.Type); old != nil {
		*old = c
	} else {
		sc.s.Pod.Status.Conditions = append(sc.s.Pod.Status.Conditions, c)
	}
	return nil
}

// rel is t as time since the script's start.
func rel(t time.Time) string { return t.Sub(t0).String() }
