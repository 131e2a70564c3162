package main

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strings"
)

// The suites the runner selects from (-suite). Each is a ginkgo label
// filter (the framework gives every [Tag] of a spec's text a label too), so
// that -focus can narrow it down: ginkgo ANDs a label filter with --focus
// but ORs two --focus.
//
// node (issue 15) is the sig-node specs that every node must pass
// ([NodeConformance], [Conformance]), without those that need a dedicated
// node or cluster set-up. [Feature:X] specs need a set-up a default cluster
// lacks; on-by-default [Beta] feature gates are kept (their specs carry
// [FeatureGate:X] [Beta], not [Feature:X]).
//
// conformance (issue 30) is what a certification run selects: every
// [Conformance] spec of every SIG, [Serial] and [Slow] ones included, plus
// the node suite's [NodeConformance] specs; nothing [Disruptive].
const (
	nodeLabels        = `sig-node && (Conformance || NodeConformance) && !Serial && !Disruptive && !Slow && !Flaky && !Alpha && !/^Feature:/`
	conformanceLabels = `!Disruptive && (Conformance || (sig-node && NodeConformance && !Slow && !Flaky && !Alpha && !/^Feature:/))`
	selectSkip        = `\[sig-windows\]|Windows`
)

// suite is one selection and the e2e test binary that has its specs.
type suite struct {
	name   string
	pkg    string // the package `go test -c` builds into e2e.test
	labels string
	serial bool // the selection has [Serial] specs
}

// suites are the selections of -suite: node links the sig-node packages
// only (CI's -fast builds it in a few minutes); conformance links every
// SIG's, as upstream's e2e.test does.
var suites = map[string]suite{
	"node":        {name: "node", pkg: "./suite", labels: nodeLabels},
	"conformance": {name: "conformance", pkg: "./e2e", labels: conformanceLabels, serial: true},
}

// lane is one ginkgo run of a suite: its label filter and how many specs
// run at once.
type lane struct {
	name   string // "parallel" or "serial"
	labels string
	procs  int
}

// lanes splits a suite's selection as a certification run does: a
// [Serial] spec may not share the cluster with any other spec, so those run
// one at a time in a lane of their own after the parallel one.
func lanes(s suite, procs int) []lane {
	if procs < 1 {
		procs = 1
	}
	if !s.serial {
		return []lane{{name: "parallel", labels: s.labels, procs: procs}}
	}
	return []lane{
		{name: "parallel", labels: "(" + s.labels + ") && !Serial", procs: procs},
		{name: "serial", labels: "(" + s.labels + ") && Serial", procs: 1},
	}
}

// exclusion is one line of exclusions.txt: specs whose full text matches
// the regular expression are skipped, for the stated reason.
type exclusion struct {
	re     *regexp.Regexp
	reason string
}

// readExclusions parses the exclusions file: one exclusion a line,
// `REGEX | REASON`, split at the last " | "; blank lines and lines starting
// with # are comments. A line without a reason is an error: every
// exclusion must say why.
func readExclusions(path string) ([]exclusion, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []exclusion
	s := bufio.NewScanner(f)
	for n := 1; s.Scan(); n++ {
		line := strings.TrimSpace(s.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndex(line, " | ")
		if i < 0 || strings.TrimSpace(line[i+3:]) == "" {
			return nil, fmt.Errorf("%s:%d: want `REGEX | REASON`", path, n)
		}
		re, err := regexp.Compile(strings.TrimSpace(line[:i]))
		if err != nil {
			return nil, fmt.Errorf("%s:%d: %w", path, n, err)
		}
		out = append(out, exclusion{re: re, reason: strings.TrimSpace(line[i+3:])})
	}
	return out, s.Err()
}

// skipRegex joins the selection's skip with the exclusions into the one
// regular expression ginkgo's --ginkgo.skip takes.
func skipRegex(ex []exclusion) string {
	parts := []string{selectSkip}
	for _, e := range ex {
		parts = append(parts, "(?:"+e.re.String()+")")
	}
	return strings.Join(parts, "|")
}

// machineExclusions are the specs this machine cannot run, found by trying
// what they need: on a kernel without the dummy network driver (this
// project's Firecracker VMs have neither it nor modules), the PrivilegedPod
// spec's `ip link add dummy1 type dummy` fails in any container, privileged
// or not, on any node agent.
func machineExclusions() []exclusion {
	var out []exclusion
	name := fmt.Sprintf("pvconf%d", os.Getpid()%100000)
	if msg, err := exec.Command("ip", "link", "add", name, "type", "dummy").CombinedOutput(); err != nil {
		out = append(out, exclusion{
			re: regexp.MustCompile(`\[sig-node\] PrivilegedPod \[NodeConformance\] should enable privileged commands`),
			reason: fmt.Sprintf("this machine's kernel cannot make a dummy network device, which the spec adds in its privileged container (ip link add … type dummy: %s)",
				strings.TrimSpace(string(msg)))})
	} else {
		_ = exec.Command("ip", "link", "del", name).Run()
	}
	return out
}

// singleNodeExclusions are the specs that cannot pass on one node, which
// is what the runner starts without -nodes: upstream's conformance requires
// two untainted nodes, and checks it with a spec of its own.
var singleNodeExclusions = []exclusion{
	{re: regexp.MustCompile(`\[sig-architecture\] Conformance Tests should have at least two untainted nodes`),
		reason: "one node: the runner starts a single podvisor node (-nodes 3 runs this spec); upstream's conformance requires two"},
	{re: regexp.MustCompile(`\[sig-apps\] Daemon set \[Serial\] should rollback without unnecessary restarts`),
		reason: "one node: the spec asserts more than one schedulable node (\"Conformance test suite needs a cluster with at least 2 nodes\"); the runner starts a single podvisor node (-nodes 3 runs this spec)"},
}

// nodeCountExclusions are the exclusions that follow from the number of
// nodes: the one-node ones for the whole suite on a single node (the node
// suite has none of those specs), none on a cluster.
func nodeCountExclusions(s suite, nodes int) []exclusion {
	if s.name == "conformance" && nodes < 2 {
		return singleNodeExclusions
	}
	return nil
}
