package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Restarting podvisor while a pod runs: the container keeps running (same
// container ID), restartCount does not move, and its log continues; a
// ConfigMap volume set up before the restart still follows its ConfigMap
// (the new agent adopts it without a container start).
func TestAgentRestartKeepsRunningPod(t *testing.T) {
	t.Parallel()
	p := NewPodvisor(t)
	p.Start()
	ns := p.Namespace("restart")
	ctx := context.Background()
	p.create(t, p.pod(ns, "ticker", v1.RestartPolicyAlways, sh("c", "i=0; while true; do i=$((i+1)); echo tick-$i; sleep 0.5; done")))
	cms := p.Admin.CoreV1().ConfigMaps(ns)
	cm, err := cms.Create(ctx, &v1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cm"}, Data: map[string]string{"k": "before"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	mnt := filepath.Join(t.TempDir(), "cfg")
	reader := sh("c", fmt.Sprintf(`while true; do echo "file=$(cat '%s/k')"; sleep 0.5; done`, mnt))
	reader.VolumeMounts = []v1.VolumeMount{{Name: "cfg", MountPath: mnt}}
	readerPod := p.pod(ns, "reader", v1.RestartPolicyAlways, reader)
	readerPod.Spec.Volumes = []v1.Volume{{Name: "cfg", VolumeSource: v1.VolumeSource{ConfigMap: &v1.ConfigMapVolumeSource{
		LocalObjectReference: v1.LocalObjectReference{Name: "cm"}}}}}
	p.create(t, readerPod)
	before := p.waitPod(t, ns, "ticker", 60*time.Second, "Running", func(pod *v1.Pod) bool {
		return pod.Status.Phase == v1.PodRunning && isReady(pod)
	})
	id := containerStatus(before, "c").ContainerID
	p.waitLogs(t, ns, "reader", "c", 60*time.Second, "file=before")

	p.Stop()
	if code := p.ExitCode(); code != 0 {
		t.Fatalf("exit code %d", code)
	}
	p.Start()

	// Give the agent time to resync, then the container must be the same one.
	after := p.waitPod(t, ns, "ticker", 60*time.Second, "Running and Ready again", func(pod *v1.Pod) bool {
		cs := containerStatus(pod, "c")
		return pod.Status.Phase == v1.PodRunning && isReady(pod) && cs != nil && cs.State.Running != nil
	})
	cs := containerStatus(after, "c")
	if cs.ContainerID != id || cs.RestartCount != 0 {
		t.Errorf("after restart: containerID %s (was %s), restartCount %d (want 0)", cs.ContainerID, id, cs.RestartCount)
	}
	cm.Data["k"] = "after"
	if _, err := cms.Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The kubelet's ConfigMap volumes follow within its sync period and
	// cache TTL (upstream's specs wait minutes): here the watch's refresh,
	// or the volume manager's periodic resync (a minute), which adopts the
	// pod if its first refresh after the restart did not. On failure the
	// log's volume lines say which happened.
	t.Cleanup(func() {
		if t.Failed() {
			b, _ := os.ReadFile(filepath.Join(p.DataDir, "podvisor.log"))
			for _, l := range strings.Split(string(b), "\n") {
				if strings.Contains(l, "adopt") || strings.Contains(l, "volume") {
					t.Log(l)
				}
			}
		}
	})
	p.waitLogs(t, ns, "reader", "c", 3*time.Minute, "file=after")
	if got, err := p.Admin.CoreV1().Pods(ns).Get(ctx, "reader", metav1.GetOptions{}); err != nil {
		t.Fatal(err)
	} else if cs := containerStatus(got, "c"); cs == nil || cs.RestartCount != 0 {
		t.Errorf("the ConfigMap reader restarted: %s", describe(got))
	}
	kc := filepath.Join(p.DataDir, "admin.kubeconfig")
	Eventually(t, 30*time.Second, "log continues past the restart", func() (bool, error) {
		o, e, code := runPodvisor(t, 30*time.Second, "kubectl", "--kubeconfig", kc, "-n", ns, "logs", "ticker")
		if code != 0 {
			return false, errString(e)
		}
		lines := strings.Fields(o)
		// tick-1 from before the restart, and lines written after it.
		return len(lines) > 0 && lines[0] == "tick-1" && len(lines) >= 12, nil
	})
	// No extra events of a second start.
	evs, err := p.Admin.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=ticker"})
	if err != nil {
		t.Fatal(err)
	}
	started := 0
	for _, e := range evs.Items {
		if e.Reason == "Started" {
			started += int(max(e.Count, 1))
		}
	}
	if started != 1 {
		t.Errorf("Started events = %d, want 1", started)
	}
}
