package admission

import (
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

func admitNode() *v1.Node {
	return &v1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "n1", Labels: map[string]string{
			"kubernetes.io/hostname": "n1", "kubernetes.io/os": "linux", "disk": "ssd"}},
		Status: v1.NodeStatus{Allocatable: v1.ResourceList{
			v1.ResourceCPU: resource.MustParse("2"), v1.ResourceMemory: resource.MustParse("1Gi")}},
	}
}

type admitPodOpt func(*v1.Pod)

func admitPod(opts ...admitPodOpt) *v1.Pod {
	p := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "u"},
		Spec:       v1.PodSpec{NodeName: "n1", Containers: []v1.Container{{Name: "c"}}},
	}
	for _, o := range opts {
		o(p)
	}
	return p
}

func cpu(q string) admitPodOpt {
	return func(p *v1.Pod) {
		p.Spec.Containers[0].Resources.Requests = v1.ResourceList{v1.ResourceCPU: resource.MustParse(q)}
	}
}

func hostPort(port int32, ip string, proto v1.Protocol) admitPodOpt {
	return func(p *v1.Pod) {
		p.Spec.Containers[0].Ports = append(p.Spec.Containers[0].Ports, v1.ContainerPort{ContainerPort: 80, HostPort: port, HostIP: ip, Protocol: proto})
	}
}

func osName(name v1.OSName) admitPodOpt {
	return func(p *v1.Pod) { p.Spec.OS = &v1.PodOS{Name: name} }
}

func selector(kv ...string) admitPodOpt {
	return func(p *v1.Pod) {
		p.Spec.NodeSelector = map[string]string{}
		for i := 0; i+1 < len(kv); i += 2 {
			p.Spec.NodeSelector[kv[i]] = kv[i+1]
		}
	}
}

func requiredAffinity(terms ...v1.NodeSelectorTerm) admitPodOpt {
	return func(p *v1.Pod) {
		p.Spec.Affinity = &v1.Affinity{NodeAffinity: &v1.NodeAffinity{
			RequiredDuringSchedulingIgnoredDuringExecution: &v1.NodeSelector{NodeSelectorTerms: terms}}}
	}
}

func tolerate(t ...v1.Toleration) admitPodOpt {
	return func(p *v1.Pod) { p.Spec.Tolerations = t }
}

func tainted(taints ...v1.Taint) func(*v1.Node) {
	return func(n *v1.Node) { n.Spec.Taints = taints }
}

const (
	msgNodeAffinity = "Predicate NodeAffinity failed: node(s) didn't match Pod's node affinity/selector"
	msgTaint        = "Predicate TaintToleration failed: node(s) had taints that the pod didn't tolerate"
)

// The kubelet's predicate admission (upstream pkg/kubelet/lifecycle
// predicate.go): each rule with upstream's reason and message, and the order
// in which they are tried (the first failure is the verdict).
func TestAdmitOnNode(t *testing.T) {
	noExec := v1.Taint{Key: "dedicated", Value: "db", Effect: v1.TaintEffectNoExecute}
	other := admitPod(cpu("1500m"))
	tests := []struct {
		name    string
		pod     *v1.Pod
		node    func(*v1.Node)
		others  []*v1.Pod
		maxPods int32
		reason  string // "" admits
		message string
	}{
		{name: "a plain pod is admitted", pod: admitPod()},
		{name: "OS field linux is admitted", pod: admitPod(osName(v1.Linux))},
		{name: "OS field windows -> PodOSNotSupported", pod: admitPod(osName(v1.Windows)),
			reason: "PodOSNotSupported", message: "Failed to admit pod as the OS field doesn't match node OS"},
		{name: "kubernetes.io/os pod label windows -> PodOSSelectorNodeLabelDoesNotMatch",
			pod:    admitPod(func(p *v1.Pod) { p.Labels = map[string]string{"kubernetes.io/os": "windows"} }),
			reason: "PodOSSelectorNodeLabelDoesNotMatch", message: "Failed to admit pod as the `kubernetes.io/os` label doesn't match node label"},
		{name: "kubernetes.io/os pod label linux, node label missing: the node is the agent's OS",
			pod:  admitPod(func(p *v1.Pod) { p.Labels = map[string]string{"kubernetes.io/os": "linux"} }),
			node: func(n *v1.Node) { delete(n.Labels, "kubernetes.io/os") }},
		{name: "the OS checks come before resources", pod: admitPod(osName(v1.Windows), cpu("64")),
			reason: "PodOSNotSupported", message: "Failed to admit pod as the OS field doesn't match node OS"},

		{name: "pods beyond maxPods -> OutOfpods", pod: admitPod(), others: []*v1.Pod{other}, maxPods: 1,
			reason: "OutOfpods", message: "Node didn't have enough resource: pods, requested: 1, used: 1, capacity: 1"},
		{name: "cpu beyond allocatable with the others' -> OutOfcpu", pod: admitPod(cpu("1")), others: []*v1.Pod{other},
			reason: "OutOfcpu", message: "Node didn't have enough resource: cpu, requested: 1000, used: 1500, capacity: 2000"},
		{name: "memory beyond allocatable -> OutOfmemory",
			pod: admitPod(func(p *v1.Pod) {
				p.Spec.Containers[0].Resources.Requests = v1.ResourceList{v1.ResourceMemory: resource.MustParse("2Gi")}
			}),
			reason: "OutOfmemory", message: "Node didn't have enough resource: memory, requested: 2147483648, used: 0, capacity: 1073741824"},

		{name: "nodeSelector matching the node's labels is admitted", pod: admitPod(selector("disk", "ssd"))},
		{name: "nodeSelector not matching -> NodeAffinity", pod: admitPod(selector("disk", "hdd")),
			reason: "NodeAffinity", message: msgNodeAffinity},
		{name: "nodeSelector on a label the node lacks -> NodeAffinity", pod: admitPod(selector("gpu", "true")),
			reason: "NodeAffinity", message: msgNodeAffinity},
		{name: "required node affinity matching (one term of two) is admitted",
			pod: admitPod(requiredAffinity(
				v1.NodeSelectorTerm{MatchExpressions: []v1.NodeSelectorRequirement{{Key: "disk", Operator: v1.NodeSelectorOpIn, Values: []string{"hdd"}}}},
				v1.NodeSelectorTerm{MatchExpressions: []v1.NodeSelectorRequirement{{Key: "disk", Operator: v1.NodeSelectorOpIn, Values: []string{"ssd"}}}}))},
		{name: "required node affinity not matching -> NodeAffinity",
			pod: admitPod(requiredAffinity(
				v1.NodeSelectorTerm{MatchExpressions: []v1.NodeSelectorRequirement{{Key: "disk", Operator: v1.NodeSelectorOpNotIn, Values: []string{"ssd"}}}})),
			reason: "NodeAffinity", message: msgNodeAffinity},
		{name: "required node affinity on metadata.name of another node -> NodeAffinity",
			pod: admitPod(requiredAffinity(
				v1.NodeSelectorTerm{MatchFields: []v1.NodeSelectorRequirement{{Key: "metadata.name", Operator: v1.NodeSelectorOpIn, Values: []string{"n2"}}}})),
			reason: "NodeAffinity", message: msgNodeAffinity},
		{name: "preferred node affinity alone never rejects",
			pod: admitPod(func(p *v1.Pod) {
				p.Spec.Affinity = &v1.Affinity{NodeAffinity: &v1.NodeAffinity{PreferredDuringSchedulingIgnoredDuringExecution: []v1.PreferredSchedulingTerm{{
					Weight: 1, Preference: v1.NodeSelectorTerm{MatchExpressions: []v1.NodeSelectorRequirement{{Key: "disk", Operator: v1.NodeSelectorOpIn, Values: []string{"hdd"}}}}}}}}
			})},
		{name: "resources come before node affinity", pod: admitPod(cpu("3"), selector("disk", "hdd")),
			reason: "OutOfcpu", message: "Node didn't have enough resource: cpu, requested: 3000, used: 0, capacity: 2000"},

		{name: "spec.nodeName of another node -> NodeName",
			pod:    admitPod(func(p *v1.Pod) { p.Spec.NodeName = "n2" }),
			reason: "NodeName", message: "Predicate NodeName failed: node(s) didn't match the requested node name"},

		{name: "a host port another pod has -> NodePorts", pod: admitPod(hostPort(8080, "", "")), others: []*v1.Pod{admitPod(hostPort(8080, "", ""))},
			reason: "NodePorts", message: "Predicate NodePorts failed: node(s) didn't have free ports for the requested pod ports"},
		{name: "a host port on all addresses against one address -> NodePorts", pod: admitPod(hostPort(8080, "", "")),
			others: []*v1.Pod{admitPod(hostPort(8080, "10.0.0.1", ""))},
			reason: "NodePorts", message: "Predicate NodePorts failed: node(s) didn't have free ports for the requested pod ports"},
		{name: "a sidecar's host port counts -> NodePorts", pod: admitPod(hostPort(8080, "", "")),
			others: []*v1.Pod{admitPod(func(p *v1.Pod) {
				p.Spec.InitContainers = []v1.Container{{Name: "s", RestartPolicy: ptr.To(v1.ContainerRestartPolicyAlways), Ports: []v1.ContainerPort{{HostPort: 8080, ContainerPort: 80}}}}
			})},
			reason: "NodePorts", message: "Predicate NodePorts failed: node(s) didn't have free ports for the requested pod ports"},
		{name: "the same host port on another address or protocol is admitted", pod: admitPod(hostPort(8080, "10.0.0.2", "")),
			others: []*v1.Pod{admitPod(hostPort(8080, "10.0.0.1", "")), admitPod(hostPort(8080, "", v1.ProtocolUDP))}},
		{name: "a plain init container's host port does not count", pod: admitPod(hostPort(8080, "", "")),
			others: []*v1.Pod{admitPod(func(p *v1.Pod) {
				p.Spec.InitContainers = []v1.Container{{Name: "i", Ports: []v1.ContainerPort{{HostPort: 8080, ContainerPort: 80}}}}
			})}},
		{name: "node name comes before host ports", pod: admitPod(hostPort(8080, "", ""), func(p *v1.Pod) { p.Spec.NodeName = "n2" }),
			others: []*v1.Pod{admitPod(hostPort(8080, "", ""))},
			reason: "NodeName", message: "Predicate NodeName failed: node(s) didn't match the requested node name"},

		{name: "untolerated NoExecute taint -> TaintToleration", pod: admitPod(), node: tainted(noExec),
			reason: "TaintToleration", message: msgTaint},
		{name: "NoExecute taint tolerated by key and value is admitted", node: tainted(noExec),
			pod: admitPod(tolerate(v1.Toleration{Key: "dedicated", Operator: v1.TolerationOpEqual, Value: "db", Effect: v1.TaintEffectNoExecute}))},
		{name: "NoExecute taint tolerated by Exists without key is admitted", node: tainted(noExec),
			pod: admitPod(tolerate(v1.Toleration{Operator: v1.TolerationOpExists}))},
		{name: "a toleration for another value does not tolerate -> TaintToleration", node: tainted(noExec),
			pod:    admitPod(tolerate(v1.Toleration{Key: "dedicated", Operator: v1.TolerationOpEqual, Value: "web", Effect: v1.TaintEffectNoExecute})),
			reason: "TaintToleration", message: msgTaint},
		{name: "NoSchedule and PreferNoSchedule taints are the scheduler's: admitted",
			node: tainted(v1.Taint{Key: "a", Effect: v1.TaintEffectNoSchedule}, v1.Taint{Key: "b", Effect: v1.TaintEffectPreferNoSchedule}),
			pod:  admitPod()},
		{name: "node affinity comes before taints", pod: admitPod(selector("disk", "hdd")), node: tainted(noExec),
			reason: "NodeAffinity", message: msgNodeAffinity},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			node := admitNode()
			if tc.node != nil {
				tc.node(node)
			}
			got := Node(tc.pod, node, tc.others, tc.maxPods)
			switch {
			case tc.reason == "" && got != nil:
				t.Errorf("rejected %s: %s, want admitted", got.Reason, got.Message)
			case tc.reason != "" && got == nil:
				t.Errorf("admitted, want %s", tc.reason)
			case got != nil && (got.Reason != tc.reason || got.Message != tc.message):
				t.Errorf("got %s: %q\nwant %s: %q", got.Reason, got.Message, tc.reason, tc.message)
			}
		})
	}
}
