// Command conformance runs the upstream Kubernetes v1.36.3 e2e specs
// against a podvisor of its own, offline:
//
//	go -C test/conformance run . [-suite node|conformance] [-fast | -focus REGEX] [-procs N] [-nodes N] [-keep] [-out DIR]
//
// It builds podvisor, the e2e test binary of the suite (./suite: sig-node;
// ./e2e: every SIG) and the images the specs run, under their upstream
// names; serves them from a registry on 127.0.0.1 that podvisor's
// registries.yaml mirrors registry.k8s.io to; starts `podvisor up` with a
// fresh data dir, its agent on the kubelet's port 10250 where that is free;
// keeps the service and pod networks on this machine (netguard.go); imports
// the images; runs the selection (see selection.go and exclusions.txt), the
// [Serial] specs in a lane of their own after the parallel one; writes the
// JUnit reports and the e2e log in Sonobuoy's results layout, ginkgo's JSON
// reports and a summary, and prints per-area counts; and stops podvisor,
// removing everything it started. With -nodes N (N ≥ 2) the specs run
// against a `podvisor server` and N joined agents in network namespaces
// instead (cluster.go). It must run as root, as podvisor's containerd
// runtime does.
package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/podvisor/podvisor/test/netlab"
)

func main() {
	focus := flag.String("focus", "", "run only the selected specs whose text matches this regular expression")
	suiteName := flag.String("suite", "node", "the selection: node (sig-node's [NodeConformance] and [Conformance] specs) or conformance (every SIG's [Conformance] specs, [Serial] included, and sig-node's [NodeConformance])")
	fast := flag.Bool("fast", false, "run only the lifecycle subset that CI runs (subset.go), about 20 specs of the node suite")
	keep := flag.Bool("keep", false, "keep the work directory (podvisor's data dir, logs, binaries)")
	out := flag.String("out", "conformance-results", "directory for the reports and the summary")
	nodes := flag.Int("nodes", 1, "nodes of the cluster: 1 runs `podvisor up`; N ≥ 2 a `podvisor server` and N joined agents, each in a network namespace of its own on a bridge (test/netlab)")
	procs := flag.Int("procs", 1, "specs run at once (more than 1 runs them through the ginkgo CLI)")
	timeout := flag.Duration("timeout", 6*time.Hour, "time limit of each lane of the spec run (parallel, serial)")
	cache := flag.String("cache", defaultCache(), "directory where built images are kept between runs")
	resummarize := flag.Bool("summarize", false, "run nothing: count the JSON reports (report_NN.json) of an earlier run in -out again and rewrite its summary.md (same -suite, -focus and exclusions)")
	flag.Parse()
	s, ok := suites[*suiteName]
	if !ok {
		fmt.Fprintf(os.Stderr, "-suite %q: want node or conformance\n", *suiteName)
		os.Exit(2)
	}
	if *fast {
		if s.name != "node" {
			fmt.Fprintln(os.Stderr, "-fast is a subset of -suite node")
			os.Exit(2)
		}
		if *focus != "" {
			fmt.Fprintln(os.Stderr, "-fast and -focus do not go together")
			os.Exit(2)
		}
		*focus = fastFocus()
	}
	if flag.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "unexpected arguments %q\n", flag.Args())
		os.Exit(2)
	}
	if *nodes < 1 {
		fmt.Fprintln(os.Stderr, "-nodes: want 1 or more")
		os.Exit(2)
	}
	o := options{suite: s, focus: *focus, keep: *keep, out: *out, procs: *procs, nodes: *nodes, timeout: *timeout, cache: *cache}
	run := run
	if *resummarize {
		run = summarizeOnly
	}
	code, err := run(o)
	if err != nil {
		fmt.Fprintln(os.Stderr, "conformance:", err)
		os.Exit(1)
	}
	os.Exit(code)
}

type options struct {
	suite             suite
	focus, out, cache string
	keep              bool
	procs, nodes      int
	timeout           time.Duration
}

// summarizeOnly is -summarize: the summary of an earlier run's reports.
func summarizeOnly(o options) (int, error) {
	exclusions, err := runExclusions(o.suite, o.nodes)
	if err != nil {
		return 0, err
	}
	reports, err := filepath.Glob(filepath.Join(o.out, "report_[0-9][0-9].json"))
	if err != nil || len(reports) == 0 {
		return 0, fmt.Errorf("no report_NN.json in %s (%v)", o.out, err)
	}
	failed, err := writeSummary(o, exclusions, reports, fmt.Sprintf("Reports of %s, suite %s, counted again.", o.out, o.suite.name))
	if err != nil {
		return 0, err
	}
	if failed > 0 {
		return 1, nil
	}
	return 0, nil
}

// runExclusions are exclusions.txt's, the one-node ones for the whole
// suite on a single node, and this machine's.
func runExclusions(s suite, nodes int) ([]exclusion, error) {
	mod, err := os.Getwd()
	if err != nil {
		return nil, err
	}
	exclusions, err := readExclusions(filepath.Join(mod, "exclusions.txt"))
	if err != nil {
		return nil, err
	}
	exclusions = append(exclusions, nodeCountExclusions(s, nodes)...)
	for _, e := range machineExclusions() {
		fmt.Printf("excluded on this machine: %s: %s\n", e.re, e.reason)
		exclusions = append(exclusions, e)
	}
	return exclusions, nil
}

func run(o options) (int, error) {
	if os.Geteuid() != 0 {
		return 0, fmt.Errorf("run as root: podvisor's containerd runtime needs it")
	}
	mod, err := os.Getwd()
	if err != nil {
		return 0, err
	}
	if _, err := os.Stat(filepath.Join(mod, "suite")); err != nil {
		return 0, fmt.Errorf("run from test/conformance (go -C test/conformance run .)")
	}
	repo := filepath.Dir(filepath.Dir(mod))
	exclusions, err := runExclusions(o.suite, o.nodes)
	if err != nil {
		return 0, err
	}
	if o.out, err = filepath.Abs(o.out); err != nil {
		return 0, err
	}
	if err := os.MkdirAll(o.out, 0o755); err != nil {
		return 0, err
	}
	if err := os.MkdirAll(o.cache, 0o755); err != nil {
		return 0, err
	}
	work, err := os.MkdirTemp("", "podvisor-conformance-")
	if err != nil {
		return 0, err
	}
	if o.keep {
		fmt.Printf("work directory (kept): %s\n", work)
	} else {
		defer os.RemoveAll(work)
	}
	bin := filepath.Join(work, "bin")
	buildLog, err := os.Create(filepath.Join(o.out, "build.log"))
	if err != nil {
		return 0, err
	}
	defer buildLog.Close()

	step("installing what is missing of Debian's packages")
	if err := ensurePackages(buildLog, "runc", "containernetworking-plugins", "busybox-static", "bind9-dnsutils", "curl", "netcat-openbsd", "bash-static"); err != nil {
		return 0, fmt.Errorf("%w (see %s)", err, buildLog.Name())
	}
	step("building podvisor")
	// podvisor runs podvisor-containerd, containerd-shim-runc-v2 and
	// podvisor-shim from beside itself.
	if err := goCmd(repo, buildLog, "build", "-o", bin+"/", "./cmd/..."); err != nil {
		return 0, fmt.Errorf("building podvisor: %w (see %s)", err, buildLog.Name())
	}
	step("building the e2e test binary (" + o.suite.pkg + ")")
	if err := goCmd(mod, buildLog, "test", "-c", "-o", filepath.Join(bin, "e2e.test"), o.suite.pkg); err != nil {
		return 0, fmt.Errorf("building e2e.test: %w (see %s)", err, buildLog.Name())
	}
	if o.procs > 1 {
		if err := goCmd(mod, buildLog, "build", "-o", filepath.Join(bin, "ginkgo"), "github.com/onsi/ginkgo/v2/ginkgo"); err != nil {
			return 0, fmt.Errorf("building the ginkgo CLI: %w (see %s)", err, buildLog.Name())
		}
	}
	wide := o.suite.name == "conformance"
	if wide {
		// The kubectl specs run kubectl: podvisor's, which is upstream's
		// (k8s.io/kubectl of the suite's release) under `podvisor kubectl`.
		wrapper := "#!/bin/sh\nexec " + filepath.Join(bin, "podvisor") + " kubectl \"$@\"\n"
		if err := os.WriteFile(filepath.Join(bin, "kubectl"), []byte(wrapper), 0o755); err != nil {
			return 0, err
		}
	}
	step("building the images")
	tars, err := buildImages(repo, o.cache, buildLog, wide)
	if err != nil {
		return 0, fmt.Errorf("%w (see %s)", err, buildLog.Name())
	}

	logf := func(format string, args ...any) { fmt.Fprintf(os.Stderr, format+"\n", args...) }
	// A ^C or SIGTERM during the spec run is passed on to the specs' process
	// group; the run ends, the report is read and the deferred stop removes
	// podvisor and its pods.
	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(signals)
	// podvisor's service proxy and the routes below are the machine's:
	// one at a time with test/e2e's service tests, which take the same lock.
	step("taking the service proxy lock " + serviceProxyLock)
	unlock, err := lockServiceProxy(30*time.Minute, logf)
	if err != nil {
		return 0, err
	}
	defer unlock()
	cidr, err := freePodCIDR()
	if err != nil {
		return 0, err
	}
	guard := netGuard{serviceCIDR: defaultServiceCIDR, clusterCIDR: cidr}
	// The registry listens where the nodes reach it: this namespace's
	// loopback for podvisor up, the lab's bridge for a cluster's agents.
	registryHost := "127.0.0.1"
	var lab *netlab.Lab
	if o.nodes > 1 {
		step(fmt.Sprintf("making a lab of %d machines (network namespaces on a bridge)", o.nodes))
		if lab, err = netlab.New(o.nodes); err != nil {
			return 0, err
		}
		// Deferred first, so it runs last: after the nodes have stopped
		// and the guard is gone.
		defer func() {
			if err := lab.Remove(); err != nil {
				logf("removing the lab: %v", err)
			}
		}()
		guard.labBridge, registryHost = lab.Bridge, lab.Gateway.String()
	}
	// In place before podvisor starts and until it has stopped (its
	// removal is deferred before podvisor's stop, so it runs after it): no
	// pod or Service address ever leaves by the default route.
	defer func() {
		if err := guard.remove(); err != nil {
			logf("removing the network guard: %v", err)
		}
	}()
	if err := guard.install(); err != nil {
		return 0, fmt.Errorf("network guard: %w", err)
	}
	if lab != nil {
		for i := range lab.Hosts {
			if err := loadNFT(guard.machineRules(), lab.Command(i, "nft", "-f", "-")); err != nil {
				return 0, fmt.Errorf("network guard in machine %s: %w", lab.Hosts[i].NS, err)
			}
		}
	}
	fmt.Printf("network guard: %s\n", guard)

	step("serving the images from a registry on " + registryHost)
	reg, err := startRegistry(filepath.Join(work, "registry"), registryHost)
	if err != nil {
		return 0, err
	}
	defer reg.stop()
	if err := reg.pushTars(tars); err != nil {
		return 0, err
	}
	var pv target
	if lab != nil {
		c := &cluster{bin: filepath.Join(bin, "podvisor"), work: work, logDir: o.out, lab: lab}
		pv = c
		step(fmt.Sprintf("starting podvisor server and %d agents", o.nodes))
		defer func() {
			step("stopping podvisor's agents and server and removing their pods")
			c.stop(logf)
		}()
		// Pulls of registry.k8s.io (policy Always) are served by that registry.
		if err := c.start(cidr.String(), reg.registriesYAML()); err != nil {
			return 0, err
		}
		fmt.Println(c)
	} else {
		data := filepath.Join(work, "data")
		if err := os.MkdirAll(data, 0o700); err != nil {
			return 0, err
		}
		// Pulls of registry.k8s.io (policy Always) are served by that registry.
		if err := os.WriteFile(filepath.Join(data, "registries.yaml"), reg.registriesYAML(), 0o600); err != nil {
			return 0, err
		}
		p := &podvisor{bin: filepath.Join(bin, "podvisor"), dataDir: data, nodeName: "conformance",
			logPath: filepath.Join(o.out, "podvisor.log")}
		pv = p
		step("starting podvisor")
		defer func() {
			step("stopping podvisor and removing its pods")
			p.stop(logf)
		}()
		if err := p.start(cidr.String()); err != nil {
			return 0, err
		}
		fmt.Printf("podvisor's agent listens on port %d\n", p.agentPort)
	}
	if got, err := serviceCIDRs(pv.kubeconfig()); err != nil {
		logf("reading the cluster's ServiceCIDRs: %v (guarding %s)", err, guard.serviceCIDR)
	} else if !slices.Contains(got, guard.serviceCIDR.String()) {
		return 0, fmt.Errorf("the cluster's service CIDRs are %v; the network guard has %s", got, guard.serviceCIDR)
	}
	step("importing the images")
	if err := pv.importImages(tars, buildLog); err != nil {
		return 0, err
	}

	res, err := newResultsDir(o.out)
	if err != nil {
		return 0, err
	}
	defer res.close()
	e2eArgs := []string{
		"--kubeconfig=" + pv.kubeconfig(),
		"--provider=skeleton",
		"--container-runtime-endpoint=" + pv.criEndpoint(),
		"--node-os-distro=debian",
	}
	if wide {
		e2eArgs = append(e2eArgs, "--kubectl-path="+filepath.Join(bin, "kubectl"))
	}
	started := time.Now()
	var runErr error
	var reports []string
	for i, l := range lanes(o.suite, o.procs) {
		step(fmt.Sprintf("running the specs: %s lane, %d at once", l.name, l.procs))
		// The framework's own reports (its junit_01.xml, ginkgo/) per lane;
		// the lanes' JUnit reports go to the Sonobuoy layout.
		args := append(slices.Clone(e2eArgs), "--report-dir="+filepath.Join(o.out, "framework", l.name))
		ln := laneRun{lane: l, bin: bin, work: work, e2eArgs: args, focus: o.focus,
			skip: skipRegex(exclusions), timeout: o.timeout,
			jsonReport:  filepath.Join(o.out, fmt.Sprintf("report_%02d.json", i+1)),
			junitReport: res.junit(i + 1)}
		err := ln.run(res.log, signals)
		reports = append(reports, ln.jsonReport)
		if err != nil && runErr == nil {
			runErr = fmt.Errorf("%s lane: %w", l.name, err)
		}
		if errors.Is(err, errInterrupted) {
			break
		}
	}
	took := time.Since(started).Round(time.Second)
	fmt.Printf("\nspec run took %v (%v)\n", took, runErr)

	head := fmt.Sprintf("Run of %s, suite %s, %d node(s), %d process(es) in the parallel lane, %v.", time.Now().UTC().Format(time.RFC3339), o.suite.name, max(o.nodes, 1), o.procs, took)
	failed, err := writeSummary(o, exclusions, reports, head)
	if err != nil {
		return 0, fmt.Errorf("%w (spec run: %v)", err, runErr)
	}
	fmt.Printf("\nresults: %s (Sonobuoy's layout), %s, %s\n", res.dir, strings.Join(reports, ", "), filepath.Join(o.out, "summary.md"))
	if failed > 0 || runErr != nil {
		return 1, nil
	}
	return 0, nil
}

// writeSummary counts the lanes' reports per SIG into the terminal and
// summary.md, with the run's exclusions and their reasons.
func writeSummary(o options, exclusions []exclusion, reports []string, head string) (failed int, err error) {
	var md bytes.Buffer
	fmt.Fprintf(&md, "%s\n\n", head)
	failed, err = summarize(reports, selection{labels: o.suite.labels, focus: o.focus, exclusions: exclusions}, os.Stdout, &md)
	if err != nil {
		return 0, fmt.Errorf("reading the reports: %w", err)
	}
	fmt.Fprintf(&md, "\nExclusions of this run (exclusions.txt and this machine's):\n\n")
	for _, e := range exclusions {
		fmt.Fprintf(&md, "- `%s`: %s\n", e.re, e.reason)
	}
	return failed, os.WriteFile(filepath.Join(o.out, "summary.md"), md.Bytes(), 0o644)
}

// target is what the specs run against: `podvisor up` (podvisor.go) or a
// server with joined agents (cluster.go).
type target interface {
	kubeconfig() string  // the admin's
	criEndpoint() string // a node's CRI socket
	importImages(tars []string, log io.Writer) error
}

// errInterrupted is a lane's run cut short by ^C or SIGTERM.
var errInterrupted = errors.New("interrupted")

// laneRun is one lane's ginkgo run.
type laneRun struct {
	lane
	bin, work               string
	e2eArgs                 []string
	focus, skip             string
	timeout                 time.Duration
	jsonReport, junitReport string
}

// run runs the lane's specs, their output to the terminal and to log; a
// signal is passed on to their process group.
func (l laneRun) run(log io.Writer, signals <-chan os.Signal) error {
	os.Remove(l.jsonReport)
	ginkgoArgs := []string{
		"label-filter=" + l.labels,
		"skip=" + l.skip,
		"json-report=" + l.jsonReport,
		"junit-report=" + l.junitReport,
		"timeout=" + l.timeout.String(),
		"no-color",
	}
	if l.focus != "" {
		ginkgoArgs = append(ginkgoArgs, "focus="+l.focus)
	}
	var cmd *exec.Cmd
	if l.procs > 1 {
		args := []string{"run", "--procs=" + strconv.Itoa(l.procs)}
		for _, a := range ginkgoArgs {
			args = append(args, "--"+a)
		}
		// The CLI writes the reports itself, merged over the processes.
		args = append(args, filepath.Join(l.bin, "e2e.test"), "--")
		cmd = exec.Command(filepath.Join(l.bin, "ginkgo"), append(args, l.e2eArgs...)...)
	} else {
		args := slices.Clone(l.e2eArgs)
		for _, a := range ginkgoArgs {
			args = append(args, "--ginkgo."+a)
		}
		cmd = exec.Command(filepath.Join(l.bin, "e2e.test"), args...)
	}
	cmd.Dir = l.work
	// Its own process group, which gets the runner's ^C: the ginkgo CLI
	// does not pass a signal sent to it alone on to its spec processes.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Stdout = io.MultiWriter(os.Stdout, log)
	cmd.Stderr = io.MultiWriter(os.Stderr, log)
	if err := cmd.Start(); err != nil {
		return err
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		return err
	case s := <-signals:
		_ = syscall.Kill(-cmd.Process.Pid, s.(syscall.Signal))
		<-done
		return errInterrupted
	}
}

func step(what string) { fmt.Printf("==> %s\n", what) }

// goCmd runs the go command in dir, its output to log.
func goCmd(dir string, log io.Writer, args ...string) error {
	cmd := exec.Command("go", args...)
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = log, log
	return cmd.Run()
}

// moduleDir is this module's directory in the repo.
func moduleDir(repo string) string { return filepath.Join(repo, "test", "conformance") }

func defaultCache() string {
	if d, err := os.UserCacheDir(); err == nil {
		return filepath.Join(d, "podvisor-conformance")
	}
	return filepath.Join(os.TempDir(), "podvisor-conformance")
}

// ensurePackages installs those of Debian's packages that are missing:
// podvisor's runtime (runc, the CNI plugins) and what the images are built
// from (busybox-static; bind9-dnsutils, curl, netcat-openbsd and
// bash-static for the network tools and shell of agnhost's image).
func ensurePackages(log io.Writer, pkgs ...string) error {
	var missing []string
	for _, p := range pkgs {
		if exec.Command("dpkg", "-s", p).Run() != nil {
			missing = append(missing, p)
		}
	}
	if len(missing) == 0 {
		return nil
	}
	for _, args := range [][]string{{"update"}, append([]string{"install", "-y"}, missing...)} {
		cmd := exec.Command("apt-get", args...)
		cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
		cmd.Stdout, cmd.Stderr = log, log
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("apt-get %s: %w", args[0], err)
		}
	}
	return nil
}

// freePodCIDR is the first of 10.244.0.0/16 … 10.254.0.0/16 that no
// network interface of the machine has an address in: a second run at the
// same time (or another podvisor) on 10.244 would put two bridges on one
// subnet, and pod IPs would no longer be reachable from the node.
func freePodCIDR() (netip.Prefix, error) {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return netip.Prefix{}, err
	}
	for b := 244; b <= 254; b++ {
		cand := netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(b), 0, 0}), 16)
		used := false
		for _, a := range addrs {
			if n, ok := a.(*net.IPNet); ok {
				if p, err := netip.ParsePrefix(n.String()); err == nil && p.Overlaps(cand) {
					used = true
				}
			}
		}
		if !used {
			return cand, nil
		}
	}
	return netip.Prefix{}, fmt.Errorf("no free pod network among 10.244.0.0/16 … 10.254.0.0/16")
}
