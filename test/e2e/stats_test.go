package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
	"k8s.io/utils/ptr"
)

// hostCgroup is the directory of hierarchy ctrl ("memory", "cpuacct"; ""
// for cgroup v2) that host process pid is in.
func hostCgroup(t *testing.T, pid int, ctrl string) string {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		for _, c := range strings.Split(parts[1], ",") {
			if c == ctrl {
				return filepath.Join("/sys/fs/cgroup", parts[1], parts[2])
			}
		}
	}
	t.Fatalf("process %d is in no %s cgroup:\n%s", pid, ctrl, b)
	return ""
}

func cgroupInt(t *testing.T, path string) int64 {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// cgroupWorkingSet is cAdvisor's working set of a v1 memory cgroup: usage
// less inactive file pages.
func cgroupWorkingSet(t *testing.T, dir string) int64 {
	t.Helper()
	usage := cgroupInt(t, filepath.Join(dir, "memory.usage_in_bytes"))
	b, err := os.ReadFile(filepath.Join(dir, "memory.stat"))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "total_inactive_file "); ok {
			n, _ := strconv.ParseInt(v, 10, 64)
			return usage - n
		}
	}
	return usage
}

func within10(got, want float64) bool { return math.Abs(got-want) <= 0.1*want }

// A pod that burns CPU and holds 64 MiB shows, in /stats/summary and
// /metrics/resource, CPU time used and a working set within 10 % of what its
// container's cgroup says; the node's own figures are there too.
func TestStatsSummaryAndResourceMetrics(t *testing.T) {
	p := Shared(t)
	if _, err := os.Stat("/sys/fs/cgroup/memory"); err != nil {
		t.Skip("the cgroup figures are read from cgroup v1 here")
	}
	ns := p.Namespace("stats")
	// 64 MiB in a memory-backed emptyDir (tmpfs pages count in the
	// writer's memory cgroup), and a busy loop.
	c := sh("burner", "head -c 67108864 /dev/zero > /hold/64m; (while :; do :; done) & "+sleepUntilTERM)
	c.Resources = v1.ResourceRequirements{Limits: v1.ResourceList{v1.ResourceCPU: resourceMust("200m"), v1.ResourceMemory: resourceMust("256Mi")}}
	c.VolumeMounts = []v1.VolumeMount{{Name: "hold", MountPath: "/hold"}}
	tag := tagProcesses(&c)
	burner := p.pod(ns, "burner", v1.RestartPolicyNever, c)
	burner.Spec.Volumes = []v1.Volume{{Name: "hold", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{Medium: v1.StorageMediumMemory}}}}
	p.create(t, burner)
	// The shared podvisor outlives the test: without this the busy loop
	// burned its 0.2 core for the rest of the suite.
	t.Cleanup(func() {
		_ = p.Admin.CoreV1().Pods(ns).Delete(context.Background(), "burner", metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
	})
	p.waitRunning(t, ns, "burner")

	var pid int
	Eventually(t, time.Minute, "the burner's processes", func() (bool, error) {
		pids := taggedProcesses(tag)
		if len(pids) > 0 {
			pid = pids[0]
		}
		return pid != 0, nil
	})
	memDir := hostCgroup(t, pid, "memory")
	Eventually(t, time.Minute, "the burner holds 64 MiB", func() (bool, error) {
		ws := cgroupWorkingSet(t, memDir)
		return ws >= 64<<20, fmt.Errorf("working set %d", ws)
	})

	client, base := agentAPIAs(t, p, "e2e-stats")
	get := func(path string) string {
		t.Helper()
		code, body := getBearer(t, client, base+path, "")
		if code != http.StatusOK {
			t.Fatalf("GET %s: %d %.300q", path, code, body)
		}
		return body
	}

	var sum statsapi.Summary
	if err := json.Unmarshal([]byte(get("/stats/summary")), &sum); err != nil {
		t.Fatal(err)
	}
	cgroupWS := cgroupWorkingSet(t, memDir)
	if sum.Node.NodeName != p.NodeName || sum.Node.CPU == nil || sum.Node.CPU.UsageCoreNanoSeconds == nil || *sum.Node.CPU.UsageCoreNanoSeconds == 0 ||
		sum.Node.Memory == nil || sum.Node.Memory.WorkingSetBytes == nil || *sum.Node.Memory.WorkingSetBytes == 0 || sum.Node.Fs == nil {
		t.Errorf("node figures missing: %+v", sum.Node)
	}
	var pod *statsapi.PodStats
	for i := range sum.Pods {
		if sum.Pods[i].PodRef.Namespace == ns && sum.Pods[i].PodRef.Name == "burner" {
			pod = &sum.Pods[i]
		}
	}
	if pod == nil || len(pod.Containers) != 1 || pod.Containers[0].Name != "burner" {
		t.Fatalf("no pod %s/burner with its container in the summary: %+v", ns, pod)
	}
	ctr := pod.Containers[0]
	if ctr.CPU == nil || ctr.CPU.UsageCoreNanoSeconds == nil || *ctr.CPU.UsageCoreNanoSeconds == 0 {
		t.Errorf("container CPU: %+v, want time used", ctr.CPU)
	}
	if ctr.Memory == nil || ctr.Memory.WorkingSetBytes == nil || !within10(float64(*ctr.Memory.WorkingSetBytes), float64(cgroupWS)) {
		t.Errorf("container memory %+v, want a working set within 10 %% of the cgroup's %d", ctr.Memory, cgroupWS)
	}
	if ctr.CPU != nil && ctr.CPU.UsageCoreNanoSeconds != nil && ctr.Memory != nil && ctr.Memory.WorkingSetBytes != nil {
		t.Logf("summary: container CPU %d ns, working set %d (cgroup %d)", *ctr.CPU.UsageCoreNanoSeconds, *ctr.Memory.WorkingSetBytes, cgroupWS)
	}
	if pod.Memory == nil || pod.Memory.WorkingSetBytes == nil || *pod.Memory.WorkingSetBytes < *ctr.Memory.WorkingSetBytes || pod.CPU == nil ||
		pod.EphemeralStorage == nil || pod.EphemeralStorage.UsedBytes == nil {
		t.Errorf("pod figures: cpu %+v memory %+v ephemeral %+v", pod.CPU, pod.Memory, pod.EphemeralStorage)
	}

	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(strings.NewReader(get("/metrics/resource")))
	if err != nil {
		t.Fatal(err)
	}
	cgroupWS = cgroupWorkingSet(t, memDir)
	value := func(name string, labels map[string]string) (float64, bool) {
		mf := families[name]
		if mf == nil {
			return 0, false
		}
	metrics:
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if want, ok := labels[l.GetName()]; ok && want != l.GetValue() {
					continue metrics
				}
			}
			if mf.GetType() == dto.MetricType_COUNTER {
				return m.GetCounter().GetValue(), true
			}
			return m.GetGauge().GetValue(), true
		}
		return 0, false
	}
	labels := map[string]string{"namespace": ns, "pod": "burner", "container": "burner"}
	if v, ok := value("container_cpu_usage_seconds_total", labels); !ok || v <= 0 {
		t.Errorf("container_cpu_usage_seconds_total = %v (%v), want > 0", v, ok)
	}
	if v, ok := value("container_memory_working_set_bytes", labels); !ok || !within10(v, float64(cgroupWS)) {
		t.Errorf("container_memory_working_set_bytes = %v (%v), want within 10 %% of %d", v, ok, cgroupWS)
	}
	if v, ok := value("pod_memory_working_set_bytes", map[string]string{"namespace": ns, "pod": "burner"}); !ok || v < float64(cgroupWS)*0.9 {
		t.Errorf("pod_memory_working_set_bytes = %v (%v)", v, ok)
	}
	if v, ok := value("container_start_time_seconds", labels); !ok || v <= 0 {
		t.Errorf("container_start_time_seconds = %v (%v)", v, ok)
	}
	for _, name := range []string{"node_cpu_usage_seconds_total", "node_memory_working_set_bytes"} {
		if v, ok := value(name, nil); !ok || v <= 0 {
			t.Errorf("%s = %v (%v), want > 0", name, v, ok)
		}
	}
	if v, ok := value("scrape_error", nil); !ok || v != 0 {
		t.Errorf("scrape_error = %v (%v), want 0", v, ok)
	}
}

// The agent's Go profiles, through the API server's node proxy as the
// kubelet's (enableProfilingHandler, on by default): what `go tool pprof`
// reads to see where the agent's memory and CPU go.
func TestNodeProxyServesTheAgentsProfiles(t *testing.T) {
	t.Parallel()
	p := Shared(t)
	for path, want := range map[string]string{
		"debug/pprof/heap":      "# runtime.MemStats",
		"debug/pprof/goroutine": "goroutine profile:",
	} {
		raw, err := p.Admin.CoreV1().RESTClient().Get().AbsPath("/api/v1/nodes", p.NodeName, "proxy", path).
			Param("debug", "1").DoRaw(context.Background())
		if err != nil || !strings.Contains(string(raw), want) {
			t.Errorf("GET nodes/%s/proxy/%s: %v, %.300q (want %q)", p.NodeName, path, err, raw, want)
		}
	}
}
