package e2e

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// Container restart rules with the RestartAllContainers action (KEP-5532,
// Beta in 1.36), after upstream's "Pod Extended (RestartAllContainers)"
// specs. The pods are created without nodeName: the scheduler must find that
// the node declares the feature they require (KEP-5328).

var restartAllOn42 = []v1.ContainerRestartRule{{
	Action:    v1.ContainerRestartRuleActionRestartAllContainers,
	ExitCodes: &v1.ContainerRestartRuleOnExitCodes{Operator: v1.ContainerRestartRuleOnExitCodesOpIn, Values: []int32{42}},
}}

// withWorkdir mounts one emptyDir at dir in every container.
func withWorkdir(pod *v1.Pod, dir string) {
	for _, list := range [][]v1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for i := range list {
			list[i].VolumeMounts = []v1.VolumeMount{{Name: "workdir", MountPath: dir}}
		}
	}
	pod.Spec.Volumes = []v1.Volume{{Name: "workdir", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}}}
}

func restartAllSource(name, script string, sidecar bool) v1.Container {
	c := sh(name, script)
	c.RestartPolicy = ptr.To(v1.ContainerRestartPolicyNever)
	if sidecar {
		c.RestartPolicy = ptr.To(v1.ContainerRestartPolicyAlways)
	}
	c.RestartPolicyRules = restartAllOn42
	return c
}

func alwaysSidecar(name, script string) v1.Container {
	c := sh(name, script)
	c.RestartPolicy = ptr.To(v1.ContainerRestartPolicyAlways)
	return c
}

func TestRestartAllContainers(t *testing.T) {
	t.Parallel()
	p := Shared(t)
	ns := p.Namespace("restart-all")
	cases := []struct {
		name      string
		build     func(dir string) *v1.Pod
		restarted []string // each must show restartCount 1 and a last state
		running   []string
	}{
		{"regular container exit", func(dir string) *v1.Pod {
			pod := p.pod(ns, "regular-exit", v1.RestartPolicyNever,
				restartAllSource("source", fmt.Sprintf("if [ -f %[1]s/done ]; then sleep 10000; else touch %[1]s/done; exit 42; fi", dir), false),
				sh("regular", "sleep 10000"))
			pod.Spec.InitContainers = []v1.Container{sh("init", "exit 0"), alwaysSidecar("sidecar", "sleep 10000")}
			return pod
		}, []string{"init", "sidecar", "source", "regular"}, []string{"source", "regular", "sidecar"}},
		{"sidecar exit", func(dir string) *v1.Pod {
			pod := p.pod(ns, "sidecar-exit", v1.RestartPolicyNever, sh("regular", "sleep 10000"))
			pod.Spec.InitContainers = []v1.Container{sh("init", "exit 0"), alwaysSidecar("sidecar", "sleep 10000"),
				restartAllSource("source", fmt.Sprintf("if [ -f %[1]s/done ]; then sleep 10000; else touch %[1]s/done; sleep 2; exit 42; fi", dir), true)}
			return pod
		}, []string{"init", "sidecar", "source", "regular"}, []string{"source", "regular", "sidecar"}},
		{"init container exit", func(dir string) *v1.Pod {
			pod := p.pod(ns, "init-exit", v1.RestartPolicyNever, sh("regular", "sleep 10000"))
			pod.Spec.InitContainers = []v1.Container{alwaysSidecar("sidecar", "sleep 10000"), sh("init", "exit 0"),
				restartAllSource("source", fmt.Sprintf("if [ -f %[1]s/done ]; then exit 0; else touch %[1]s/done; exit 42; fi", dir), false)}
			return pod
		}, []string{"sidecar", "init", "source"}, []string{"regular", "sidecar"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := filepath.Join(t.TempDir(), "work")
			pod := tc.build(dir)
			withWorkdir(pod, dir)
			p.create(t, pod)
			got := p.waitPod(t, ns, pod.Name, 90*time.Second, "all containers restarted once and running", func(pod *v1.Pod) bool {
				for _, n := range tc.restarted {
					cs := containerStatus(pod, n)
					if cs == nil || cs.RestartCount < 1 || cs.LastTerminationState.Terminated == nil {
						return false
					}
				}
				for _, n := range tc.running {
					if cs := containerStatus(pod, n); cs == nil || cs.State.Running == nil {
						return false
					}
				}
				return pod.Spec.NodeName != ""
			})
			// No loop: the counts stay at one.
			time.Sleep(5 * time.Second)
			got, err := p.Admin.CoreV1().Pods(ns).Get(context.Background(), pod.Name, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			for _, n := range tc.restarted {
				if cs := containerStatus(got, n); cs.RestartCount != 1 {
					t.Errorf("%s restartCount %d, want 1 (a loop?)\n%s", n, cs.RestartCount, describe(got))
				}
			}
			if c := condition(got, v1.AllContainersRestarting); c == nil || c.Status != v1.ConditionFalse {
				t.Errorf("AllContainersRestarting = %+v, want False\n%s", c, describe(got))
			}
			if got.Status.Phase != v1.PodRunning {
				t.Errorf("phase %s, want Running", got.Status.Phase)
			}
		})
	}
}
