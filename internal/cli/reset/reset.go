// Package reset stops and removes what podvisor leaves running for a data
// directory — podvisor's k3s-killall.sh. Containers outlive podvisor by
// design (the next start re-adopts them); reset is for when they should not:
// every pod sandbox and container, their shims and processes, their mounts
// and network namespaces, containerd's state directory, the pod network's
// bridge and masquerade rule, the service proxy's rules. The data directory itself (etcd, PKI,
// images) is kept.
package reset

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel/trace/noop"
	criclient "k8s.io/cri-client/pkg"

	"github.com/podvisor/podvisor/internal/cli/datadir"
	"github.com/podvisor/podvisor/internal/cluster/podnet"
	"github.com/podvisor/podvisor/internal/cluster/serviceproxy"
	"github.com/podvisor/podvisor/internal/host/mounts"
	"github.com/podvisor/podvisor/internal/host/proctree"
	"github.com/podvisor/podvisor/internal/runtime/containerd"
)

// Result says what Run removed.
type Result struct {
	Sandboxes int // pod sandboxes stopped and removed through the CRI
	Killed    int // processes killed (shims and what ran under them)
	Unmounted int // mount points detached
}

// Run resets dataDir. It refuses while a podvisor runs with that data
// directory (its containerd answers). With a containerd configured there,
// it starts one to stop and remove the pod sandboxes through the CRI, as
// the agent would (network teardown included); what is left after that, or
// all of it when containerd cannot start, is killed and unmounted by hand.
func Run(ctx context.Context, dataDir string, log *slog.Logger) (Result, error) {
	var res Result
	abs, err := filepath.Abs(dataDir)
	if err != nil {
		return res, err
	}
	if _, err := os.Stat(abs); err != nil {
		return res, fmt.Errorf("data dir %s: %w", abs, err)
	}
	paths, err := containerd.PathsFor(abs)
	if err != nil {
		return res, err
	}
	if containerd.Serving(paths.Socket) {
		return res, fmt.Errorf("podvisor is still running with data dir %s (its containerd answers on %s): stop it first", abs, paths.Socket)
	}
	if pid := runningWith(abs); pid != 0 {
		return res, fmt.Errorf("podvisor is still running with data dir %s (pid %d): stop it first", abs, pid)
	}
	if _, err := os.Stat(paths.Config); err == nil {
		n, err := removeSandboxes(ctx, abs, log)
		res.Sandboxes = n
		if err != nil {
			log.Warn("reset: could not remove the pod sandboxes through containerd; killing what is left", "err", err)
		}
	}
	// The containerd runtime's shims name its state directory; the process
	// runtime's shims (podvisor-shim) name the data directory.
	res.Killed = killTrees(func(cmdline string) bool {
		return strings.Contains(cmdline, paths.State+"/") || strings.Contains(cmdline, abs+"/")
	})
	points := mounts.Points()
	res.Unmounted = mounts.UnmountUnder(paths.State, points) + mounts.UnmountUnder(abs, points)
	if err := os.RemoveAll(paths.State); err != nil {
		log.Warn("reset: containerd's state directory", "dir", paths.State, "err", err)
	}
	containerd.RemovePodNetwork(paths, "")
	podnet.RemoveRoutes()
	// The proxy's rules are the network namespace's, not the data dir's:
	// another podvisor running here may be the one that made them.
	if others := podvisorsInMyNetns(); len(others) > 0 {
		log.Warn("reset: the service proxy's rules are kept: another podvisor runs in this network namespace", "pids", others)
	} else if err := serviceproxy.Cleanup(ctx); err != nil {
		log.Warn("reset: the service proxy's rules", "err", err)
	}
	return res, nil
}

// removeSandboxes starts the data dir's containerd and stops and removes
// every pod sandbox (their containers with them) through the CRI.
func removeSandboxes(ctx context.Context, dataDir string, log *slog.Logger) (int, error) {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	p, err := containerd.Start(ctx, containerd.Options{DataDir: dataDir, Log: quiet, Timeout: time.Minute})
	if err != nil {
		return 0, err
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		_ = p.Stop(sctx)
	}()
	rs, err := criclient.NewRemoteRuntimeService(ctx, p.Endpoint(), 30*time.Second, noop.NewTracerProvider(), false)
	if err != nil {
		return 0, err
	}
	defer rs.Close(context.WithoutCancel(ctx))
	pods, err := rs.ListPodSandbox(ctx, nil)
	if err != nil {
		return 0, err
	}
	n := 0
	var errs []error
	for _, pod := range pods {
		name := pod.GetMetadata().GetNamespace() + "/" + pod.GetMetadata().GetName()
		if err := rs.StopPodSandbox(ctx, pod.Id); err != nil {
			errs = append(errs, fmt.Errorf("stop sandbox of %s: %w", name, err))
			continue
		}
		if err := rs.RemovePodSandbox(ctx, pod.Id); err != nil {
			errs = append(errs, fmt.Errorf("remove sandbox of %s: %w", name, err))
			continue
		}
		log.Info("reset: pod sandbox removed", "pod", name, "id", pod.Id)
		n++
	}
	return n, errors.Join(errs...)
}

// holdsFileUnder reports whether process pid has a file under dir open (a
// running podvisor keeps DATA_DIR/podvisor.log open): the data dir may come
// from a config file rather than the command line.
func holdsFileUnder(pid, dir string) bool {
	fds, _ := os.ReadDir("/proc/" + pid + "/fd")
	for _, fd := range fds {
		if target, err := os.Readlink("/proc/" + pid + "/fd/" + fd.Name()); err == nil && strings.HasPrefix(target, dir+"/") {
			return true
		}
	}
	return false
}

// podvisorsInMyNetns lists the pids of the `podvisor up` and `podvisor
// agent` processes of this network namespace, whatever their data dir.
func podvisorsInMyNetns() []int {
	mine, err := os.Readlink("/proc/self/ns/net")
	if err != nil {
		return nil
	}
	var pids []int
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() || !isPodvisorNode(e.Name()) {
			continue
		}
		if ns, err := os.Readlink("/proc/" + e.Name() + "/ns/net"); err == nil && ns == mine {
			pids = append(pids, pid)
		}
	}
	return pids
}

// isPodvisorNode reports whether process pid is a `podvisor up` or
// `podvisor agent` (which keeps its command line when it execs
// podvisor-agent), or podvisor-agent started by itself.
func isPodvisorNode(pid string) bool {
	return isNodeCommand(cmdline(pid))
}

func isNodeCommand(args []string) bool {
	if len(args) >= 1 && filepath.Base(args[0]) == "podvisor-agent" {
		return len(args) < 2 || args[1] != "__shim"
	}
	return len(args) >= 2 && filepath.Base(args[0]) == "podvisor" && (args[1] == "up" || args[1] == "agent")
}

func cmdline(pid string) []string {
	b, err := os.ReadFile("/proc/" + pid + "/cmdline")
	if err != nil {
		return nil
	}
	return strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
}

// runningWith returns the pid of a `podvisor up` or `podvisor agent` whose
// data directory is dir, or 0.
func runningWith(dir string) int {
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() || !isPodvisorNode(e.Name()) {
			continue
		}
		args := cmdline(e.Name())
		d := datadir.Default()
		for i, a := range args {
			switch {
			case (a == "--data-dir" || a == "-data-dir") && i+1 < len(args):
				d = args[i+1]
			case strings.HasPrefix(a, "--data-dir="), strings.HasPrefix(a, "-data-dir="):
				_, d, _ = strings.Cut(a, "=")
			}
		}
		if !filepath.IsAbs(d) {
			if cwd, err := os.Readlink("/proc/" + e.Name() + "/cwd"); err == nil {
				d = filepath.Join(cwd, d)
			}
		}
		if filepath.Clean(d) == dir || holdsFileUnder(e.Name(), dir) {
			return pid
		}
	}
	return 0
}

// killTrees SIGKILLs every process whose command line matches, and every
// process below one, and returns how many it killed. A shim is killed with
// its containers: a container may have left its shim's process group.
func killTrees(match func(cmdline string) bool) int {
	return proctree.Kill(proctree.Read().Trees(func(p proctree.Process) bool { return match(p.Cmdline()) }))
}
