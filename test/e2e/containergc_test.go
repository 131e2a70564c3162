package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Container GC with the kubelet's defaults: a container that failed three
// times before it kept running leaves, in the runtime, its running
// instance and its newest dead one (lastState, `logs --previous`); the two
// older dead instances are removed, their logs with them. On either runtime.
func TestContainerGCKeepsNewestDeadInstance(t *testing.T) {
	t.Parallel()
	p := NewPodvisor(t, "--gc-period", "2s",
		"--config", kubeletConfig(t, "crashLoopBackOff:\n  maxContainerRestartPeriod: 1s\n"))
	p.Start()
	ns := p.Namespace("containergc")
	// Runs 1 to 3 fail; run 4 stays up. The count is kept in an emptyDir,
	// which outlives the container's instances.
	script := "n=$(( $(cat /data/n 2>/dev/null || echo 0) + 1 )); echo $n > /data/n; echo run-$n; " +
		"if [ $n -ge 4 ]; then exec sleep 3600; fi; exit 1"
	pod := p.pod(ns, "crasher", v1.RestartPolicyAlways, sh("c", script))
	pod.Spec.Volumes = []v1.Volume{{Name: "data", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}}}
	pod.Spec.Containers[0].VolumeMounts = []v1.VolumeMount{{Name: "data", MountPath: "/data"}}
	created := p.create(t, pod)
	p.waitPod(t, ns, "crasher", 3*time.Minute, "running after 3 restarts", func(pod *v1.Pod) bool {
		cs := containerStatus(pod, "c")
		return cs != nil && cs.RestartCount == 3 && cs.State.Running != nil
	})

	Eventually(t, 2*time.Minute, "two instances left: the running one and the newest dead one", func() (bool, error) {
		if got := strings.Join(p.instanceAttempts(t, string(created.UID)), ","); got != "2,3" {
			return false, fmt.Errorf("attempts of the instances the runtime has: %s", got)
		}
		return true, nil
	})

	kc := filepath.Join(p.DataDir, "admin.kubeconfig")
	o, e, code := runPodvisor(t, 30*time.Second, "kubectl", "--kubeconfig", kc, "-n", ns, "logs", "crasher", "--previous")
	if code != 0 || o != "run-3\n" {
		t.Errorf("logs --previous = %q (stderr %q), want run-3", o, e)
	}
	logDir := filepath.Join(p.DataDir, "agent", "pods", ns+"_crasher_"+string(created.UID), "c")
	entries, err := os.ReadDir(logDir)
	if err != nil {
		t.Fatal(err)
	}
	var logs []string
	for _, e := range entries {
		logs = append(logs, e.Name())
	}
	if strings.Join(logs, ",") != "2.log,3.log" {
		t.Errorf("logs in %s: %v, want 2.log,3.log (those of removed instances removed)", logDir, logs)
	}
}

// instanceAttempts lists the attempts of the container instances the
// runtime has of a pod, sorted: through the CRI on containerd, from the
// instance directories on the process runtime.
func (p *Podvisor) instanceAttempts(t *testing.T, uid string) []string {
	t.Helper()
	var out []string
	if p.Runtime == "containerd" {
		list, err := p.criClient(t).ListContainers(context.Background(), &runtimeapi.ContainerFilter{
			LabelSelector: map[string]string{"io.kubernetes.pod.uid": uid}})
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range list {
			out = append(out, itoa(int(c.Metadata.Attempt)))
		}
	} else {
		configs, _ := filepath.Glob(filepath.Join(p.DataDir, "agent", "containers", "*", "config.json"))
		for _, f := range configs {
			var cfg struct {
				Spec struct {
					PodUID  string
					Attempt int
				}
			}
			if b, err := os.ReadFile(f); err == nil && json.Unmarshal(b, &cfg) == nil && cfg.Spec.PodUID == uid {
				out = append(out, itoa(cfg.Spec.Attempt))
			}
		}
	}
	sort.Strings(out)
	return out
}
