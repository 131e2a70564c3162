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

	"golang.org/x/sys/unix"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"
)

const (
	termPods = 100
	grace    = 2 * time.Second
)

// startRunning creates pods and waits until all of them run.
func (n *node) startRunning(pods []*v1.Pod) {
	b := n.b
	b.Helper()
	var (
		mu      sync.Mutex
		running = make(map[string]bool, len(pods))
		all     = make(chan struct{})
	)
	stop := n.watchPods(pods[0].Namespace, func(_ watch.EventType, pod *v1.Pod, _ time.Time) {
		mu.Lock()
		defer mu.Unlock()
		if allRunning(pod) && !running[pod.Name] {
			running[pod.Name] = true
			if len(running) == len(pods) {
				close(all)
			}
		}
	})
	defer stop()
	n.createAll(pods)
	waitOrFail(b, all, 5*time.Minute, func() string {
		mu.Lock()
		defer mu.Unlock()
		return fmt.Sprintf("%d pods running (%d are)", len(pods), len(running))
	})
}

// deleteAll deletes the pods concurrently with the grace period and returns
// when each delete call was issued.
func (n *node) deleteAll(pods []*v1.Pod, grace int64) map[string]time.Time {
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
			err := n.client.CoreV1().Pods(pod.Namespace).Delete(context.Background(), pod.Name,
				metav1.DeleteOptions{GracePeriodSeconds: ptr.To(grace)})
			mu.Lock()
			defer mu.Unlock()
			at[pod.Name] = t
			if err != nil && !apierrors.IsNotFound(err) {
				errs = append(errs, fmt.Errorf("delete %s: %w", pod.Name, err))
			}
		})
	}
	wg.Wait()
	if len(errs) > 0 {
		b.Fatal(errs[0])
	}
	return at
}

// BenchmarkKillAfterGrace (issue 6): 100 pods whose container survives
// SIGTERM (a trap that only notes the time), deleted at once with grace 2 s;
// per pod, the time its main process disappears (pidfd, on the host) minus
// (the delete call + 2 s), and minus (SIGTERM's arrival + 2 s), which leaves
// out the agent's reaction to the deletion. Timestamps in the API have second
// precision, hence the host-side measurement.
func BenchmarkKillAfterGrace(b *testing.B) {
	n := newNode(b)
	n.start()
	ns := n.namespace("bench")
	dir := b.TempDir()

	pods := make([]*v1.Pod, termPods)
	for i := range pods {
		name := fmt.Sprintf("stubborn-%03d", i)
		// The trap records SIGTERM and carries on: the container outlives it.
		// `wait` lets the trap run at once. $$ is the API's escape for $.
		script := fmt.Sprintf("trap 'date +%%s.%%N >> %s' TERM; echo $$$$ > %s; while true; do sleep 0.2 & wait $$!; done",
			filepath.Join(dir, name+".term"), filepath.Join(dir, name+".pid"))
		pods[i] = n.shPod(ns, name, v1.RestartPolicyAlways, script, dir)
	}
	n.startRunning(pods)

	// One pidfd per container main process, all in one epoll set.
	ep, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		b.Fatal(err)
	}
	defer unix.Close(ep)
	byFD := make(map[int32]string, termPods)
	hostPid := n.mainPids(ns, func(name string) (int, error) { return readPID(filepath.Join(dir, name+".pid")) })
	for _, pod := range pods {
		pid, err := hostPid(pod.Name)
		if err != nil {
			b.Fatal(err)
		}
		fd, err := unix.PidfdOpen(pid, 0)
		if err != nil {
			b.Fatalf("pidfd_open %s (pid %d): %v", pod.Name, pid, err)
		}
		defer unix.Close(fd)
		if err := unix.EpollCtl(ep, unix.EPOLL_CTL_ADD, fd, &unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(fd)}); err != nil {
			b.Fatal(err)
		}
		byFD[int32(fd)] = pod.Name
	}
	gone := make(map[string]time.Time, termPods)
	collected := make(chan struct{})
	go func() {
		defer close(collected)
		events := make([]unix.EpollEvent, termPods)
		deadline := time.Now().Add(2 * time.Minute)
		for len(gone) < termPods && time.Now().Before(deadline) {
			k, err := unix.EpollWait(ep, events, 1000)
			at := time.Now()
			if err != nil && err != unix.EINTR {
				return
			}
			for _, ev := range events[:max(k, 0)] {
				name := byFD[ev.Fd]
				if _, seen := gone[name]; !seen {
					gone[name] = at
					// Level-triggered: stop reporting this one.
					_ = unix.EpollCtl(ep, unix.EPOLL_CTL_DEL, int(ev.Fd), nil)
				}
			}
		}
	}()

	b.ResetTimer()
	deleted := n.deleteAll(pods, int64(grace/time.Second))
	<-collected
	b.StopTimer()
	if len(gone) < termPods {
		b.Fatalf("only %d of %d containers were killed within 2 minutes", len(gone), termPods)
	}
	var late, afterTerm []time.Duration
	for name, at := range gone {
		late = append(late, at.Sub(deleted[name].Add(grace)))
		if term, err := readUnixTime(filepath.Join(dir, name+".term")); err == nil {
			afterTerm = append(afterTerm, at.Sub(term.Add(grace)))
		}
	}
	l, t := newDist(late), newDist(afterTerm)
	b.ReportMetric(ms(l.q(0.5)), "p50-late-ms")
	b.ReportMetric(ms(l.q(0.99)), "p99-late-ms")
	b.ReportMetric(ms(l.max()), "max-late-ms")
	b.ReportMetric(ms(t.q(0.5)), "p50-after-term-ms")
	b.ReportMetric(ms(t.q(0.99)), "p99-after-term-ms")
	report(b,
		fmt.Sprintf("%d SIGTERM-ignoring containers deleted at once with grace %v; process gone − (delete call + grace):", termPods, grace),
		"| process gone − | p50 | p99 | max | min | samples |",
		"| --- | --- | --- | --- | --- | --- |",
		fmt.Sprintf("| (delete call + grace) | %v | %v | %v | %v | %d |", round(l.q(0.5)), round(l.q(0.99)), round(l.max()), round(l.min()), len(late)),
		fmt.Sprintf("| (SIGTERM trap ran + grace) | %v | %v | %v | %v | %d |", round(t.q(0.5)), round(t.q(0.99)), round(t.max()), round(t.min()), len(afterTerm)))
}

func readPID(path string) (int, error) {
	deadline := time.Now().Add(30 * time.Second)
	for {
		data, err := os.ReadFile(path)
		if err == nil {
			if pid, err := strconv.Atoi(strings.TrimSpace(string(data))); err == nil {
				return pid, nil
			}
		}
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("no pid in %s: %v %q", path, err, data)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// BenchmarkDeleteAll (issue 6): 100 running pods whose container ignores
// SIGTERM deleted at once with --grace-period=1; the time from the first delete call until the watch
// has seen every pod object removed from the API.
func BenchmarkDeleteAll(b *testing.B) {
	n := newNode(b)
	n.start()
	ns := n.namespace("bench")
	pods := make([]*v1.Pod, termPods)
	for i := range pods {
		// Ignores SIGTERM, so each is killed when its grace ends. (Until
		// the containerd runtime came, it was `sleep 3600`, which SIGTERM
		// ends on the process runtime but not as PID 1 of a container.)
		pods[i] = n.shPod(ns, fmt.Sprintf("sleep-%03d", i), v1.RestartPolicyAlways, "trap '' TERM; sleep 3600 & wait")
	}
	n.startRunning(pods)

	var (
		mu      sync.Mutex
		removed = make(map[string]time.Time, termPods)
		all     = make(chan struct{})
	)
	stop := n.watchPods(ns, func(typ watch.EventType, pod *v1.Pod, at time.Time) {
		if typ != watch.Deleted {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		if _, seen := removed[pod.Name]; !seen {
			removed[pod.Name] = at
			if len(removed) == termPods {
				close(all)
			}
		}
	})
	defer stop()

	b.ResetTimer()
	first := time.Now()
	deleted := n.deleteAll(pods, 1)
	callsDone := time.Since(first)
	waitOrFail(b, all, 3*time.Minute, func() string {
		mu.Lock()
		defer mu.Unlock()
		return fmt.Sprintf("%d pods removed (%d are)", termPods, len(removed))
	})
	b.StopTimer()
	left, err := n.client.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		b.Fatal(err)
	}
	if len(left.Items) != 0 {
		b.Errorf("%d pods still listed after the watch saw all removed", len(left.Items))
	}

	var per []time.Duration
	var last time.Time
	for name, at := range removed {
		per = append(per, at.Sub(deleted[name]))
		if at.After(last) {
			last = at
		}
	}
	total := last.Sub(first)
	p := newDist(per)
	b.ReportMetric(ms(total), "all-gone-ms")
	b.ReportMetric(ms(p.q(0.5)), "p50-ms")
	b.ReportMetric(ms(p.q(0.99)), "p99-ms")
	report(b,
		fmt.Sprintf("%d running pods deleted at once with grace 1 s (delete calls returned after %v):", termPods, round(callsDone)),
		"| first delete → all gone from the API | per pod: delete → gone p50 | p99 | max | min |",
		"| --- | --- | --- | --- | --- |",
		fmt.Sprintf("| %v | %v | %v | %v | %v |", round(total), round(p.q(0.5)), round(p.q(0.99)), round(p.max()), round(p.min())))
}
