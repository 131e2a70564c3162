package images

import (
	"bufio"
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
)

// hostTestserver writes the testserver binary out so its modes can be
// checked on the host, quicker than in a container.
func hostTestserver(t *testing.T) string {
	t.Helper()
	bin, err := testserverBinary()
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "testserver")
	if err := os.WriteFile(p, bin, 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

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
	cmd := exec.Command(hostTestserver(t), "serve", fmt.Sprintf("--port=%d", port))
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
	bin := hostTestserver(t)
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
	bin := hostTestserver(t)
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
