package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// idleWait is how long podvisor idles after ready before its RSS is read.
const idleWait = 20 * time.Second

// BenchmarkStartup (issue 2): exec of `podvisor up` → ready line with a new
// data dir (cold) and again with the same one (warm); the resident memory of
// the idle process; the binary's size. One run per call: use -benchtime 1x.
func BenchmarkStartup(b *testing.B) {
	n := newNode(b)
	fi, err := os.Stat(n.binary)
	if err != nil {
		b.Fatal(err)
	}

	n.start()
	cold := n.readyIn
	time.Sleep(idleWait)
	mem, err := memOf(n.pid())
	if err != nil {
		b.Fatal(err)
	}
	rss := mem.rss
	hwm, _ := statusKB(n.pid(), "VmHWM")
	cpu, _ := cpuTime(n.pid())
	stopStart := time.Now()
	n.stop()
	stopIn := time.Since(stopStart)
	if code := n.cmd.ProcessState.ExitCode(); code != 0 {
		b.Errorf("podvisor exited %d after SIGTERM", code)
	}

	n.start() // same data dir and ports: PKI, etcd and config are reused
	warm := n.readyIn
	time.Sleep(idleWait)
	warmRSS, _ := statusKB(n.pid(), "VmRSS")

	b.ReportMetric(ms(cold), "cold-ready-ms")
	b.ReportMetric(ms(warm), "warm-ready-ms")
	b.ReportMetric(mib(rss), "idle-rss-MiB")
	b.ReportMetric(mib(warmRSS), "warm-idle-rss-MiB")
	b.ReportMetric(float64(fi.Size())/(1<<20), "binary-MiB")
	report(b,
		"| cold start → ready | warm start → ready | idle VmRSS (cold, +20 s) | of it RssAnon | peak (VmHWM) | idle VmRSS (warm, +20 s) | CPU until idle | SIGTERM → exit | binary size |",
		"| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
		fmt.Sprintf("| %v | %v | %.1f MiB | %.1f MiB | %.1f MiB | %.1f MiB | %v | %v | %.1f MiB |",
			round(cold), round(warm), mib(rss), mib(mem.anon), mib(hwm), mib(warmRSS), cpu, round(stopIn), float64(fi.Size())/(1<<20)))
}

// coldBuildLimitEnv overrides how long a build with an empty GOCACHE may take
// before the benchmark gives up on it and reports a warm build instead.
const coldBuildLimitEnv = "PODVISOR_BENCH_COLD_BUILD_LIMIT"

// BenchmarkBuild (issue 2): `go build ./cmd/podvisor` of the committed tree
// (HEAD, exported with git archive, so edits in progress neither break nor
// skew it) with GOCACHE pointed at an empty directory — the module cache is
// kept, so no download is timed. If that exceeds the limit (6 min unless
// PODVISOR_BENCH_COLD_BUILD_LIMIT says otherwise) it is abandoned and a warm
// build (the usual GOCACHE, into a new output file) is reported instead.
func BenchmarkBuild(b *testing.B) {
	root := moduleRoot()
	src := b.TempDir()
	archive := exec.Command("sh", "-c", `git -C "$1" archive HEAD | tar -x -C "$2"`, "sh", root, src)
	if out, err := archive.CombinedOutput(); err != nil {
		b.Fatalf("git archive: %v\n%s", err, out)
	}
	limit := 6 * time.Minute
	if s := os.Getenv(coldBuildLimitEnv); s != "" {
		if d, err := time.ParseDuration(s); err == nil {
			limit = d
		}
	}
	build := func(gocache string, timeout time.Duration) (time.Duration, error) {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		cmd := exec.CommandContext(ctx, "go", "build", "-o", filepath.Join(b.TempDir(), "podvisor"), "./cmd/podvisor")
		cmd.Dir = src
		cmd.Env = os.Environ()
		if gocache != "" {
			cmd.Env = append(cmd.Env, "GOCACHE="+gocache)
		}
		start := time.Now()
		out, err := cmd.CombinedOutput()
		took := time.Since(start)
		if ctx.Err() != nil {
			return took, ctx.Err()
		}
		if err != nil {
			return took, fmt.Errorf("%w\n%s", err, tail(string(out), 4000))
		}
		return took, nil
	}

	cold, err := build(b.TempDir(), limit)
	switch {
	case err == nil:
		b.ReportMetric(cold.Seconds(), "cold-build-s")
		report(b, "| build | GOCACHE | time |", "| --- | --- | --- |",
			fmt.Sprintf("| clean `go build ./cmd/podvisor` | empty | %v |", cold.Round(100*time.Millisecond)))
	case errors.Is(err, context.DeadlineExceeded):
		warm, err := build("", 10*time.Minute)
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(warm.Seconds(), "warm-build-s")
		report(b, "| build | GOCACHE | time |", "| --- | --- | --- |",
			fmt.Sprintf("| clean `go build ./cmd/podvisor` | empty | > %v (abandoned) |", limit),
			fmt.Sprintf("| `go build ./cmd/podvisor` | warm (usual cache) | %v |", warm.Round(100*time.Millisecond)))
	default:
		b.Fatal(err)
	}
}
