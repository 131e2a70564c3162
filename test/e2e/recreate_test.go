package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
)

// recreatePods pods are recreated per round.
const recreatePods = 100

// Issue 18 item 7: a pod worker never sits idle while it has work. 100 pods
// are deleted — force (grace 0), graceful, and graceful then force, mixed —
// and recreated under the same names (one name new each round) 0.5 s later:
// one round by default, PODVISOR_E2E_RECREATE_ROUNDS for more (five, then
// two, made the suite's heaviest test heavier still on 2-core CI, 600 and
// 300 containerd pods, for no check the first recreation does not make).
//
// The stall this guards against had a cause the API shows: a token request
// refused while the API server's caches lagged failed the pod's
// kube-api-access mount (a FailedMount warning), and the container waited
// for the 10 s config-error retry. So the test asserts the cause — no
// warning about any pod of the test — rather than a wall-clock bound, which
// a loaded 2-core machine stretches past any stall (a p90 of 8.2 s was seen
// on CI with no stall at all; on containerd, where each pod gets a sandbox
// and network first, a round's last pod ran after 32 s alone and after over
// 60 s among the suite's other tests). The latency distribution is logged
// per round. The node has a cluster DNS, as a cluster's nodes do: without
// one, upstream's kubelet warns MissingClusterDNS on every pod sandbox.
func TestRecreatedPodsStartPromptly(t *testing.T) {
	t.Parallel()
	heavy(t)
	rounds := 1
	if s := os.Getenv("PODVISOR_E2E_RECREATE_ROUNDS"); s != "" {
		rounds, _ = strconv.Atoi(s)
	}
	p := NewPodvisor(t, "--config", kubeletConfig(t, "clusterDNS: [10.96.0.10]\n"))
	p.Start()
	ns := p.Namespace("recreate")
	rec := newRunningRecorder(t, p, ns)

	names := make([]string, recreatePods)
	for i := range names {
		names[i] = fmt.Sprintf("r-%03d", i)
	}
	var all []time.Duration
	var worst string
	var worstD time.Duration
	for round := 0; round <= rounds; round++ {
		if round > 0 {
			rec.deleteAll(names)
			// The observed burst came 0.5 s after the force deletion; one
			// name of it was new.
			time.Sleep(500 * time.Millisecond)
			names[round%recreatePods] = fmt.Sprintf("new-%d", round)
		}
		uids, created := rec.createAll(names)
		lat := rec.waitRunning(uids, created, 3*time.Minute)
		d := sortedDurations(lat)
		t.Logf("round %d: create call → container running: %s", round, distString(d))
		for uid, l := range lat {
			if l > worstD {
				worstD = l
				worst = fmt.Sprintf("round %d pod %s (%s)", round, rec.nameOf(uid), uid)
			}
		}
		all = append(all, d...)
	}
	if warned := rec.warnings(); len(warned) > 0 {
		for _, uid := range warned {
			t.Errorf("pod %s (%s) got a warning; a pod that waits for a retry is what this test guards against", rec.nameOf(uid), uid)
			rec.explain(uid)
		}
	}
	rec.logCatchUps()
	sort.Slice(all, func(i, j int) bool { return all[i] < all[j] })
	t.Logf("all pods (%d): %s; slowest: %s %v", len(all), distString(all), worst, worstD.Round(time.Millisecond))
}

// warnings are the UIDs of the test's pods that got a Warning event, first
// the five most warned.
func (r *runningRecorder) warnings() []types.UID {
	evs, err := r.p.Admin.CoreV1().Events(r.ns).List(context.Background(), metav1.ListOptions{FieldSelector: "type=Warning"})
	if err != nil {
		r.t.Fatalf("listing warnings: %v", err)
	}
	count := map[types.UID]int32{}
	for _, e := range evs.Items {
		count[e.InvolvedObject.UID] += max(e.Count, 1)
	}
	var out []types.UID
	for uid := range count {
		out = append(out, uid)
	}
	sort.Slice(out, func(i, j int) bool { return count[out[i]] > count[out[j]] })
	return out[:min(len(out), 5)]
}

// runningRecorder notes, per pod UID, when the watch first shows its
// container running, and when a pod object is gone.
type runningRecorder struct {
	t  *testing.T
	p  *Podvisor
	ns string

	mu      sync.Mutex
	running map[types.UID]time.Time
	names   map[types.UID]string
	gone    map[types.UID]chan struct{}
	changed chan struct{}
}

func newRunningRecorder(t *testing.T, p *Podvisor, ns string) *runningRecorder {
	r := &runningRecorder{t: t, p: p, ns: ns, running: map[types.UID]time.Time{}, names: map[types.UID]string{},
		gone: map[types.UID]chan struct{}{}, changed: make(chan struct{}, 1)}
	f := informers.NewSharedInformerFactoryWithOptions(p.Admin, 0, informers.WithNamespace(ns))
	inf := f.Core().V1().Pods().Informer()
	seen := func(obj any) {
		pod, ok := obj.(*v1.Pod)
		if !ok {
			return
		}
		cs := containerStatus(pod, "c")
		if cs == nil || cs.State.Running == nil {
			return
		}
		now := time.Now()
		r.mu.Lock()
		if _, ok := r.running[pod.UID]; !ok {
			r.running[pod.UID] = now
			r.poke()
		}
		r.mu.Unlock()
	}
	_, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    seen,
		UpdateFunc: func(_, obj any) { seen(obj) },
		DeleteFunc: func(obj any) {
			if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = t.Obj
			}
			if pod, ok := obj.(*v1.Pod); ok {
				r.mu.Lock()
				if ch := r.goneCh(pod.UID); !closed(ch) {
					close(ch)
				}
				r.mu.Unlock()
			}
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	f.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		t.Fatal("pod informer did not sync")
	}
	return r
}

func (r *runningRecorder) poke() {
	select {
	case r.changed <- struct{}{}:
	default:
	}
}

// goneCh is the channel closed when the pod object uid is gone; r.mu held.
func (r *runningRecorder) goneCh(uid types.UID) chan struct{} {
	ch, ok := r.gone[uid]
	if !ok {
		ch = make(chan struct{})
		r.gone[uid] = ch
	}
	return ch
}

func closed(ch chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

func (r *runningRecorder) nameOf(uid types.UID) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.names[uid]
}

// createAll creates the pods at once; a name whose previous pod is still
// terminating (graceful delete) is created as soon as that pod is gone. It
// returns the UIDs and, per UID, when its (successful) create call was issued.
func (r *runningRecorder) createAll(names []string) ([]types.UID, map[types.UID]time.Time) {
	var (
		mu      sync.Mutex
		wg      sync.WaitGroup
		uids    []types.UID
		created = map[types.UID]time.Time{}
		errs    []string
	)
	for _, name := range names {
		wg.Go(func() {
			// A gracefully deleted pod of the name takes its 30 s grace
			// (sh as PID 1 ignores SIGTERM) and its sandbox's teardown; on
			// 2-core CI, among the suite's other tests, that passed 60 s.
			// The bound is the one waitRunning gives a pod to run.
			deadline := time.Now().Add(3 * time.Minute)
			for {
				at := time.Now()
				pod := r.p.pod(r.ns, name, v1.RestartPolicyAlways, sh("c", "sleep 3600"))
				r.p.adapt(pod)
				pod, err := r.p.Admin.CoreV1().Pods(r.ns).Create(context.Background(), pod, metav1.CreateOptions{})
				if err == nil {
					r.mu.Lock()
					r.names[pod.UID] = name
					r.mu.Unlock()
					mu.Lock()
					uids = append(uids, pod.UID)
					created[pod.UID] = at
					mu.Unlock()
					return
				}
				if !apierrors.IsAlreadyExists(err) || time.Now().After(deadline) {
					mu.Lock()
					errs = append(errs, fmt.Sprintf("create %s: %v", name, err))
					mu.Unlock()
					return
				}
				// The previous pod of this name is still terminating.
				old, gerr := r.p.Admin.CoreV1().Pods(r.ns).Get(context.Background(), name, metav1.GetOptions{})
				if gerr != nil {
					continue // gone meanwhile (or a blip): try again
				}
				r.mu.Lock()
				ch := r.goneCh(old.UID)
				r.mu.Unlock()
				select {
				case <-ch:
				case <-time.After(time.Until(deadline)):
				}
			}
		})
	}
	wg.Wait()
	if len(errs) > 0 {
		r.t.Fatalf("%d creates failed, first: %s", len(errs), errs[0])
	}
	return uids, created
}

// deleteAll deletes the pods of names in three ways, by turns: force
// (grace 0), graceful, and graceful then force.
func (r *runningRecorder) deleteAll(names []string) {
	var wg sync.WaitGroup
	errs := make(chan error, 2*len(names))
	force := metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}
	for i, name := range names {
		wg.Go(func() {
			pods := r.p.Admin.CoreV1().Pods(r.ns)
			var err error
			switch i % 3 {
			case 0:
				err = pods.Delete(context.Background(), name, force)
			case 1:
				err = pods.Delete(context.Background(), name, metav1.DeleteOptions{})
			case 2:
				if err = pods.Delete(context.Background(), name, metav1.DeleteOptions{}); err == nil {
					err = pods.Delete(context.Background(), name, force)
				}
			}
			if err != nil && !apierrors.IsNotFound(err) {
				errs <- fmt.Errorf("delete %s: %w", name, err)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		r.t.Fatal(err)
	}
}

// waitRunning waits until every pod of uids runs and returns, per UID, the
// time from its create call to the watch showing its container running.
func (r *runningRecorder) waitRunning(uids []types.UID, created map[types.UID]time.Time, timeout time.Duration) map[types.UID]time.Duration {
	deadline := time.After(timeout)
	for {
		r.mu.Lock()
		out := map[types.UID]time.Duration{}
		var missing []string
		for _, uid := range uids {
			if at, ok := r.running[uid]; ok {
				out[uid] = at.Sub(created[uid])
			} else {
				missing = append(missing, r.names[uid])
			}
		}
		r.mu.Unlock()
		if len(missing) == 0 {
			return out
		}
		select {
		case <-r.changed:
		case <-deadline:
			sort.Strings(missing)
			pod, _ := r.p.Admin.CoreV1().Pods(r.ns).Get(context.Background(), missing[0], metav1.GetOptions{})
			r.t.Fatalf("after %v, %d pods not running: %v; %s:\n%s", timeout, len(missing), missing, missing[0], describe(pod))
		}
	}
}

var volumeSuffix = regexp.MustCompile(`kube-api-access-[a-z0-9]+`)

// explain logs the events of pod uid and what the agent logged about its
// name, to tell where a slow pod waited.
func (r *runningRecorder) explain(uid types.UID) {
	name := r.nameOf(uid)
	evs, err := r.p.Admin.CoreV1().Events(r.ns).List(context.Background(), metav1.ListOptions{
		FieldSelector: "involvedObject.uid=" + string(uid)})
	if err == nil {
		sort.Slice(evs.Items, func(i, j int) bool { return evs.Items[i].CreationTimestamp.Before(&evs.Items[j].CreationTimestamp) })
		for _, e := range evs.Items {
			r.t.Logf("event on %s: %s %s %s: %s", name, e.CreationTimestamp.Format(time.TimeOnly), e.Type, e.Reason, e.Message)
		}
	}
	// Every warning of the test, counted by what it says.
	all, err := r.p.Admin.CoreV1().Events(r.ns).List(context.Background(), metav1.ListOptions{FieldSelector: "type=Warning"})
	if err == nil {
		count := map[string]int{}
		for _, e := range all.Items {
			msg := strings.ReplaceAll(e.Message, e.InvolvedObject.Name, "<pod>")
			count[e.Reason+": "+volumeSuffix.ReplaceAllString(msg, "kube-api-access-<x>")] += int(max(e.Count, 1))
		}
		for m, n := range count {
			r.t.Logf("%d× %s", n, m)
		}
	}
	b, err := os.ReadFile(filepath.Join(r.p.DataDir, "podvisor.log"))
	if err != nil {
		return
	}
	for _, line := range strings.Split(string(b), "\n") {
		if strings.Contains(line, r.ns+"/"+name+" ") || strings.HasSuffix(line, r.ns+"/"+name) || strings.Contains(line, string(uid)) {
			r.t.Log(line)
		}
	}
}

// logCatchUps logs how long the agent waited for the API server to catch up
// with a pod before it would hand it a token or an object.
func (r *runningRecorder) logCatchUps() {
	b, err := os.ReadFile(filepath.Join(r.p.DataDir, "podvisor.log"))
	if err != nil {
		return
	}
	var waits []time.Duration
	for _, line := range strings.Split(string(b), "\n") {
		if !strings.Contains(line, `msg="API server caught up with the pod"`) {
			continue
		}
		if _, v, ok := strings.Cut(line, " waited="); ok {
			if d, err := time.ParseDuration(strings.Fields(v)[0]); err == nil {
				waits = append(waits, d)
			}
		}
	}
	sort.Slice(waits, func(i, j int) bool { return waits[i] < waits[j] })
	r.t.Logf("requests the API server refused until it caught up with the pod: %s", distString(waits))
}

func sortedDurations(m map[types.UID]time.Duration) []time.Duration {
	out := make([]time.Duration, 0, len(m))
	for _, d := range m {
		out = append(out, d)
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

// distString summarises sorted durations: min, p50, p90, p99, max.
func distString(d []time.Duration) string {
	if len(d) == 0 {
		return "no samples"
	}
	q := func(f float64) time.Duration { return d[min(len(d)-1, int(f*float64(len(d))))].Round(time.Millisecond) }
	parts := []string{
		fmt.Sprintf("n=%d", len(d)),
		"min " + d[0].Round(time.Millisecond).String(),
		"p50 " + q(0.5).String(),
		"p90 " + q(0.9).String(),
		"p99 " + q(0.99).String(),
		"max " + d[len(d)-1].Round(time.Millisecond).String(),
	}
	return strings.Join(parts, " ")
}
