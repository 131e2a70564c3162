package images

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// startAndWaitLine starts cmd and returns once its stdout printed want.
func startAndWaitLine(t *testing.T, cmd *exec.Cmd, want string) *bufio.Scanner {
	t.Helper()
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	lines := bufio.NewScanner(stdout)
	for lines.Scan() {
		if strings.HasPrefix(lines.Text(), want) {
			return lines
		}
	}
	t.Fatalf("%v never printed %q", cmd.Args, want)
	return nil
}

func TestTestserverServeAnswersAndExitsWithTheCodeAsked(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	cmd := exec.Command(Program(t, "testserver"), "serve", fmt.Sprintf("--port=%d", port))
	startAndWaitLine(t, cmd, "serving on")
	get := func(path string) (int, string) {
		t.Helper()
		resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d%s", port, path))
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, strings.TrimSpace(string(body))
	}
	hostname, _ := os.Hostname()
	for _, c := range []struct {
		path string
		code int
		body string
	}{
		{"/", 200, hostname},
		{"/hostname", 200, hostname},
		{"/echo?msg=hi", 200, "hi"},
		{"/healthz", 200, "ok"},
		{"/healthz/fail", 200, ""},
		{"/healthz", 503, "failing"},
		{"/healthz/ok", 200, ""},
		{"/healthz", 200, "ok"},
		{"/exit?code=3", 200, "exiting with 3"},
	} {
		if code, body := get(c.path); code != c.code || body != c.body {
			t.Errorf("GET %s = %d %q, want %d %q", c.path, code, body, c.code, c.body)
		}
	}
	if err := cmd.Wait(); err == nil || cmd.ProcessState.ExitCode() != 3 {
		t.Errorf("after /exit?code=3 the server ended with %v", err)
	}
}

func TestTestserverStopSignalSaysWhichSignalCame(t *testing.T) {
	bin := Program(t, "testserver")
	for _, sig := range []syscall.Signal{syscall.SIGUSR1, syscall.SIGTERM} {
		cmd := exec.Command(bin, "stop-signal")
		lines := startAndWaitLine(t, cmd, "waiting for a signal")
		cmd.Process.Signal(sig)
		lines.Scan()
		if got, want := lines.Text(), "received "+map[syscall.Signal]string{syscall.SIGUSR1: "SIGUSR1", syscall.SIGTERM: "SIGTERM"}[sig]; got != want {
			t.Errorf("printed %q, want %q", got, want)
		}
		if err := cmd.Wait(); err != nil {
			t.Errorf("%v: ended with %v, want exit 0", sig, err)
		}
	}
}

func TestTestserverFailSleepAndEntrypointTester(t *testing.T) {
	bin := Program(t, "testserver")
	if err := exec.Command(bin, "fail", "42").Run(); err == nil || err.(*exec.ExitError).ExitCode() != 42 {
		t.Errorf("fail 42: %v", err)
	}
	start := time.Now()
	if err := exec.Command(bin, "sleep", "0.2").Run(); err != nil || time.Since(start) < 200*time.Millisecond {
		t.Errorf("sleep 0.2: %v after %v", err, time.Since(start))
	}
	cmd := exec.Command(bin, "entrypoint-tester", "a b", "c")
	cmd.Env = []string{"Z=1", "A=2"}
	cmd.Dir = "/"
	out, err := cmd.Output()
	want := fmt.Sprintf("argv[0]=%s\nargv[1]=entrypoint-tester\nargv[2]=a b\nargv[3]=c\nuid=%d gid=%d\ncwd=/\nenv A=2\nenv Z=1\n", bin, os.Getuid(), os.Getgid())
	if err != nil || string(out) != want {
		t.Errorf("entrypoint-tester: %v\n%s\nwant\n%s", err, out, want)
	}
}

func freeTestPort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// Liveness tests need a /healthz that turns bad by itself, and to see who
// asked: every request is a line of the log, with its User-Agent.
func TestTestserverHealthzFailsAfterNRequestsAndEachRequestIsLogged(t *testing.T) {
	port := freeTestPort(t)
	cmd := exec.Command(Program(t, "testserver"), "serve", fmt.Sprintf("--port=%d", port), "--healthz-fail-after=2")
	lines := startAndWaitLine(t, cmd, "serving on")
	for i, want := range []int{200, 200, 500, 500} {
		req, _ := http.NewRequest("GET", fmt.Sprintf("http://127.0.0.1:%d/healthz", port), nil)
		req.Header.Set("User-Agent", "probe/1")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("request %d: %d, want %d", i+1, resp.StatusCode, want)
		}
		for lines.Scan() && !strings.HasPrefix(lines.Text(), "request ") {
		}
		if got := lines.Text(); got != `request GET /healthz user-agent="probe/1"` {
			t.Errorf("request %d logged as %q", i+1, got)
		}
	}
}

func TestTestserverGRPCHealthServes(t *testing.T) {
	port := freeTestPort(t)
	startAndWaitLine(t, exec.Command(Program(t, "testserver"), "grpc-health", fmt.Sprintf("--port=%d", port)), "serving on")
	conn, err := grpc.NewClient(fmt.Sprintf("127.0.0.1:%d", port), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
	if err != nil || resp.Status != healthpb.HealthCheckResponse_SERVING {
		t.Errorf("health check: %v %v, want SERVING", resp, err)
	}
}

// The busybox image's flock: a second holder is refused with -n while the
// first one's file stays open, and gets the lock once it is closed.
func TestFlockProgramLocksTheOpenFile(t *testing.T) {
	bin, err := program("flock")
	if err != nil {
		t.Fatal(err)
	}
	flock := filepath.Join(t.TempDir(), "flock")
	if err := os.WriteFile(flock, bin, 0o755); err != nil {
		t.Fatal(err)
	}
	lock := filepath.Join(t.TempDir(), "lock")
	holder := exec.Command("sh", "-c", fmt.Sprintf(`exec 9>>%s; %s -n 9 || exit 3; echo held; read x`, lock, flock))
	in, _ := holder.StdinPipe()
	startAndWaitLine(t, holder, "held")
	second := fmt.Sprintf(`exec 9>>%s; %s -n 9`, lock, flock)
	if err := exec.Command("sh", "-c", second).Run(); err == nil || err.(*exec.ExitError).ExitCode() != 1 {
		t.Errorf("flock -n while held: %v, want exit 1", err)
	}
	in.Close()
	holder.Wait()
	if err := exec.Command("sh", "-c", second).Run(); err != nil {
		t.Errorf("flock -n once released: %v", err)
	}
}

// The memory-pressure test's hog: its memory is resident, not just reserved.
func TestTestserverHogHoldsResidentMemory(t *testing.T) {
	const size = 64 << 20
	cmd := exec.Command(Program(t, "testserver"), "hog", fmt.Sprint(size))
	startAndWaitLine(t, cmd, fmt.Sprintf("holding %d bytes", size))
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", cmd.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	var rssKiB int64
	for _, line := range strings.Split(string(status), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			fmt.Sscanf(strings.TrimSpace(v), "%d", &rssKiB)
		}
	}
	if rssKiB*1024 < size {
		t.Errorf("resident %d KiB, want at least the %d MiB held", rssKiB, size>>20)
	}
}
