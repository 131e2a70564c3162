package e2e

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// crashChecker holds what every observed pod status has promised and reports
// each status that breaks a promise (issue 18's invariants):
//   - restartCount never decreases, and a new container ID comes with a
//     higher count (a container replaced without a restart counted is a
//     duplicate in disguise);
//   - a terminal phase never changes;
//   - a recorded exit never changes: the exit of a container ID, and the
//     exit shown for a restart count, stay what they were first reported as;
//   - no pod leaves the API while a process of it runs (graceful deletes:
//     a force delete removes the object before the node has stopped anything);
//   - no pod leaves the API unless the test asked for its deletion: the
//     agent's final delete only completes one (issue 25 saw a finished
//     one-shot pod leave after a restart, unaccounted for).
type crashChecker struct {
	mu         sync.Mutex
	violations []string
	pods       map[types.UID]*podPromises
	forced     map[types.UID]bool        // force-deleted by the test
	requested  map[types.UID]bool        // deletion asked for by the test
	allAsked   bool                      // the test deleted every pod
	deleted    map[types.UID]bool        // seen leaving the API
	processes  func(uid types.UID) []int // live processes of a pod
}

type podPromises struct {
	name     string
	terminal v1.PodPhase
	// by container name
	counts map[string]int32
	ids    map[string]map[string]int32 // container -> ID -> restartCount shown with it
	// exits by container ID, and by container name + restart count
	exits       map[string]string
	exitByCount map[string]string
}

func newCrashChecker(processes func(types.UID) []int) *crashChecker {
	return &crashChecker{pods: map[types.UID]*podPromises{}, forced: map[types.UID]bool{}, requested: map[types.UID]bool{}, deleted: map[types.UID]bool{}, processes: processes}
}

func (c *crashChecker) violate(format string, args ...any) {
	c.violations = append(c.violations, fmt.Sprintf(time.Now().Format("15:04:05.000 ")+format, args...))
}

func (c *crashChecker) markForced(uid types.UID) {
	c.mu.Lock()
	c.forced[uid] = true
	c.mu.Unlock()
}

// markRequested records a delete the test is about to send (before it is
// sent: the API may apply one whose answer is lost in a restart).
func (c *crashChecker) markRequested(uid types.UID) {
	c.mu.Lock()
	c.requested[uid] = true
	c.mu.Unlock()
}

// markAllRequested records that the test is deleting every pod.
func (c *crashChecker) markAllRequested() {
	c.mu.Lock()
	c.allAsked = true
	c.mu.Unlock()
}

func exitString(t *v1.ContainerStateTerminated) string {
	return fmt.Sprintf("id=%q code=%d reason=%s finishedAt=%s", t.ContainerID, t.ExitCode, t.Reason, t.FinishedAt.UTC().Format(time.RFC3339))
}

// observe checks one status of a pod against what earlier ones promised.
func (c *crashChecker) observe(pod *v1.Pod) {
	c.mu.Lock()
	defer c.mu.Unlock()
	pp := c.pods[pod.UID]
	if pp == nil {
		pp = &podPromises{name: pod.Name, counts: map[string]int32{}, ids: map[string]map[string]int32{},
			exits: map[string]string{}, exitByCount: map[string]string{}}
		c.pods[pod.UID] = pp
	}
	phase := pod.Status.Phase
	if pp.terminal != "" && phase != pp.terminal {
		c.violate("pod %s: terminal phase %s changed to %s", pod.Name, pp.terminal, phase)
	}
	if phase == v1.PodSucceeded || phase == v1.PodFailed {
		pp.terminal = phase
	}
	all := append(append([]v1.ContainerStatus{}, pod.Status.InitContainerStatuses...), pod.Status.ContainerStatuses...)
	for _, cs := range all {
		if old, ok := pp.counts[cs.Name]; ok && cs.RestartCount < old {
			c.violate("pod %s container %s: restartCount went down %d -> %d", pod.Name, cs.Name, old, cs.RestartCount)
		}
		pp.counts[cs.Name] = max(pp.counts[cs.Name], cs.RestartCount)
		if cs.ContainerID != "" {
			ids := pp.ids[cs.Name]
			if ids == nil {
				ids = map[string]int32{}
				pp.ids[cs.Name] = ids
			}
			if n, seen := ids[cs.ContainerID]; seen && n != cs.RestartCount {
				c.violate("pod %s container %s: %s shown with restartCount %d, earlier %d", pod.Name, cs.Name, cs.ContainerID, cs.RestartCount, n)
			} else if !seen {
				for other, n := range ids {
					if n >= cs.RestartCount {
						c.violate("pod %s container %s: new instance %s with restartCount %d, but %s had %d (replaced without a restart counted)",
							pod.Name, cs.Name, cs.ContainerID, cs.RestartCount, other, n)
					}
				}
				ids[cs.ContainerID] = cs.RestartCount
			}
		}
		if t := cs.State.Terminated; t != nil {
			key := fmt.Sprintf("%s/%d", cs.Name, cs.RestartCount)
			c.checkExit(pod.Name, cs.Name, pp.exitByCount, key, t)
			if t.ContainerID != "" {
				c.checkExit(pod.Name, cs.Name, pp.exits, t.ContainerID, t)
			}
		}
		if t := cs.LastTerminationState.Terminated; t != nil && t.ContainerID != "" {
			c.checkExit(pod.Name, cs.Name, pp.exits, t.ContainerID, t)
		}
	}
}

func (c *crashChecker) checkExit(pod, container string, exits map[string]string, key string, t *v1.ContainerStateTerminated) {
	s := exitString(t)
	// No container of the crash test exits 255: it is containerd's code for
	// an exit it lost (issue 25).
	if t.ExitCode == 255 && t.Reason == "Unknown" {
		if _, ok := exits[key]; !ok {
			c.violate("pod %s container %s: exit %s reported lost: {%s}", pod, container, key, s)
		}
	}
	if old, ok := exits[key]; ok && old != s {
		c.violate("pod %s container %s: recorded exit %s changed from {%s} to {%s}", pod, container, key, old, s)
		return
	}
	exits[key] = s
}

// gone checks that nothing of a gracefully deleted pod still runs.
func (c *crashChecker) gone(pod *v1.Pod) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.deleted[pod.UID] = true
	if !c.forced[pod.UID] {
		if pids := c.processes(pod.UID); len(pids) > 0 {
			c.violate("pod %s left the API while processes %v of it ran: %s", pod.Name, pids, describeProcesses(pids))
		}
	}
	if !c.requested[pod.UID] && !c.allAsked {
		c.violate("pod %s left the API without a delete from the test (phase %s, deletionTimestamp %v)",
			pod.Name, pod.Status.Phase, pod.DeletionTimestamp)
	}
}

func (c *crashChecker) report() (violations []string, pods, deleted int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.violations...), len(c.pods), len(c.deleted)
}

// crashEnvVar carries the pod UID into every container of the crash test, so
// that its processes can be found in /proc.
const crashEnvVar = "CRASH_POD_UID"

// podProcesses lists the live processes of the crash test's pod uid: those
// carrying its UID in their environment (every container's), and those in
// its cgroup (on the containerd runtime, the sandbox's pause process too).
func podProcesses(uid types.UID) []int {
	pids := processesWithEnv(crashEnvVar, string(uid))
	needle := []byte("/pod" + string(uid) + "/")
	for _, pid := range processesWhose("cgroup", func(b []byte) bool { return bytes.Contains(b, needle) }) {
		if !slices.Contains(pids, pid) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// processesWithEnv lists live processes whose environment has name=value.
func processesWithEnv(name, value string) []int {
	needle := []byte(name + "=" + value + "\x00")
	return processesWhoseEnv(func(env []byte) bool { return bytes.Contains(env, needle) })
}

// duplicates returns the records written by containers that found their
// lock taken: a second instance of a container ran while the first did.
func duplicates(lockDir string) []string {
	var out []string
	files, _ := filepath.Glob(filepath.Join(lockDir, "dup-*"))
	for _, f := range files {
		b, _ := os.ReadFile(f)
		out = append(out, filepath.Base(f)+": "+strings.TrimSpace(string(b)))
	}
	return out
}

// lockedScript wraps a container's script so that it holds an exclusive lock
// for (pod UID, container) while any of its processes live; an instance that
// finds the lock taken records a duplicate and exits 99.
func lockedScript(lockDir, container, script string) string {
	lock := fmt.Sprintf("%s/${%s}-%s.lock", lockDir, crashEnvVar, container)
	dup := fmt.Sprintf("%s/dup-${%s}-%s", lockDir, crashEnvVar, container)
	return fmt.Sprintf(`exec 9>>"%s"; if ! flock -n 9; then echo "second instance of %s" >> "%s"; exit 99; fi; %s`, lock, container, dup, script)
}

// describeProcesses says what each process is (state, command line, pod
// cgroup), for a violation's post-mortem: the pause of a sandbox, a
// container's own process or an exec are told apart by these.
func describeProcesses(pids []int) string {
	var out []string
	for _, pid := range pids {
		dir := fmt.Sprintf("/proc/%d/", pid)
		cmd, _ := os.ReadFile(dir + "cmdline")
		stat, _ := os.ReadFile(dir + "stat")
		state := "?"
		if i := bytes.LastIndexByte(stat, ')'); i > 0 && len(stat) > i+2 {
			state = string(stat[i+2])
		}
		cg, _ := os.ReadFile(dir + "cgroup")
		var pidsCgroup string
		for _, line := range strings.Split(string(cg), "\n") {
			if strings.Contains(line, "pids") || strings.HasPrefix(line, "0::") {
				pidsCgroup = line
			}
		}
		out = append(out, fmt.Sprintf("%d state %s cmd %q cgroup %q", pid, state, strings.ReplaceAll(strings.TrimRight(string(cmd), "\x00"), "\x00", " "), pidsCgroup))
	}
	return strings.Join(out, "; ")
}
