package bench

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// A node's whole CPU, counted by the kernel whoever spent it: `podvisor up`
// runs in a cgroup of the benchmark's, and everything it starts stays there
// (containerd, the shims, every runc and CNI plugin execution, short-lived
// ones included, which /proc cannot show once they are gone) except what
// the runtime puts in a pod's cgroup (the pause process, the containers and
// runc's init before it execs them). Other work on the machine is not
// counted, so the figures hold on a shared machine as wall times do not.

// cpuCgroup is the node's cgroup: cpuacct on cgroup v1, the cpu controller's
// accounting on v2.
type cpuCgroup struct{ dir string }

// unifiedOnly: the machine runs cgroup v2 alone.
func unifiedOnly() bool {
	_, err := os.Stat("/sys/fs/cgroup/cgroup.controllers")
	return err == nil
}

func cpuacctRoot() string {
	if unifiedOnly() {
		return "/sys/fs/cgroup"
	}
	return "/sys/fs/cgroup/cpuacct"
}

func newCPUCgroup(name string) (*cpuCgroup, error) {
	c := &cpuCgroup{dir: filepath.Join(cpuacctRoot(), name)}
	if err := os.Mkdir(c.dir, 0o755); err != nil {
		return nil, err
	}
	return c, nil
}

// add moves pid (and so what it starts from then on) into the cgroup.
func (c *cpuCgroup) add(pid int) error {
	return os.WriteFile(filepath.Join(c.dir, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0o644)
}

// usage is the CPU the cgroup's processes have used, the ones gone included.
func (c *cpuCgroup) usage() (time.Duration, error) { return cgroupUsage(c.dir) }

// remove deletes the cgroup once its processes are gone.
func (c *cpuCgroup) remove() error { return os.Remove(c.dir) }

// cgroupUsage reads a cgroup's total CPU time (its descendants' included).
func cgroupUsage(dir string) (time.Duration, error) {
	if unifiedOnly() {
		f, err := os.Open(filepath.Join(dir, "cpu.stat"))
		if err != nil {
			return 0, err
		}
		defer f.Close()
		s := bufio.NewScanner(f)
		for s.Scan() {
			if v, ok := strings.CutPrefix(s.Text(), "usage_usec "); ok {
				us, err := strconv.ParseInt(v, 10, 64)
				return time.Duration(us) * time.Microsecond, err
			}
		}
		return 0, fmt.Errorf("%s/cpu.stat: no usage_usec", dir)
	}
	data, err := os.ReadFile(filepath.Join(dir, "cpuacct.usage"))
	if err != nil {
		return 0, err
	}
	ns, err := strconv.ParseInt(strings.TrimSpace(string(data)), 10, 64)
	return time.Duration(ns), err
}

// podsUsage sums the CPU of the pods' cgroups (under the agent's /kubepods,
// in their QoS class), and says how many it found.
func podsUsage(uids []types.UID) (time.Duration, int) {
	var sum time.Duration
	found := 0
	for _, uid := range uids {
		for _, qos := range []string{"", "burstable", "besteffort"} {
			u, err := cgroupUsage(filepath.Join(cpuacctRoot(), "kubepods", qos, "pod"+string(uid)))
			if err == nil {
				sum += u
				found++
				break
			}
		}
	}
	return sum, found
}

// nodeCPU is a reading of the node's CPU counters.
type nodeCPU struct {
	ok              bool
	podvisor, group time.Duration // `podvisor up` alone; its cgroup
}

// cpu reads the node's counters now.
func (n *node) cpu() nodeCPU {
	if n.cg == nil {
		return nodeCPU{}
	}
	own, err1 := cpuTime(n.pid())
	group, err2 := n.cg.usage()
	return nodeCPU{ok: err1 == nil && err2 == nil, podvisor: own, group: group}
}

// burstCPU is what a burst cost the node, by where it was spent.
type burstCPU struct {
	ok bool
	// podvisor: `podvisor up` itself (control plane and agent); runtime:
	// the rest of its cgroup (containerd, shims, runc and CNI plugin runs;
	// the process runtime's shims); pods: the pods' cgroups (pause, runc's
	// init, the containers).
	podvisor, runtime, pods time.Duration
	podsFound               int
}

func (now nodeCPU) since(before nodeCPU, pods []types.UID) burstCPU {
	if !now.ok || !before.ok {
		return burstCPU{}
	}
	c := burstCPU{ok: true, podvisor: now.podvisor - before.podvisor}
	c.runtime = now.group - before.group - c.podvisor
	c.pods, c.podsFound = podsUsage(pods)
	return c
}

func (c burstCPU) total() time.Duration { return c.podvisor + c.runtime + c.pods }

func (c burstCPU) report(b interface{ ReportMetric(float64, string) }, pods int) {
	if !c.ok {
		return
	}
	k := float64(pods)
	b.ReportMetric(ms(c.total())/k, "node-cpu-ms/pod")
	b.ReportMetric(ms(c.podvisor)/k, "podvisor-cpu-ms/pod")
	b.ReportMetric(ms(c.runtime)/k, "runtime-cpu-ms/pod")
	b.ReportMetric(ms(c.pods)/k, "in-pod-cpu-ms/pod")
}

func (c burstCPU) row(pods int) string {
	if !c.ok {
		return "CPU by where it was spent: not measured (no cgroup of the benchmark's)"
	}
	per := func(d time.Duration) time.Duration { return round(d / time.Duration(pods)) }
	return fmt.Sprintf("CPU of the burst per pod: %v in all = podvisor up (control plane, agent) %v + its runtime processes (containerd, shims, runc, CNI plugins) %v + in the pods' cgroups (pause, runc init, containers; %d of %d pods' cgroups read) %v",
		per(c.total()), per(c.podvisor), per(c.runtime), c.podsFound, pods, per(c.pods))
}

// podUIDs lists the UIDs of ns's pods.
func (n *node) podUIDs(ns string) []types.UID {
	list, err := n.client.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		n.b.Logf("pods of %s: %v", ns, err)
		return nil
	}
	out := make([]types.UID, 0, len(list.Items))
	for _, p := range list.Items {
		out = append(out, p.UID)
	}
	return out
}

// apiRequests counts the API server's requests by verb, resource and
// subresource (apiserver_request_total), to tell what a burst asked of it.
func (n *node) apiRequests() map[string]float64 {
	raw, err := n.client.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(context.Background())
	if err != nil {
		n.b.Logf("API server metrics: %v", err)
		return nil
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(bytes.NewReader(raw))
	if err != nil {
		n.b.Logf("API server metrics: %v", err)
		return nil
	}
	out := map[string]float64{}
	for _, m := range families["apiserver_request_total"].GetMetric() {
		l := map[string]string{}
		for _, p := range m.GetLabel() {
			l[p.GetName()] = p.GetValue()
		}
		key := l["verb"] + " " + l["resource"]
		if l["subresource"] != "" {
			key += "/" + l["subresource"]
		}
		out[key] += m.GetCounter().GetValue()
	}
	return out
}

// apiRequestsRow is the requests between two readings, per pod, most first.
func apiRequestsRow(before, after map[string]float64, pods int) (string, float64) {
	type kv struct {
		k string
		v float64
	}
	var all []kv
	total := 0.0
	for k, v := range after {
		if d := v - before[k]; d > 0 {
			all = append(all, kv{k, d})
			total += d
		}
	}
	slices.SortFunc(all, func(a, b kv) int { return cmp.Compare(b.v, a.v) })
	var parts []string
	for i, e := range all {
		if i == 8 {
			break
		}
		parts = append(parts, fmt.Sprintf("%s %.1f", e.k, e.v/float64(pods)))
	}
	return fmt.Sprintf("API requests of the burst per pod: %.1f (%s)", total/float64(pods), strings.Join(parts, ", ")), total / float64(pods)
}
