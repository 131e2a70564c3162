package bench

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
)

const (
	livenessPods   = 20
	livenessPeriod = 1 * time.Second
)

// BenchmarkLivenessReaction (issue 5): containers with an exec liveness probe
// (period 1 s, failureThreshold 1) on a host file and a SIGTERM trap that
// appends `date +%s.%N` to another. The benchmark removes each pod's probed
// file in turn and reports removal → SIGTERM delivered (the first failing
// probe runs within one period after removal) and, since the probe command
// also logs when it runs, first failing probe → SIGTERM.
func BenchmarkLivenessReaction(b *testing.B) {
	n := newNode(b)
	n.start()
	ns := n.namespace("bench")
	dir := b.TempDir()
	file := func(pod, kind string) string { return filepath.Join(dir, pod+"."+kind) }

	pods := make([]*v1.Pod, livenessPods)
	for i := range pods {
		name := fmt.Sprintf("live-%02d", i)
		if err := os.WriteFile(file(name, "alive"), []byte("ok\n"), 0o644); err != nil {
			b.Fatal(err)
		}
		// `wait` returns at once on a trapped signal; `sleep` alone would
		// delay the trap until it ends. $$! is the API's escape for $!.
		script := fmt.Sprintf("trap 'date +%%s.%%N >> %s; exit 0' TERM; while true; do sleep 1 & wait $$!; done", file(name, "term"))
		pod := n.shPod(ns, name, v1.RestartPolicyAlways, script, dir)
		pod.Spec.Containers[0].LivenessProbe = &v1.Probe{
			ProbeHandler: v1.ProbeHandler{Exec: &v1.ExecAction{Command: []string{"sh", "-c",
				fmt.Sprintf("date +%%s.%%N >> %s; cat %s", file(name, "probes"), file(name, "alive"))}}},
			PeriodSeconds: int32(livenessPeriod / time.Second), FailureThreshold: 1, TimeoutSeconds: 1, SuccessThreshold: 1,
		}
		pods[i] = pod
	}
	n.startRunning(pods)
	time.Sleep(3 * livenessPeriod) // every probe has run and passed

	var fromRemoval, fromProbe []time.Duration
	b.ResetTimer()
	for _, pod := range pods {
		removed := time.Now()
		if err := os.Remove(file(pod.Name, "alive")); err != nil {
			b.Fatal(err)
		}
		term, err := waitUnixTime(file(pod.Name, "term"), 15*time.Second)
		if err != nil {
			b.Fatalf("%s: %v", pod.Name, err)
		}
		fromRemoval = append(fromRemoval, term.Sub(removed))
		if probe, ok := firstAfter(file(pod.Name, "probes"), removed); ok {
			fromProbe = append(fromProbe, term.Sub(probe))
		}
		// Removals at unrelated phases of each pod's probe schedule.
		time.Sleep(137 * time.Millisecond)
	}
	b.StopTimer()

	r, p := newDist(fromRemoval), newDist(fromProbe)
	b.ReportMetric(ms(r.q(0.5)), "removal-to-term-p50-ms")
	b.ReportMetric(ms(r.max()), "removal-to-term-max-ms")
	b.ReportMetric(ms(p.q(0.5)), "probe-to-term-p50-ms")
	b.ReportMetric(ms(p.max()), "probe-to-term-max-ms")
	report(b,
		fmt.Sprintf("%d containers, exec liveness probe period %v, failureThreshold 1:", livenessPods, livenessPeriod),
		"| from | to | p50 | p90 | max | min | samples |",
		"| --- | --- | --- | --- | --- | --- | --- |",
		fmt.Sprintf("| file removed (≤ 1 period before the failing probe) | SIGTERM trap ran | %v | %v | %v | %v | %d |",
			round(r.q(0.5)), round(r.q(0.9)), round(r.max()), round(r.min()), len(fromRemoval)),
		fmt.Sprintf("| failing probe started | SIGTERM trap ran | %v | %v | %v | %v | %d |",
			round(p.q(0.5)), round(p.q(0.9)), round(p.max()), round(p.min()), len(fromProbe)))
}

// waitUnixTime waits for a file of `date +%s.%N` lines and returns the first.
func waitUnixTime(path string, timeout time.Duration) (time.Time, error) {
	deadline := time.Now().Add(timeout)
	for {
		t, err := readUnixTime(path)
		if err == nil {
			return t, nil
		}
		if time.Now().After(deadline) {
			return time.Time{}, fmt.Errorf("nothing in %s after %v: %w", path, timeout, err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// firstAfter is the first `date +%s.%N` line of path later than t.
func firstAfter(path string, t time.Time) (time.Time, bool) {
	data, err := os.ReadFile(path)
	if err != nil {
		return time.Time{}, false
	}
	for line := range strings.SplitSeq(string(data), "\n") {
		var sec, nsec int64
		if _, err := fmt.Sscanf(line, "%d.%d", &sec, &nsec); err != nil {
			continue
		}
		if u := time.Unix(sec, nsec); u.After(t) {
			return u, true
		}
	}
	return time.Time{}, false
}
