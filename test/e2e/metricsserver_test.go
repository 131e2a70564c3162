package e2e

import (
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	v1 "k8s.io/api/core/v1"
)

// Issue 28: `kubectl top node` and `kubectl top pod` show figures on a
// fresh `podvisor up` (the embedded metrics-server scraping the agent's
// /metrics/resource through the aggregation layer), and the agent's
// /metrics counts the started pod in the kubelet's pod start-up SLI.
func TestKubectlTop(t *testing.T) {
	p := NewPodvisor(t)
	p.MetricsServer = true
	p.Start()
	ns := p.Namespace("top")
	// 32 MiB in a memory-backed emptyDir (tmpfs pages count in the
	// container's working set) and a busy loop.
	c := sh("burner", "head -c 33554432 /dev/zero > /hold/32m; (while :; do :; done) & "+sleepUntilTERM)
	c.Resources = v1.ResourceRequirements{Limits: v1.ResourceList{v1.ResourceCPU: resourceMust("100m"), v1.ResourceMemory: resourceMust("128Mi")}}
	c.VolumeMounts = []v1.VolumeMount{{Name: "hold", MountPath: "/hold"}}
	tag := tagProcesses(&c)
	burner := p.pod(ns, "burner", v1.RestartPolicyNever, c)
	burner.Spec.Volumes = []v1.Volume{{Name: "hold", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{Medium: v1.StorageMediumMemory}}}}
	p.create(t, burner)
	p.waitRunning(t, ns, "burner")
	// The burner's memory cgroup, as the host sees it: kubectl top's
	// figure is checked against it.
	memDir := ""
	if _, err := os.Stat("/sys/fs/cgroup/memory"); err == nil {
		Eventually(t, time.Minute, "the burner's processes", func() (bool, error) {
			pids := taggedProcesses(tag)
			if len(pids) == 0 {
				return false, nil
			}
			memDir = hostCgroup(t, pids[0], "memory")
			return true, nil
		})
	}

	t.Run("the agent's /metrics counts the pod in the start-up SLI", func(t *testing.T) {
		client, base := agentAPIAs(t, p, "e2e-top")
		// The measurement ends when the watch shows the pod running after
		// the agent wrote it so: moments after the test saw it running.
		Eventually(t, 2*time.Minute, "kubelet_pod_start_sli_duration_seconds counts the pod", func() (bool, error) {
			code, body := getBearer(t, client, base+"/metrics", "")
			if code != http.StatusOK {
				return false, fmt.Errorf("GET /metrics: %d %.300q", code, body)
			}
			parser := expfmt.NewTextParser(model.UTF8Validation)
			families, err := parser.TextToMetricFamilies(strings.NewReader(body))
			if err != nil {
				return false, err
			}
			for _, name := range []string{"kubelet_pod_start_sli_duration_seconds", "kubelet_pod_start_total_duration_seconds", "kubelet_pod_start_duration_seconds"} {
				mf := families[name]
				if mf == nil || len(mf.GetMetric()) != 1 {
					return false, fmt.Errorf("no %s in /metrics", name)
				}
				h := mf.GetMetric()[0].GetHistogram()
				// The burner is the only pod of this node; upstream's 25
				// buckets from 0.5 s to 3600 s, then +Inf.
				b := h.GetBucket()
				if h.GetSampleCount() != 1 || len(b) != 26 || b[0].GetUpperBound() != 0.5 || b[24].GetUpperBound() != 3600 {
					return false, fmt.Errorf("%s: %d samples, buckets %v", name, h.GetSampleCount(), h.GetBucket())
				}
			}
			return true, nil
		})
	})

	// metrics-server keeps a figure once it has two scrapes of it, 15 s
	// apart; the first comes when it starts.
	t.Run("kubectl top node", func(t *testing.T) { waitTopNodes(t, p, p.NodeName) })
	t.Run("kubectl top pod", func(t *testing.T) {
		Eventually(t, 3*time.Minute, "kubectl top pod shows the burner's figures", func() (bool, error) {
			out, errOut, code := p.kubectl(t, "", nil, "-n", ns, "top", "pod", "burner", "--no-headers")
			f := strings.Fields(out)
			if code != 0 || len(f) != 3 || f[0] != "burner" {
				return false, fmt.Errorf("exit %d: %q %q", code, out, errOut)
			}
			// The 32 MiB it holds, within 10 % of its cgroup's working set
			// (the held pages do not move); some CPU time of its loop,
			// however little a loaded machine gives it.
			cpu, mem := quantityValue(f[1], "m"), quantityValue(f[2], "Mi")
			cgroupMi := -1.0
			if memDir != "" {
				cgroupMi = float64(cgroupWorkingSet(t, memDir)) / (1 << 20)
			}
			if cpu >= 1 && mem >= 30 && (memDir == "" || within10(float64(mem), cgroupMi)) {
				t.Logf("kubectl top pod: %s (cgroup working set %.1f Mi)", out, cgroupMi)
				return true, nil
			}
			return false, fmt.Errorf("CPU %q, memory %q (cgroup working set %.1f Mi)", f[1], f[2], cgroupMi)
		})
	})
}

// waitTopNodes waits for `kubectl top node` to show CPU and memory
// figures of every node named.
func waitTopNodes(t *testing.T, p *Podvisor, nodes ...string) {
	t.Helper()
	Eventually(t, 3*time.Minute, "kubectl top node shows figures of "+strings.Join(nodes, ", "), func() (bool, error) {
		// Every node: kubectl top node takes one name at most.
		out, errOut, code := p.kubectl(t, "", nil, "top", "node", "--no-headers")
		if code != 0 {
			return false, fmt.Errorf("exit %d: %q %q", code, out, errOut)
		}
		shown := map[string]bool{}
		for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
			f := strings.Fields(line)
			if len(f) >= 5 && quantityValue(f[1], "m") > 0 && quantityValue(f[3], "Mi") > 0 {
				shown[f[0]] = true
			}
		}
		for _, n := range nodes {
			if !shown[n] {
				return false, fmt.Errorf("no figures of %s: %q", n, out)
			}
		}
		t.Logf("kubectl top node:\n%s", out)
		return true, nil
	})
}

// quantityValue is kubectl top's figure "123m" or "45Mi" without its unit;
// -1 when it is not one.
func quantityValue(s, unit string) int {
	v, ok := strings.CutSuffix(s, unit)
	if !ok {
		return -1
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		return -1
	}
	return n
}
