package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Events about a container point at it, as the kubelet's do: the pod with
// the container's field path, which kubectl describe and `kubectl get
// events` show; events about the whole pod have none.
func TestContainerEventsNameTheirContainer(t *testing.T) {
	t.Parallel()
	p := Shared(t)
	ns := p.Namespace("events")
	pod := p.pod(ns, "ev", v1.RestartPolicyAlways, sh("app", "exec sleep 1000"))
	pod.Spec.InitContainers = []v1.Container{sh("init", "true")}
	p.create(t, pod)
	p.waitRunning(t, ns, "ev")
	p.deletePod(t, ns, "ev", 1)

	want := map[string][]string{ // field path → reasons
		"spec.initContainers{init}": {"Created", "Started"},
		"spec.containers{app}":      {"Created", "Started", "Killing"},
	}
	if p.Runtime != "process" {
		// Images: Pulled ("already present") for each container.
		for path := range want {
			want[path] = append(want[path], "Pulled")
		}
	}
	Eventually(t, 30*time.Second, "the containers' events with their field paths", func() (bool, error) {
		evs, err := p.Admin.CoreV1().Events(ns).List(context.Background(), metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		got := map[string]map[string]bool{}
		for _, e := range evs.Items {
			if e.InvolvedObject.Kind != "Pod" || e.InvolvedObject.Name != "ev" {
				continue
			}
			if got[e.InvolvedObject.FieldPath] == nil {
				got[e.InvolvedObject.FieldPath] = map[string]bool{}
			}
			got[e.InvolvedObject.FieldPath][e.Reason] = true
		}
		for path, reasons := range want {
			for _, r := range reasons {
				if !got[path][r] {
					return false, fmt.Errorf("no %s event at %s; events by field path: %v", r, path, got)
				}
			}
		}
		return true, nil
	})
}
