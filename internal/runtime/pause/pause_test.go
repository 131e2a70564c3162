package pause

import (
	"bytes"
	"debug/elf"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestBinaryIsAStaticExecutable(t *testing.T) {
	bin, err := Binary("amd64")
	if err != nil {
		t.Fatal(err)
	}
	f, err := elf.NewFile(bytes.NewReader(bin))
	if err != nil {
		t.Fatal(err)
	}
	if f.Type != elf.ET_EXEC || f.Machine != elf.EM_X86_64 || f.Class != elf.ELFCLASS64 {
		t.Errorf("type %v machine %v class %v", f.Type, f.Machine, f.Class)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP || p.Type == elf.PT_DYNAMIC {
			t.Errorf("program header %v: pause must be static", p.Type)
		}
		if p.Type == elf.PT_GNU_STACK && p.Flags&elf.PF_X != 0 {
			t.Error("stack is executable")
		}
	}
	if len(bin) != 268 {
		t.Errorf("pause is %d bytes, expected 268", len(bin))
	}
	if _, err := Binary("riscv64"); err == nil {
		t.Error("Binary(riscv64): no error for an architecture without code")
	}
}

func TestImageIsUpstreamShaped(t *testing.T) {
	if runtime.GOARCH != "amd64" {
		t.Skip("pause exists for amd64 only")
	}
	im, err := Image()
	if err != nil {
		t.Fatal(err)
	}
	if im.Names[0] != "registry.k8s.io/pause:3.10.2" || im.Config.Entrypoint[0] != "/pause" || im.Config.User != "65535:65535" {
		t.Errorf("image %+v", im)
	}
}

// startPause runs the pause program and waits until it has set up its
// signal dispositions (read back from /proc).
func startPause(t *testing.T, attr *syscall.SysProcAttr) *exec.Cmd {
	t.Helper()
	if runtime.GOARCH != "amd64" {
		t.Skip("pause exists for amd64 only")
	}
	bin, _ := Binary("amd64")
	p := filepath.Join(t.TempDir(), "pause")
	if err := os.WriteFile(p, bin, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(p)
	cmd.SysProcAttr = attr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	const sigint, sigterm, sigchld = 1 << (2 - 1), 1 << (15 - 1), 1 << (17 - 1)
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		caught, ignored := signalMasks(t, cmd.Process.Pid)
		if caught&(sigint|sigterm) == sigint|sigterm && ignored&sigchld != 0 {
			return cmd
		}
		if time.Now().After(deadline) {
			t.Fatalf("pause never set its signals: caught %x ignored %x", caught, ignored)
		}
	}
}

func signalMasks(t *testing.T, pid int) (caught, ignored uint64) {
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(status), "\n") {
		k, v, _ := strings.Cut(line, ":")
		n, _ := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
		switch k {
		case "SigCgt":
			caught = n
		case "SigIgn":
			ignored = n
		}
	}
	return caught, ignored
}

func TestPauseExitsZeroOnSIGTERMAndSIGINT(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT} {
		cmd := startPause(t, nil)
		cmd.Process.Signal(sig)
		if err := cmd.Wait(); err != nil {
			t.Errorf("%v: pause ended with %v, want exit 0", sig, err)
		}
	}
}

func TestPauseAsPID1LeavesNoZombies(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("a PID namespace needs root")
	}
	nsenter, err := exec.LookPath("nsenter")
	if err != nil {
		t.Skip("no nsenter")
	}
	cmd := startPause(t, &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWPID})
	pid := cmd.Process.Pid
	// The shell exits at once; its sleep is reparented to pause, PID 1 of the namespace.
	if out, err := exec.Command(nsenter, "-t", strconv.Itoa(pid), "-p", "sh", "-c", "sleep 0.3 >/dev/null 2>&1 &").CombinedOutput(); err != nil {
		t.Fatalf("nsenter: %v: %s", err, out)
	}
	if kids := children(pid); len(kids) != 1 {
		t.Fatalf("pause has children %v, want the orphaned sleep", kids)
	}
	for deadline := time.Now().Add(5 * time.Second); len(children(pid)) > 0; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("children left after the sleep ended: %v", children(pid))
		}
	}
	cmd.Process.Signal(syscall.SIGTERM)
	if err := cmd.Wait(); err != nil {
		t.Errorf("pause as PID 1 ended with %v, want exit 0", err)
	}
}

// children lists "pid state" of ppid's children, zombies included.
func children(ppid int) []string {
	var out []string
	dirs, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, d := range dirs {
		b, err := os.ReadFile(d)
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...
		i := bytes.LastIndexByte(b, ')')
		f := strings.Fields(string(b[i+1:]))
		if len(f) > 1 && f[1] == strconv.Itoa(ppid) {
			out = append(out, strings.TrimSuffix(strings.TrimPrefix(d, "/proc/"), "/stat")+" "+f[0])
		}
	}
	return out
}
