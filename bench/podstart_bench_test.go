package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
)

const (
	startPods  = 100
	cpuWindow  = 30 * time.Second
	settleTime = 5 * time.Second
)

// createAll creates the pods concurrently and returns the time each create
// call was issued.
func (n *node) createAll(pods []*v1.Pod) map[string]time.Time {
	b := n.b
	b.Helper()
	var (
		mu   sync.Mutex
		at   = make(map[string]time.Time, len(pods))
		errs []error
		wg   sync.WaitGroup
	)
	for _, pod := range pods {
		wg.Go(func() {
			t := time.Now()
			_, err := n.client.CoreV1().Pods(pod.Namespace).Create(context.Background(), pod, metav1.CreateOptions{})
			mu.Lock()
			defer mu.Unlock()
			at[pod.Name] = t
			if err != nil {
				errs = append(errs, fmt.Errorf("create %s: %w", pod.Name, err))
			}
		})
	}
	wg.Wait()
	if len(errs) > 0 {
		b.Fatal(errs[0])
	}
	return at
}

// waitOrFail waits for ch or fails the benchmark after timeout.
func waitOrFail(b *testing.B, ch <-chan struct{}, timeout time.Duration, what func() string) {
	b.Helper()
	select {
	case <-ch:
	case <-time.After(timeout):
		b.Fatalf("timed out after %v waiting for %s", timeout, what())
	}
}

// BenchmarkPodStart (issue 3): 100 pods (`sleep 3600`, restartPolicy Always)
// created at once; per pod, the time from the create call (and from the
// second-precision creationTimestamp) to the watch event that shows every
// container running. Then, with the 100 pods running, the podvisor process's
// CPU (utime+stime over 30 s) and RSS, and the shims' count and RSS.
func BenchmarkPodStart(b *testing.B) {
	n := newNode(b)
	n.start()
	ns := n.namespace("bench")

	var (
		mu        sync.Mutex
		scheduled = make(map[string]time.Time, startPods) // spec.nodeName set
		agentSeen = make(map[string]time.Time, startPods) // first status from the agent
		running   = make(map[string]time.Time, startPods)
		stamps    = make(map[string]time.Time, startPods)
		all       = make(chan struct{})
	)
	first := func(m map[string]time.Time, name string, at time.Time) {
		if _, seen := m[name]; !seen {
			m[name] = at
		}
	}
	stop := n.watchPods(ns, func(_ watch.EventType, pod *v1.Pod, at time.Time) {
		mu.Lock()
		defer mu.Unlock()
		if pod.Spec.NodeName != "" {
			first(scheduled, pod.Name, at)
		}
		if pod.Status.StartTime != nil || len(pod.Status.ContainerStatuses) > 0 {
			first(agentSeen, pod.Name, at)
		}
		if !allRunning(pod) {
			return
		}
		if _, seen := running[pod.Name]; !seen {
			running[pod.Name] = at
			stamps[pod.Name] = pod.CreationTimestamp.Time
			if len(running) == startPods {
				close(all)
			}
		}
	})
	defer stop()

	// The node idle: podvisor, and containerd on that runtime, with no pod.
	time.Sleep(settleTime)
	idleAgent, _ := memOf(n.pid())
	idle := n.stack()

	pods := make([]*v1.Pod, startPods)
	for i := range pods {
		pods[i] = n.shPod(ns, fmt.Sprintf("sleep-%03d", i), v1.RestartPolicyAlways, "sleep 3600")
	}
	cpu0 := n.cpu()
	b.ResetTimer()
	start := time.Now()
	created := n.createAll(pods)
	createsDone := time.Since(start)
	waitOrFail(b, all, 5*time.Minute, func() string {
		mu.Lock()
		defer mu.Unlock()
		return fmt.Sprintf("all %d pods running (%d are)", startPods, len(running))
	})
	b.StopTimer()
	burstCPU := n.cpu().since(cpu0, n.podUIDs(ns))

	mu.Lock()
	var fromCreate, fromStamp, toScheduled, toAgent []time.Duration
	var last time.Time
	slowest := ""
	for name, at := range running {
		d := at.Sub(created[name])
		fromCreate = append(fromCreate, d)
		fromStamp = append(fromStamp, at.Sub(stamps[name]))
		if t, ok := scheduled[name]; ok {
			toScheduled = append(toScheduled, t.Sub(created[name]))
		}
		if t, ok := agentSeen[name]; ok {
			toAgent = append(toAgent, t.Sub(created[name]))
		}
		if at.After(last) {
			last, slowest = at, name
		}
	}
	mu.Unlock()
	c, s := newDist(fromCreate), newDist(fromStamp)
	total := last.Sub(start)
	row := func(what string, d dist) string {
		return fmt.Sprintf("| %s | %v | %v | %v | %v | %v | %v | %v | %d |", what, round(d.min()), round(d.q(0.1)),
			round(d.q(0.5)), round(d.q(0.9)), round(d.q(0.99)), round(d.max()), round(d.max()-d.min()), len(d.d))
	}
	rate := float64(startPods) / total.Seconds()

	// Agent cost with the pods running.
	time.Sleep(settleTime)
	pid := n.pid()
	cpuPct, cpu1, window := cpuOver(b, pid, cpuWindow)
	agent, _ := memOf(pid)
	busy := n.stack()
	shimSet := busy.shims
	shimN, shim := shimSet.count, shimSet.mem
	shimName := "podvisor __shim"
	if n.runtime == "containerd" {
		shimName = "containerd-shim-runc-v2"
	}
	// The node stack: podvisor, containerd and the shims (their own memory,
	// Pss: the binary's pages they share are counted once).
	stackPss := func(a memKB, s stack) float64 { return mib(a.pss + s.containerd.mem.pss + s.shims.mem.pss) }
	stackRss := func(a memKB, s stack) float64 { return mib(a.rss + s.containerd.mem.rss + s.shims.mem.rss) }

	k := float64(max(shimN, 1))
	b.ReportMetric(ms(c.q(0.5)), "p50-ms")
	b.ReportMetric(ms(c.q(0.99)), "p99-ms")
	b.ReportMetric(ms(c.max()), "max-ms")
	b.ReportMetric(rate, "pods/s")
	b.ReportMetric(cpuPct, "agent-cpu-%")
	b.ReportMetric(mib(agent.rss), "agent-rss-MiB")
	b.ReportMetric(float64(shimN), "shims")
	b.ReportMetric(mib(shim.rss), "shim-rss-MiB")
	b.ReportMetric(mib(shim.anon), "shim-anon-MiB")
	b.ReportMetric(mib(shim.pss), "shim-pss-MiB")
	b.ReportMetric(ms(shimSet.cpu)/k, "cpu-ms/shim")
	b.ReportMetric(stackPss(idleAgent, idle), "idle-stack-pss-MiB")
	b.ReportMetric(stackPss(agent, busy), "stack-pss-MiB")
	burstCPU.report(b, startPods)
	memRow := func(what string, count int, m memKB, cpu time.Duration) string {
		return fmt.Sprintf("| %s | %d | | %v | %.1f MiB | %.1f MiB | %.1f MiB | %.1f MiB |",
			what, count, cpu, mib(m.rss), mib(m.anon), mib(m.file), mib(m.pss))
	}
	report(b,
		fmt.Sprintf("%d pods created at once (creates returned after %v); create call → watch shows all containers running:", startPods, round(createsDone)),
		fmt.Sprintf("all running %v after the first create call: %.1f pods/s; slowest: %s", round(total), rate, slowest),
		"| interval | min | p10 | p50 | p90 | p99 | max | spread | pods |",
		"| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
		row("create call → all containers running", c),
		row("creationTimestamp (1 s precision) → all running", s),
		row("create call → scheduled (nodeName set)", newDist(toScheduled)),
		row("create call → agent's first status", newDist(toAgent)),
		"",
		burstCPU.row(startPods),
		"",
		fmt.Sprintf("with %d pods running (after %v settling, over %v):", startPods, settleTime, window.Round(time.Second)),
		"| process | count | CPU (% of one core) | CPU time over its life | VmRSS | RssAnon | RssFile | Pss |",
		"| --- | --- | --- | --- | --- | --- | --- | --- |",
		fmt.Sprintf("| podvisor up | 1 | %.1f %% | %v | %.1f MiB | %.1f MiB | %.1f MiB | %.1f MiB |",
			cpuPct, cpu1, mib(agent.rss), mib(agent.anon), mib(agent.file), mib(agent.pss)),
		memRow("containerd", busy.containerd.count, busy.containerd.mem, busy.containerd.cpu),
		fmt.Sprintf("| %s (sum) | %d | | %v | %.1f MiB | %.1f MiB | %.1f MiB | %.1f MiB |",
			shimName, shimN, shimSet.cpu, mib(shim.rss), mib(shim.anon), mib(shim.file), mib(shim.pss)),
		fmt.Sprintf("| %s (mean) | | | %v | %.1f MiB | %.1f MiB | %.1f MiB | %.1f MiB |",
			shimName, shimSet.cpu/time.Duration(max(shimN, 1)), mib(shim.rss)/k, mib(shim.anon)/k, mib(shim.file)/k, mib(shim.pss)/k),
		"",
		fmt.Sprintf("node stack (podvisor + containerd + shims), Pss: idle %.1f MiB (podvisor %.1f, containerd %.1f, %d shims %.1f); with %d pods %.1f MiB",
			stackPss(idleAgent, idle), mib(idleAgent.pss), mib(idle.containerd.mem.pss), idle.shims.count, mib(idle.shims.mem.pss),
			startPods, stackPss(agent, busy)),
		fmt.Sprintf("node stack, VmRSS summed: idle %.1f MiB; with %d pods %.1f MiB", stackRss(idleAgent, idle), startPods, stackRss(agent, busy)))
}

const exitPods = 50

// BenchmarkExitToStatus (issue 3): 50 pods (restartPolicy Never) whose
// container sleeps 1–3 s, writes `date +%s.%N` to a host file and exits 0;
// per pod, that time → arrival of the watch event showing it terminated.
func BenchmarkExitToStatus(b *testing.B) {
	n := newNode(b)
	n.start()
	ns := n.namespace("bench")
	dir := b.TempDir()

	var (
		mu     sync.Mutex
		seenAt = make(map[string]time.Time, exitPods)
		codes  = make(map[string]int32, exitPods)
		all    = make(chan struct{})
	)
	stop := n.watchPods(ns, func(_ watch.EventType, pod *v1.Pod, at time.Time) {
		t := terminated(pod)
		if t == nil {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		if _, seen := seenAt[pod.Name]; !seen {
			seenAt[pod.Name] = at
			codes[pod.Name] = t.ExitCode
			if len(seenAt) == exitPods {
				close(all)
			}
		}
	})
	defer stop()

	pods := make([]*v1.Pod, exitPods)
	for i := range pods {
		name := fmt.Sprintf("exit-%02d", i)
		// Spread over 1.00–2.99 s, in an order unrelated to creation.
		sleep := fmt.Sprintf("%d.%02d", 1+(i*37%200)/100, i*37%100)
		script := fmt.Sprintf("sleep %s; date +%%s.%%N > %s; exit 0", sleep, filepath.Join(dir, name))
		pods[i] = n.shPod(ns, name, v1.RestartPolicyNever, script, dir)
	}
	b.ResetTimer()
	start := time.Now()
	n.createAll(pods)
	waitOrFail(b, all, 5*time.Minute, func() string {
		mu.Lock()
		defer mu.Unlock()
		return fmt.Sprintf("all %d containers terminated (%d are)", exitPods, len(seenAt))
	})
	b.StopTimer()

	var lat []time.Duration
	worst := ""
	var worstD, worstExit time.Duration
	for name, at := range seenAt {
		if codes[name] != 0 {
			b.Errorf("%s exited %d", name, codes[name])
			continue
		}
		exit, err := readUnixTime(filepath.Join(dir, name))
		if err != nil {
			b.Fatal(err)
		}
		d := at.Sub(exit)
		lat = append(lat, d)
		if d > worstD {
			worstD, worst, worstExit = d, name, exit.Sub(start)
		}
	}
	l := newDist(lat)
	b.ReportMetric(ms(l.q(0.5)), "p50-ms")
	b.ReportMetric(ms(l.q(0.99)), "p99-ms")
	b.ReportMetric(ms(l.max()), "max-ms")
	report(b,
		fmt.Sprintf("%d containers exiting 0 after 1–3 s; exit (date in the container) → watch shows terminated:", len(lat)),
		"| min | p50 | p90 | p99 | max | slowest |",
		"| --- | --- | --- | --- | --- | --- |",
		fmt.Sprintf("| %v | %v | %v | %v | %v | %s (exited %v after the first create call) |", round(l.min()), round(l.q(0.5)),
			round(l.q(0.9)), round(l.q(0.99)), round(l.max()), worst, round(worstExit)))
}

// readUnixTime parses a file holding `date +%s.%N` output. Busybox's date
// (the containerd runtime's image) has no %N and writes it as is: the time
// is then the file's modification time, which the write set.
func readUnixTime(path string) (time.Time, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return time.Time{}, err
	}
	line, _, _ := strings.Cut(strings.TrimSpace(string(data)), "\n")
	if strings.HasSuffix(line, ".%N") {
		fi, err := os.Stat(path)
		if err != nil {
			return time.Time{}, err
		}
		return fi.ModTime(), nil
	}
	sec, frac, ok := strings.Cut(line, ".")
	if !ok || len(frac) != 9 {
		return time.Time{}, fmt.Errorf("%s: %q is not seconds.nanoseconds", path, line)
	}
	s, err1 := strconv.ParseInt(sec, 10, 64)
	ns, err2 := strconv.ParseInt(frac, 10, 64)
	if err1 != nil || err2 != nil {
		return time.Time{}, fmt.Errorf("%s: %q is not seconds.nanoseconds", path, line)
	}
	return time.Unix(s, ns), nil
}
