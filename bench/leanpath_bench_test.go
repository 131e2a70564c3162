package bench

// Issue 31's prototype of a lean runtime path, measured before anything is
// built: what starting an isolated pod costs when podvisor does the pod's
// steps itself instead of containerd, its shim, the pause container and
// three CNI plugin executions. Per pod, in a burst of PODVISOR_BENCH_PODS
// (default 100) with at most 2 per CPU at once (as the CRI runtime's gate):
//
//   - a network namespace, bound under /run/netns (no pause process holds it);
//   - a veth pair made with netlink, its peer moved into the namespace,
//     renamed eth0, given an address from an in-process allocator and a
//     default route; lo up; the host end on a bridge of the benchmark's own
//     (no address on the bridge, no route on the host: nothing can leave);
//   - an overlay mount of a busybox rootfs (the image's layers, as
//     containerd's snapshotter hands them over);
//   - an OCI bundle with the isolation the CRI runtime gives a container
//     (namespaces pid, ipc, uts, mount, the pod's network, cgroup on v2;
//     containerd's default capabilities; Docker's default seccomp profile;
//     masked and read-only paths; its own cgroup) and `runc|crun run -d`.
//
// CPU is counted for the benchmark process (netlink, mounts, bundle
// writes: kernel time included), its children (the OCI runtime CLI) and
// the container's process (runc init's or crun's work before the exec of
// `sleep`, which itself uses none). The teardown (`delete -f`, unmount,
// namespace removal) is counted apart.

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"net"
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
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

func BenchmarkLeanPathPrimitives(b *testing.B) {
	if os.Geteuid() != 0 {
		b.Skip("needs root: namespaces, mounts, cgroups")
	}
	for _, v := range []struct {
		rt      string
		seccomp bool
	}{{"runc", true}, {"runc", false}, {"crun", true}} {
		rt := v.rt
		name := "oci=" + rt
		if !v.seccomp {
			// What the default profile costs: runc compiles it with
			// libseccomp in every container's init.
			name += "-no-seccomp"
		}
		b.Run(name, func(b *testing.B) {
			// PODVISOR_BENCH_RUNC / PODVISOR_BENCH_CRUN name another build.
			bin, err := exec.LookPath(cmp.Or(os.Getenv("PODVISOR_BENCH_"+strings.ToUpper(rt)), rt))
			if err != nil {
				b.Skipf("%s is not installed (Debian package %s)", rt, rt)
			}
			version, _ := exec.Command(bin, "--version").Output()
			b.Logf("%s: %s", bin, strings.SplitN(string(version), "\n", 2)[0])
			if rt == "crun" && hybridWithV2Controllers() {
				// crun 1.8 refuses to run anything there, even with its
				// cgroup manager disabled.
				b.Skip("crun refuses a hybrid cgroup hierarchy whose v2 half has controllers (/sys/fs/cgroup/unified/cgroup.controllers)")
			}
			lab := newLeanLab(b, bin)
			if !v.seccomp {
				lab.base.Linux.Seccomp = nil
			}
			n := benchPods()
			var start, stop leanCost
			var lat []time.Duration
			for i := 0; i < b.N; i++ {
				c, l := lab.burst(b, i, n)
				start.add(c)
				lat = append(lat, l...)
				c, err := lab.teardown(i, n)
				if err != nil {
					b.Fatal(err)
				}
				stop.add(c)
			}
			d := newDist(lat)
			per := float64(b.N * n)
			b.ReportMetric(ms(d.q(0.5)), "p50-ms")
			b.ReportMetric(ms(d.q(0.99)), "p99-ms")
			b.ReportMetric(start.wall.Seconds()/float64(b.N), "burst-s")
			b.ReportMetric(per/start.wall.Seconds(), "pods/s")
			b.ReportMetric(ms(start.self)/per, "self-cpu-ms/pod")
			b.ReportMetric(ms(start.children)/per, "oci-cli-cpu-ms/pod")
			b.ReportMetric(ms(start.init)/per, "init-cpu-ms/pod")
			b.ReportMetric(ms(start.total())/per, "cpu-ms/pod")
			b.ReportMetric(ms(stop.total())/per, "teardown-cpu-ms/pod")
		})
	}
}

// benchPods is PODVISOR_BENCH_PODS, default BenchmarkPodStart's burst.
func benchPods() int {
	if n, err := strconv.Atoi(os.Getenv("PODVISOR_BENCH_PODS")); err == nil && n > 0 {
		return n
	}
	return startPods
}

// leanCost is the CPU a burst or a teardown took, by whom.
type leanCost struct {
	wall, self, children, init time.Duration
}

func (c *leanCost) add(o leanCost) {
	c.wall += o.wall
	c.self += o.self
	c.children += o.children
	c.init += o.init
}

func (c leanCost) total() time.Duration { return c.self + c.children + c.init }

// measure runs f and says what it took: wall time, this process's CPU and
// that of the children it waited for.
func measure(f func()) leanCost {
	self0, child0 := rusage(syscall.RUSAGE_SELF), rusage(syscall.RUSAGE_CHILDREN)
	t0 := time.Now()
	f()
	return leanCost{wall: time.Since(t0), self: rusage(syscall.RUSAGE_SELF) - self0,
		children: rusage(syscall.RUSAGE_CHILDREN) - child0}
}

// leanLab is what every pod shares: the OCI runtime, the bridge, the
// image's rootfs, the bundle template and a state directory.
type leanLab struct {
	oci, dir, state, lower, bridge, cgroupParent, id string
	base                                             specs.Spec
}

// hybridWithV2Controllers: cgroup v1 with a v2 hierarchy beside it that
// has controllers enabled.
func hybridWithV2Controllers() bool {
	data, err := os.ReadFile("/sys/fs/cgroup/unified/cgroup.controllers")
	return err == nil && len(strings.TrimSpace(string(data))) > 0
}

func newLeanLab(b *testing.B, oci string) *leanLab {
	b.Helper()
	id := fmt.Sprintf("%04x", os.Getpid()&0xffff)
	l := &leanLab{oci: oci, dir: b.TempDir(), id: id, bridge: "pvlean" + id,
		cgroupParent: "/podvisor-lean-" + id}
	l.state = filepath.Join(l.dir, "state")
	l.lower = filepath.Join(l.dir, "lower")
	for _, d := range []string{l.state, filepath.Join(l.lower, "bin"), filepath.Join(l.lower, "etc"),
		filepath.Join(l.lower, "proc"), filepath.Join(l.lower, "dev"), filepath.Join(l.lower, "sys"),
		filepath.Join(l.lower, "tmp")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			b.Fatal(err)
		}
	}
	busybox, err := exec.LookPath("busybox")
	if err != nil {
		b.Skip("busybox is not installed (Debian package busybox-static)")
	}
	if err := copyFile(busybox, filepath.Join(l.lower, "bin", "busybox"), 0o755); err != nil {
		b.Fatal(err)
	}
	for _, applet := range []string{"sh", "sleep"} {
		if err := os.Symlink("busybox", filepath.Join(l.lower, "bin", applet)); err != nil {
			b.Fatal(err)
		}
	}
	br := &netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: l.bridge}}
	if err := netlink.LinkAdd(br); err != nil {
		b.Fatalf("bridge %s: %v", l.bridge, err)
	}
	b.Cleanup(func() {
		_ = netlink.LinkDel(br)
		// The containers' cgroups went with them; their parent is ours.
		dirs, _ := filepath.Glob(filepath.Join("/sys/fs/cgroup", "*", l.cgroupParent))
		more, _ := filepath.Glob(filepath.Join("/sys/fs/cgroup", l.cgroupParent))
		for _, d := range append(dirs, more...) {
			_ = os.Remove(d)
		}
	})
	if err := netlink.LinkSetUp(br); err != nil {
		b.Fatal(err)
	}
	l.base = l.template(b)
	return l
}

// template is the OCI runtime's own default spec (`spec`: masked and
// read-only paths, /proc, /dev, /sys mounts, namespaces) given what the
// CRI runtime adds: containerd's default capabilities, the default
// seccomp profile, a cgroup namespace, CPU shares.
func (l *leanLab) template(b *testing.B) specs.Spec {
	b.Helper()
	tmpl := filepath.Join(l.dir, "template")
	if err := os.MkdirAll(tmpl, 0o755); err != nil {
		b.Fatal(err)
	}
	if out, err := exec.Command(l.oci, "spec", "--bundle", tmpl).CombinedOutput(); err != nil {
		b.Fatalf("%s spec: %v\n%s", l.oci, err, out)
	}
	data, err := os.ReadFile(filepath.Join(tmpl, "config.json"))
	if err != nil {
		b.Fatal(err)
	}
	var s specs.Spec
	if err := json.Unmarshal(data, &s); err != nil {
		b.Fatal(err)
	}
	caps := []string{"CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FSETID", "CAP_FOWNER", "CAP_MKNOD",
		"CAP_NET_RAW", "CAP_SETGID", "CAP_SETUID", "CAP_SETFCAP", "CAP_SETPCAP",
		"CAP_NET_BIND_SERVICE", "CAP_SYS_CHROOT", "CAP_KILL", "CAP_AUDIT_WRITE"}
	s.Process.Terminal = false
	s.Process.Args = []string{"/bin/sleep", "3600"}
	s.Process.Capabilities = &specs.LinuxCapabilities{Bounding: caps, Effective: caps, Permitted: caps}
	s.Root = &specs.Root{}
	sc, err := seccomp.GetDefaultProfile(&s)
	if err != nil {
		b.Fatal(err)
	}
	s.Linux.Seccomp = sc
	shares := uint64(2)
	s.Linux.Resources = &specs.LinuxResources{CPU: &specs.LinuxCPU{Shares: &shares}}
	var ns []specs.LinuxNamespace
	for _, n := range s.Linux.Namespaces {
		if n.Type != specs.NetworkNamespace && n.Type != specs.CgroupNamespace {
			ns = append(ns, n)
		}
	}
	if unifiedOnly() {
		// As the CRI runtime: a cgroup namespace on cgroup v2 only (on v1
		// the runtime bind-mounts the container's cgroups instead, far
		// cheaper than mounting each hierarchy anew).
		ns = append(ns, specs.LinuxNamespace{Type: specs.CgroupNamespace})
	}
	s.Linux.Namespaces = ns
	return s
}

func (l *leanLab) pod(i, j int) (name, bundle string) {
	name = fmt.Sprintf("lean%s-%d-%d", l.id, i, j)
	return name, filepath.Join(l.dir, name)
}

// eachPod runs f for pods 0..n-1, at most two per CPU at once (as the CRI
// runtime's gate), and waits for them all.
func eachPod(n int, f func(j int)) {
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

// burst starts n pods.
func (l *leanLab) burst(b *testing.B, iter, n int) (leanCost, []time.Duration) {
	b.Helper()
	lat := make([]time.Duration, n)
	pids := make([]int, n)
	errs := make([]error, n)
	t0 := time.Now()
	c := measure(func() {
		eachPod(n, func(j int) {
			pids[j], errs[j] = l.start(iter, j)
			lat[j] = time.Since(t0)
		})
	})
	for j, err := range errs {
		if err != nil {
			_, _ = l.teardown(iter, n)
			b.Fatalf("pod %d: %v", j, err)
		}
		cpu, err := cpuTime(pids[j])
		if err != nil {
			b.Fatalf("pod %d: its container is not running: %v", j, err)
		}
		c.init += cpu
	}
	return c, lat
}

// start makes pod j's network, rootfs and bundle and runs its container;
// it returns the container's pid.
func (l *leanLab) start(iter, j int) (int, error) {
	name, bundle := l.pod(iter, j)
	if err := l.network(name, iter, j); err != nil {
		return 0, fmt.Errorf("network: %w", err)
	}
	rootfs := filepath.Join(bundle, "rootfs")
	for _, d := range []string{rootfs, filepath.Join(bundle, "upper"), filepath.Join(bundle, "work")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return 0, err
		}
	}
	opts := fmt.Sprintf("lowerdir=%s,upperdir=%s/upper,workdir=%s/work", l.lower, bundle, bundle)
	if err := unix.Mount("overlay", rootfs, "overlay", 0, opts); err != nil {
		return 0, fmt.Errorf("overlay: %w", err)
	}
	s := l.base
	s.Root = &specs.Root{Path: rootfs}
	s.Hostname = name
	linux := *s.Linux
	linux.CgroupsPath = l.cgroupParent + "/" + name
	linux.Namespaces = append(append([]specs.LinuxNamespace(nil), linux.Namespaces...),
		specs.LinuxNamespace{Type: specs.NetworkNamespace, Path: "/run/netns/" + name})
	s.Linux = &linux
	data, err := json.Marshal(&s)
	if err != nil {
		return 0, err
	}
	if err := os.WriteFile(filepath.Join(bundle, "config.json"), data, 0o644); err != nil {
		return 0, err
	}
	logf, err := os.Create(filepath.Join(bundle, "out.log"))
	if err != nil {
		return 0, err
	}
	defer logf.Close()
	pidFile := filepath.Join(bundle, "pid")
	cmd := exec.Command(l.oci, "--root", l.state, "run", "-d", "--bundle", bundle, "--pid-file", pidFile, name)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Run(); err != nil {
		out, _ := os.ReadFile(logf.Name())
		return 0, fmt.Errorf("%s run: %v: %s", filepath.Base(l.oci), err, out)
	}
	data, err = os.ReadFile(pidFile)
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(strings.TrimSpace(string(data)))
}

// network makes pod j's namespace and its veth on the lab's bridge. The
// namespace is made on a locked thread that goes back to the host's
// namespace before it is unlocked.
func (l *leanLab) network(name string, iter, j int) error {
	ns, err := func() (netns.NsHandle, error) {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		host, err := netns.Get()
		if err != nil {
			return 0, err
		}
		defer host.Close()
		ns, err := netns.NewNamed(name)
		if serr := netns.Set(host); serr != nil {
			// The thread is in the pod's namespace: never unlock it.
			runtime.LockOSThread()
			return 0, serr
		}
		return ns, err
	}()
	if err != nil {
		return err
	}
	defer ns.Close()
	hostEnd := "vl" + l.id + strconv.FormatInt(int64(iter*100000+j), 36)
	veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: hostEnd, MasterIndex: 0},
		PeerName: "eth0", PeerNamespace: netlink.NsFd(int(ns))}
	br, err := netlink.LinkByName(l.bridge)
	if err != nil {
		return err
	}
	veth.MasterIndex = br.Attrs().Index
	if err := netlink.LinkAdd(veth); err != nil {
		return fmt.Errorf("veth: %w", err)
	}
	if err := netlink.LinkSetUp(veth); err != nil {
		return err
	}
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		return err
	}
	defer h.Close()
	eth0, err := h.LinkByName("eth0")
	if err != nil {
		return err
	}
	// An address of the allocator's (here: by index); the gateway is the
	// bridge's would-be address, on-link, so the route is accepted.
	ip := net.IPv4(10, 254, byte((j+2)>>8), byte((j+2)&0xff))
	if err := h.AddrAdd(eth0, &netlink.Addr{IPNet: &net.IPNet{IP: ip, Mask: net.CIDRMask(16, 32)}}); err != nil {
		return err
	}
	if err := h.LinkSetUp(eth0); err != nil {
		return err
	}
	lo, err := h.LinkByName("lo")
	if err != nil {
		return err
	}
	if err := h.LinkSetUp(lo); err != nil {
		return err
	}
	return h.RouteAdd(&netlink.Route{LinkIndex: eth0.Attrs().Index, Gw: net.IPv4(10, 254, 0, 1)})
}

// teardown removes the burst's pods: containers, rootfs, namespaces.
func (l *leanLab) teardown(iter, n int) (leanCost, error) {
	errs := make([]error, n)
	c := measure(func() {
		eachPod(n, func(j int) {
			name, bundle := l.pod(iter, j)
			var err error
			if out, derr := exec.Command(l.oci, "--root", l.state, "delete", "-f", name).CombinedOutput(); derr != nil {
				err = fmt.Errorf("delete: %v: %s", derr, out)
			}
			if uerr := unix.Unmount(filepath.Join(bundle, "rootfs"), 0); uerr != nil {
				err = errors.Join(err, fmt.Errorf("unmount: %w", uerr))
			}
			if nerr := netns.DeleteNamed(name); nerr != nil {
				err = errors.Join(err, fmt.Errorf("netns: %w", nerr))
			}
			if err != nil {
				errs[j] = fmt.Errorf("%s: %w", name, err)
			}
		})
	})
	if err := errors.Join(errs...); err != nil {
		return c, fmt.Errorf("teardown: %w", err)
	}
	return c, nil
}

func copyFile(from, to string, mode os.FileMode) error {
	data, err := os.ReadFile(from)
	if err != nil {
		return err
	}
	return os.WriteFile(to, data, mode)
}
