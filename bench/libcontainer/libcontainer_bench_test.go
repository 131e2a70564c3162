// Package libcontainer measures issue 31's question about in-process
// container creation: what a container costs when podvisor creates it with
// runc's libcontainer in its own process, instead of running the runc CLI
// (bench/leanpath_bench_test.go measures the CLI). A module of its own:
// libcontainer needs cgo (its nsenter runs before the Go runtime in every
// init) and libseccomp's headers, which the main module's tests must not.
//
//	apt-get install -y libseccomp-dev
//	go -C bench/libcontainer test -tags seccomp -run '^$' -bench . -benchtime 1x
package libcontainer

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/moby/profiles/seccomp"
	_ "github.com/opencontainers/cgroups/devices" // device rules in the containers' cgroups
	"github.com/opencontainers/runc/libcontainer"
	"github.com/opencontainers/runc/libcontainer/configs"
	_ "github.com/opencontainers/runc/libcontainer/nsenter"
	"github.com/opencontainers/runc/libcontainer/specconv"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// The test binary is also the containers' init, as runc's binary is.
func init() {
	if len(os.Args) > 1 && os.Args[1] == "init" {
		libcontainer.Init()
	}
}

func BenchmarkLibcontainerStart(b *testing.B) {
	if os.Geteuid() != 0 {
		b.Skip("needs root")
	}
	for _, withSeccomp := range []bool{true, false} {
		name := "seccomp=default"
		if !withSeccomp {
			name = "seccomp=none"
		}
		b.Run(name, func(b *testing.B) {
			l := newLab(b, withSeccomp)
			n := 100
			if v, err := strconv.Atoi(os.Getenv("PODVISOR_BENCH_PODS")); err == nil && v > 0 {
				n = v
			}
			var self, children, inits, teardown time.Duration
			for i := 0; i < b.N; i++ {
				s0, c0 := rusage(syscall.RUSAGE_SELF), rusage(syscall.RUSAGE_CHILDREN)
				ctrs := make([]*ctr, n)
				errs := make([]error, n)
				each(n, func(j int) { ctrs[j], errs[j] = l.start(fmt.Sprintf("c%d-%d", i, j)) })
				self += rusage(syscall.RUSAGE_SELF) - s0
				children += rusage(syscall.RUSAGE_CHILDREN) - c0
				var initsNow time.Duration
				for j, err := range errs {
					if err == nil {
						cpu, cerr := cpuTime(ctrs[j].pid)
						initsNow += cpu
						err = cerr
					}
					if err != nil {
						l.stopAll(ctrs)
						b.Fatalf("container %d: %v", j, err)
					}
				}
				s1, c1 := rusage(syscall.RUSAGE_SELF), rusage(syscall.RUSAGE_CHILDREN)
				if err := l.stopAll(ctrs); err != nil {
					b.Fatal(err)
				}
				// The containers are this process's children: waiting for them
				// adds their CPU (their init's) to RUSAGE_CHILDREN.
				inits += initsNow
				teardown += rusage(syscall.RUSAGE_SELF) - s1 + rusage(syscall.RUSAGE_CHILDREN) - c1 - initsNow
			}
			per := float64(b.N * n)
			ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 / per }
			b.ReportMetric(ms(self), "in-process-cpu-ms/ctr")
			b.ReportMetric(ms(children), "reaped-children-cpu-ms/ctr")
			b.ReportMetric(ms(inits), "init-cpu-ms/ctr")
			b.ReportMetric(ms(self+children+inits), "cpu-ms/ctr")
			b.ReportMetric(ms(teardown), "teardown-cpu-ms/ctr")
		})
	}
}

type lab struct {
	dir, state, lower, cgroupParent string
	spec                            specs.Spec
}

type ctr struct {
	c      *libcontainer.Container
	p      *libcontainer.Process
	rootfs string
	pid    int
}

func newLab(b *testing.B, withSeccomp bool) *lab {
	b.Helper()
	l := &lab{dir: b.TempDir(), cgroupParent: fmt.Sprintf("/podvisor-libct-%d", os.Getpid())}
	l.state = filepath.Join(l.dir, "state")
	l.lower = filepath.Join(l.dir, "lower")
	for _, d := range []string{"bin", "proc", "dev", "sys", "tmp", "etc"} {
		if err := os.MkdirAll(filepath.Join(l.lower, d), 0o755); err != nil {
			b.Fatal(err)
		}
	}
	busybox, err := exec.LookPath("busybox")
	if err != nil {
		b.Skip("busybox is not installed (Debian package busybox-static)")
	}
	data, err := os.ReadFile(busybox)
	if err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(l.lower, "bin", "busybox"), data, 0o755); err != nil {
		b.Fatal(err)
	}
	if err := os.Symlink("busybox", filepath.Join(l.lower, "bin", "sleep")); err != nil {
		b.Fatal(err)
	}
	// runc's default spec, with what the CRI runtime adds (as the CLI
	// prototype: containerd's capabilities, the default seccomp profile,
	// CPU shares, a cgroup namespace on v2 only).
	s := specconv.Example()
	caps := []string{"CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FSETID", "CAP_FOWNER", "CAP_MKNOD",
		"CAP_NET_RAW", "CAP_SETGID", "CAP_SETUID", "CAP_SETFCAP", "CAP_SETPCAP",
		"CAP_NET_BIND_SERVICE", "CAP_SYS_CHROOT", "CAP_KILL", "CAP_AUDIT_WRITE"}
	s.Process.Terminal = false
	s.Process.Args = []string{"/bin/sleep", "3600"}
	s.Process.Capabilities = &specs.LinuxCapabilities{Bounding: caps, Effective: caps, Permitted: caps}
	if withSeccomp {
		if s.Linux.Seccomp, err = seccomp.GetDefaultProfile(s); err != nil {
			b.Fatal(err)
		}
	}
	shares := uint64(2)
	s.Linux.Resources = &specs.LinuxResources{CPU: &specs.LinuxCPU{Shares: &shares}}
	var ns []specs.LinuxNamespace
	for _, n := range s.Linux.Namespaces {
		if n.Type != specs.CgroupNamespace {
			ns = append(ns, n)
		}
	}
	if _, err := os.Stat("/sys/fs/cgroup/cgroup.controllers"); err == nil {
		ns = append(ns, specs.LinuxNamespace{Type: specs.CgroupNamespace})
	}
	s.Linux.Namespaces = ns
	l.spec = *s
	b.Cleanup(func() {
		dirs, _ := filepath.Glob(filepath.Join("/sys/fs/cgroup", "*", l.cgroupParent))
		more, _ := filepath.Glob(filepath.Join("/sys/fs/cgroup", l.cgroupParent))
		for _, d := range append(dirs, more...) {
			_ = os.Remove(d)
		}
	})
	return l
}

// start makes a container's overlay rootfs and runs it.
func (l *lab) start(name string) (*ctr, error) {
	bundle := filepath.Join(l.dir, name)
	rootfs := filepath.Join(bundle, "rootfs")
	for _, d := range []string{rootfs, filepath.Join(bundle, "upper"), filepath.Join(bundle, "work")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, err
		}
	}
	opts := fmt.Sprintf("lowerdir=%s,upperdir=%s/upper,workdir=%s/work", l.lower, bundle, bundle)
	if err := unix.Mount("overlay", rootfs, "overlay", 0, opts); err != nil {
		return nil, fmt.Errorf("overlay: %w", err)
	}
	s := l.spec
	s.Root = &specs.Root{Path: rootfs}
	s.Hostname = name
	linux := *s.Linux
	linux.CgroupsPath = l.cgroupParent + "/" + name
	s.Linux = &linux
	config, err := specconv.CreateLibcontainerConfig(&specconv.CreateOpts{CgroupName: name, Spec: &s})
	if err != nil {
		return nil, err
	}
	c, err := libcontainer.Create(l.state, name, config)
	if err != nil {
		return nil, err
	}
	caps := s.Process.Capabilities
	out, err := os.Create(filepath.Join(bundle, "out.log"))
	if err != nil {
		return nil, err
	}
	defer out.Close()
	p := &libcontainer.Process{Args: s.Process.Args, Env: s.Process.Env, Cwd: "/", Init: true,
		Stdout: out, Stderr: out,
		Capabilities: &configs.Capabilities{Bounding: caps.Bounding, Effective: caps.Effective, Permitted: caps.Permitted}}
	if err := c.Run(p); err != nil {
		_ = c.Destroy()
		return nil, fmt.Errorf("run: %w", err)
	}
	pid, err := p.Pid()
	return &ctr{c: c, p: p, rootfs: rootfs, pid: pid}, err
}

// stopAll kills and removes the containers and their rootfs.
func (l *lab) stopAll(ctrs []*ctr) error {
	var mu sync.Mutex
	var errs []string
	each(len(ctrs), func(j int) {
		c := ctrs[j]
		if c == nil {
			return
		}
		_ = c.c.Signal(unix.SIGKILL)
		_, _ = c.p.Wait()
		err := c.c.Destroy()
		if uerr := unix.Unmount(c.rootfs, 0); uerr != nil && err == nil {
			err = uerr
		}
		if err != nil {
			mu.Lock()
			errs = append(errs, err.Error())
			mu.Unlock()
		}
	})
	if len(errs) > 0 {
		return fmt.Errorf("teardown: %s", strings.Join(errs, "; "))
	}
	return nil
}

// each runs f for 0..n-1, two per CPU at once, as the CRI runtime's gate.
func each(n int, f func(j int)) {
	sem := make(chan struct{}, 2*runtime.NumCPU())
	var wg sync.WaitGroup
	for j := 0; j < n; j++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			f(j)
		}()
	}
	wg.Wait()
}

func rusage(who int) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(who, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// cpuTime is utime+stime of pid (USER_HZ is 100 on Linux).
func cpuTime(pid int) (time.Duration, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	i := strings.LastIndexByte(string(data), ')')
	f := strings.Fields(string(data[i+1:]))
	if i < 0 || len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: unexpected format", pid)
	}
	u, err1 := strconv.ParseInt(f[11], 10, 64)
	s, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("/proc/%d/stat: bad utime/stime", pid)
	}
	return time.Duration(u+s) * 10 * time.Millisecond, nil
}
