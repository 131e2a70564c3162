// Package bench holds benchmarks that print tables; results go to BENCHMARKS.md.
package bench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/tools/record"

	"github.com/podvisor/podvisor/internal/agent/probe"
	"github.com/podvisor/podvisor/internal/runtime"
)

const serverEnv = "PODVISOR_BENCH_HTTP_SERVER"

// TestMain doubles as the probed HTTP server, run in a child process so the
// CPU the benchmark reports is the prober's alone.
func TestMain(m *testing.M) {
	if os.Getenv(serverEnv) == "1" {
		serveHTTP()
		return
	}
	os.Exit(m.Run())
}

func serveHTTP() {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Println(l.Addr().(*net.TCPAddr).Port)
	go func() { _, _ = io.Copy(io.Discard, os.Stdin); os.Exit(0) }() // parent gone
	_ = http.Serve(l, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") }))
}

// startServer runs the HTTP server child and returns its port.
func startServer(b *testing.B) int {
	b.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), serverEnv+"=1")
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { stdin.Close(); _ = cmd.Process.Kill(); _ = cmd.Wait() })
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		b.Fatal(err)
	}
	port, err := strconv.Atoi(line[:len(line)-1])
	if err != nil {
		b.Fatal(err)
	}
	return port
}

// hostExec runs probe commands as host processes.
func hostExec(ctx context.Context, _ string, cmd []string, timeout time.Duration) ([]byte, int, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	out, err := exec.CommandContext(ctx, cmd[0], cmd[1:]...).CombinedOutput()
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return out, -1, runtime.ErrTimeout
	}
	var exitErr *exec.ExitError
	if errors.As(err, &exitErr) {
		return out, exitErr.ExitCode(), nil
	}
	if err != nil {
		return out, -1, err
	}
	return out, 0, nil
}

// BenchmarkHTTPReadinessProbes: 1,000 containers with an HTTP readiness
// probe every second against one local server (another process).
func BenchmarkHTTPReadinessProbes(b *testing.B) {
	port := startServer(b)
	p := &v1.Probe{
		ProbeHandler:  v1.ProbeHandler{HTTPGet: &v1.HTTPGetAction{Path: "/healthz", Port: intstr.FromInt(port)}},
		PeriodSeconds: 1, TimeoutSeconds: 1, SuccessThreshold: 1, FailureThreshold: 3,
	}
	runProbeLoad(b, p, hostExec, 1000, 5*time.Second)
}

// BenchmarkExecReadinessProbes: 1,000 containers with an exec readiness probe
// (a real `true` process) every second.
func BenchmarkExecReadinessProbes(b *testing.B) {
	if _, err := exec.LookPath("true"); err != nil {
		b.Skip("no true(1)")
	}
	p := &v1.Probe{
		ProbeHandler:  v1.ProbeHandler{Exec: &v1.ExecAction{Command: []string{"true"}}},
		PeriodSeconds: 1, TimeoutSeconds: 1, SuccessThreshold: 1, FailureThreshold: 3,
	}
	runProbeLoad(b, p, hostExec, 1000, 5*time.Second)
}

// runProbeLoad probes n containers with p for a warm-up second, then measures
// for window: scheduling delay (due time → run start), probes run per
// second, and CPU time per second of this process (and of its children, the
// exec'd commands).
func runProbeLoad(b *testing.B, p *v1.Probe, execFn probe.ExecFunc, n int, window time.Duration) {
	var (
		measuring atomic.Bool
		mu        sync.Mutex
		delays    = make([]time.Duration, 0, n*int(window/time.Second)*2)
		ready     atomic.Int64
	)
	m, err := probe.New(probe.Config{
		Exec:     execFn,
		Recorder: record.NewFakeRecorder(n * 100),
		OnUpdate: func(u probe.Update) {
			if u.State.Ready {
				ready.Add(1)
			}
		},
		Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		ObserveDelay: func(d time.Duration) {
			if measuring.Load() {
				mu.Lock()
				delays = append(delays, d)
				mu.Unlock()
			}
		},
	})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { m.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()

	now := time.Now()
	for i := range n {
		pod := &v1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("pod-%d", i), Namespace: "bench", UID: types.UID(fmt.Sprintf("uid-%d", i))},
			Spec:       v1.PodSpec{Containers: []v1.Container{{Name: "app", ReadinessProbe: p}}},
		}
		// adopted: first runs spread over the period, as after an agent restart.
		m.AddContainer(pod, &pod.Spec.Containers[0], fmt.Sprintf("c-%d", i), now, "127.0.0.1", true)
	}
	time.Sleep(1500 * time.Millisecond) // warm-up: every container probed once

	b.ResetTimer()
	selfBefore, childBefore := rusage(syscall.RUSAGE_SELF), rusage(syscall.RUSAGE_CHILDREN)
	measuring.Store(true)
	start := time.Now()
	time.Sleep(window)
	measuring.Store(false)
	elapsed := time.Since(start)
	selfCPU, childCPU := rusage(syscall.RUSAGE_SELF)-selfBefore, rusage(syscall.RUSAGE_CHILDREN)-childBefore
	b.StopTimer()

	mu.Lock()
	ds := slices.Clone(delays)
	mu.Unlock()
	slices.Sort(ds)
	if len(ds) == 0 {
		b.Fatal("no probe ran")
	}
	pct := func(q float64) time.Duration { return ds[min(len(ds)-1, int(q*float64(len(ds))))] }
	perSec := float64(len(ds)) / elapsed.Seconds()
	b.ReportMetric(perSec, "probes/s")
	b.ReportMetric(float64(pct(0.50).Microseconds())/1000, "p50-delay-ms")
	b.ReportMetric(float64(pct(0.99).Microseconds())/1000, "p99-delay-ms")
	b.ReportMetric(float64(selfCPU.Microseconds())/1000/elapsed.Seconds(), "cpu-ms/s")
	b.ReportMetric(float64(childCPU.Microseconds())/1000/elapsed.Seconds(), "child-cpu-ms/s")
	b.Logf("\n| containers | probes/s | delay p50 | delay p99 | max | agent CPU/s | children CPU/s | ready |\n"+
		"| --- | --- | --- | --- | --- | --- | --- | --- |\n"+
		"| %d | %.0f | %v | %v | %v | %v | %v | %d |",
		n, perSec, pct(0.50), pct(0.99), ds[len(ds)-1],
		time.Duration(float64(selfCPU)/elapsed.Seconds()).Round(time.Millisecond),
		time.Duration(float64(childCPU)/elapsed.Seconds()).Round(time.Millisecond), ready.Load())
}

func rusage(who int) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(who, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
