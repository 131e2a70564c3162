package podworker

import (
	"errors"
	"io"
	"log/slog"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Admission reads the node each time; when it cannot, the pod is refused as
// upstream does, and the node shutdown manager's check comes after the
// node's predicates (upstream's handler order).
func TestAdmitReadsTheNode(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	shutdown := func(*v1.Pod) *v1.PodStatus {
		return &v1.PodStatus{Phase: v1.PodFailed, Reason: "NodeShutdown", Message: "Pod was rejected as the node is shutting down."}
	}
	pod := func(selector map[string]string) *v1.Pod {
		return &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "u"},
			Spec: v1.PodSpec{NodeName: "n1", NodeSelector: selector, Containers: []v1.Container{{Name: "c"}}}}
	}
	hdd := map[string]string{"disk": "hdd"}
	m := &Manager{cfg: Config{NodeName: "n1", Log: log, Node: func() (*v1.Node, error) { return nil, errors.New("down") }}}
	if a := m.admit(pod(nil)); a == nil || a.Reason != "InvalidNodeInfo" || a.Message != "Kubelet cannot get node info." {
		t.Errorf("node unreadable: %+v", a)
	}

	node := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", Labels: map[string]string{"kubernetes.io/os": "linux", "disk": "ssd"}}}
	m.cfg.Node = func() (*v1.Node, error) { return node, nil }
	m.extraAdmit = shutdown
	if a := m.admit(pod(hdd)); a == nil || a.Reason != "NodeAffinity" {
		t.Errorf("predicates before node shutdown: %+v", a)
	}
	if a := m.admit(pod(nil)); a == nil || a.Reason != "NodeShutdown" {
		t.Errorf("node shutdown: %+v", a)
	}
	m.extraAdmit = nil
	node.Labels["disk"] = "hdd" // a label added since: the next admission sees it
	if a := m.admit(pod(hdd)); a != nil {
		t.Errorf("admission must read the node anew: %+v", a)
	}
}
