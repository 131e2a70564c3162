package admission

import (
	"fmt"
	"runtime"

	v1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"

	corev1 "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
)

// Reasons and messages of the kubelet's predicate admission (v1.36). A failed
// scheduler predicate is reported by its plugin's name, with the message
// "Predicate <name> failed: <the plugin's reason>".
const (
	ReasonPodOSSelectorMismatch = "PodOSSelectorNodeLabelDoesNotMatch"
	ReasonPodOSNotSupported     = "PodOSNotSupported"
	ReasonNodeAffinity          = "NodeAffinity"
	ReasonNodeName              = "NodeName"
	ReasonTaintToleration       = "TaintToleration"
	ReasonNodePorts             = "NodePorts"

	messagePodOSSelectorMismatch = "Failed to admit pod as the `kubernetes.io/os` label doesn't match node label"
	messagePodOSNotSupported     = "Failed to admit pod as the OS field doesn't match node OS"
	predicateNodeAffinity        = "node(s) didn't match Pod's node affinity/selector"
	predicateNodeName            = "node(s) didn't match the requested node name"
	predicateTaintToleration     = "node(s) had taints that the pod didn't tolerate"
	predicateNodePorts           = "node(s) didn't have free ports for the requested pod ports"
)

// Node is the kubelet's predicate admission of pod on node, others
// being the pods already admitted, in upstream's order: the OS checks, which
// no preemption could help, then the scheduler's checks the kubelet repeats
// (resources, required node affinity and nodeSelector, spec.nodeName, host
// ports), then
// the node's NoExecute taints (NoSchedule ones are the scheduler's business:
// a pod bound directly may ignore them). The first failure is the verdict;
// nil admits.
func Node(pod *v1.Pod, node *v1.Node, others []*v1.Pod, maxPods int32) *Refusal {
	// The node's OS is the one the agent runs on, whatever its label says.
	if os, ok := pod.Labels[v1.LabelOSStable]; ok && os != runtime.GOOS {
		return &Refusal{ReasonPodOSSelectorMismatch, messagePodOSSelectorMismatch}
	}
	if pod.Spec.OS != nil && string(pod.Spec.OS.Name) != runtime.GOOS {
		return &Refusal{ReasonPodOSNotSupported, messagePodOSNotSupported}
	}
	if a := Resources(pod, node.Status.Allocatable, others, maxPods); a != nil {
		return a
	}
	// An invalid selector matches nothing, as in the scheduler.
	if ok, _ := nodeaffinity.GetRequiredNodeAffinity(pod).Match(node); !ok {
		return predicateFailed(ReasonNodeAffinity, predicateNodeAffinity)
	}
	if pod.Spec.NodeName != "" && pod.Spec.NodeName != node.Name {
		return predicateFailed(ReasonNodeName, predicateNodeName)
	}
	if !hostPortsFree(pod, others) {
		return predicateFailed(ReasonNodePorts, predicateNodePorts)
	}
	noExecute := func(t *v1.Taint) bool { return t.Effect == v1.TaintEffectNoExecute }
	// Toleration comparison operators are alpha and off in 1.36.
	if _, untolerated := corev1.FindMatchingUntoleratedTaint(klog.Background(), node.Spec.Taints, pod.Spec.Tolerations, noExecute, false); untolerated {
		return predicateFailed(ReasonTaintToleration, predicateTaintToleration)
	}
	return nil
}

// hostPortsFree: none of the pod's host ports (its containers' and
// sidecars') is one an admitted pod has, as the scheduler's NodePorts
// check: same protocol and port, and the same host IP or either on all
// addresses.
func hostPortsFree(pod *v1.Pod, others []*v1.Pod) bool {
	type key struct {
		proto string
		port  int32
	}
	used := map[key][]string{} // host IPs by protocol and port
	for _, o := range others {
		for _, p := range hostPorts(o) {
			k := key{string(p.Protocol), p.HostPort}
			used[k] = append(used[k], p.HostIP)
		}
	}
	for _, p := range hostPorts(pod) {
		for _, ip := range used[key{string(p.Protocol), p.HostPort}] {
			if ip == p.HostIP || ip == anyIP || p.HostIP == anyIP {
				return false
			}
		}
	}
	return true
}

const anyIP = "0.0.0.0"

// hostPorts are the pod's ports with a hostPort, of its regular containers
// and its sidecars (which run as long as the pod), host IP and protocol
// defaulted.
func hostPorts(pod *v1.Pod) []v1.ContainerPort {
	var out []v1.ContainerPort
	add := func(c *v1.Container) {
		for _, p := range c.Ports {
			if p.HostPort <= 0 {
				continue
			}
			if p.HostIP == "" {
				p.HostIP = anyIP
			}
			if p.Protocol == "" {
				p.Protocol = v1.ProtocolTCP
			}
			out = append(out, p)
		}
	}
	for i := range pod.Spec.InitContainers {
		if c := &pod.Spec.InitContainers[i]; c.RestartPolicy != nil && *c.RestartPolicy == v1.ContainerRestartPolicyAlways {
			add(c)
		}
	}
	for i := range pod.Spec.Containers {
		add(&pod.Spec.Containers[i])
	}
	return out
}

func predicateFailed(name, desc string) *Refusal {
	return &Refusal{name, fmt.Sprintf("Predicate %s failed: %s", name, desc)}
}
