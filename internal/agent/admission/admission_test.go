package admission

import (
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/podvisor/podvisor/internal/agent/podsecurity"
)

// The handlers run in the kubelet's order and the first refusal is the
// verdict: sysctls, AppArmor, node info, the node's predicates, then the
// extra check (node shutdown).
func TestAdmitOrder(t *testing.T) {
	refuseSysctls := func(*v1.Pod) (string, bool) { return "forbidden sysctl: \"kernel.msgmax\" not allowlisted", false }
	allowSysctls := func(*v1.Pod) (string, bool) { return "", true }
	shutdown := func(*v1.Pod) *v1.PodStatus {
		return &v1.PodStatus{Reason: "NodeShutdown", Message: "Pod was rejected as the node is shutting down."}
	}
	apparmorPod := admitPod(func(p *v1.Pod) {
		p.Spec.SecurityContext = &v1.PodSecurityContext{AppArmorProfile: &v1.AppArmorProfile{Type: v1.AppArmorProfileTypeRuntimeDefault}}
	})
	affinityMiss := admitPod(selector("disk", "hdd"))
	tests := []struct {
		name   string
		pod    *v1.Pod
		in     Input
		reason string
	}{
		{"admitted", admitPod(), Input{Node: admitNode(), Sysctls: allowSysctls, Extra: func(*v1.Pod) *v1.PodStatus { return nil }}, ""},
		{"sysctls come first, even before node info", affinityMiss, Input{Sysctls: refuseSysctls, Extra: shutdown}, podsecurity.ReasonSysctlForbidden},
		{"AppArmor on a host without it", apparmorPod, Input{Node: admitNode(), AppArmor: true, HostAppArmor: false}, podsecurity.ReasonAppArmor},
		{"AppArmor not checked where the runtime does not enforce profiles", apparmorPod, Input{Node: admitNode()}, ""},
		{"no node info", admitPod(), Input{Extra: shutdown}, ReasonInvalidNodeInfo},
		{"predicates before node shutdown", affinityMiss, Input{Node: admitNode(), Extra: shutdown}, ReasonNodeAffinity},
		{"node shutdown last", admitPod(), Input{Node: admitNode(), Extra: shutdown}, "NodeShutdown"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := Admit(tc.pod, tc.in)
			switch {
			case tc.reason == "" && got != nil:
				t.Errorf("refused %s: %s, want admitted", got.Reason, got.Message)
			case tc.reason != "" && (got == nil || got.Reason != tc.reason):
				t.Errorf("got %+v, want %s", got, tc.reason)
			}
		})
	}
}
