package eviction

import (
	"fmt"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	resourcehelper "k8s.io/component-helpers/resource"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/klog/v2"
)

// Reason is the status reason of evicted and refused pods, and of the event.
const Reason = "Evicted"

// Upstream's message formats, each ending in ". " as upstream's do.
const (
	nodeLowMessageFmt          = "The node was low on resource: %v. "
	thresholdMetMessageFmt     = "Threshold quantity: %v, available: %v. "
	containerMessageFmt        = "Container %s was using %s, request is %s, has larger consumption of %v. "
	nodeConditionMessageFmt    = "The node had condition: %v. "
	containerStorageMessageFmt = "Container %s exceeded its local ephemeral storage limit %q. "
	podStorageMessageFmt       = "Pod ephemeral local storage usage exceeds the total limit of containers %s. "
	emptyDirMessageFmt         = "Usage of EmptyDir volume %q exceeds the limit %q. "
)

// Event annotations of a node-pressure eviction, as upstream.
const (
	annotationOffendingContainers      = "offending_containers"
	annotationOffendingContainersUsage = "offending_containers_usage"
	annotationStarvedResource          = "starved_resource"
)

// Message is the message of a pod evicted for node pressure (d from Decide),
// with the event's annotations: the starved resource, the threshold and what
// was available, then each container using more than it requests.
func Message(d Decision, obs Observations, pod *v1.Pod, stats StatsFunc) (string, map[string]string) {
	r := d.Resource
	msg := fmt.Sprintf(nodeLowMessageFmt, r)
	for _, t := range d.Met {
		if signalResource[t.Signal] != r {
			continue
		}
		if o, ok := obs[t.Signal]; ok {
			format := resource.BinarySI
			if r == resourceInodes || r == resourcePids {
				format = resource.DecimalSI
			}
			q := t.Value.Of(o.Capacity)
			msg += fmt.Sprintf(thresholdMetMessageFmt, &q, resource.NewQuantity(o.Available, format))
			break
		}
	}
	st, ok := stats(pod)
	if !ok {
		return msg, map[string]string{}
	}
	var names, usages []string
	containers := append(append([]v1.Container(nil), pod.Spec.Containers...), pod.Spec.InitContainers...)
	for _, cs := range st.Containers {
		for _, c := range containers {
			if c.Name != cs.Name {
				continue
			}
			req := c.Resources.Requests[r]
			if u := containerUsage(cs, r); u != nil && u.Cmp(req) > 0 {
				msg += fmt.Sprintf(containerMessageFmt, c.Name, u.String(), req.String(), r)
				names = append(names, c.Name)
				usages = append(usages, u.String())
			}
			break
		}
	}
	return msg, map[string]string{
		annotationOffendingContainers:      strings.Join(names, ","),
		annotationOffendingContainersUsage: strings.Join(usages, ","),
		annotationStarvedResource:          string(r),
	}
}

// LocalStorage checks a pod's local storage limits, as upstream and in its
// order: an emptyDir over its sizeLimit, the pod over the sum of its
// containers' ephemeral-storage limits, a container over its own limit. It
// returns the eviction message, or "" when the pod is within its limits.
func LocalStorage(pod *v1.Pod, st PodStats) string {
	used := map[string]int64{}
	for _, v := range st.Volumes {
		used[v.Name] = v.Bytes
	}
	for _, v := range pod.Spec.Volumes {
		if v.EmptyDir == nil || v.EmptyDir.SizeLimit == nil || v.EmptyDir.SizeLimit.Sign() <= 0 {
			continue
		}
		if u, ok := used[v.Name]; ok && u > v.EmptyDir.SizeLimit.Value() {
			return fmt.Sprintf(emptyDirMessageFmt, v.Name, v.EmptyDir.SizeLimit.String())
		}
	}
	if limit, ok := resourcehelper.PodLimits(pod, resourcehelper.PodResourcesOptions{})[v1.ResourceEphemeralStorage]; ok {
		if st.disk(pod, v1.ResourceEphemeralStorage) > limit.Value() {
			return fmt.Sprintf(podStorageMessageFmt, limit.String())
		}
	}
	limits := map[string]resource.Quantity{}
	for _, c := range pod.Spec.Containers {
		if l, ok := c.Resources.Limits[v1.ResourceEphemeralStorage]; ok && l.Value() != 0 {
			limits[c.Name] = l
		}
	}
	for _, cs := range st.Containers {
		if l, ok := limits[cs.Name]; ok && cs.LogsBytes+cs.RootfsBytes > l.Value() {
			return fmt.Sprintf(containerStorageMessageFmt, cs.Name, l.String())
		}
	}
	return ""
}

// Admit refuses a pod while the node has pressure conditions, as upstream:
// critical pods always pass; under memory pressure alone only BestEffort
// pods that do not tolerate the memory-pressure taint are refused; any
// other pressure refuses every pod. qos is the pod's QoS class.
func Admit(conds []v1.NodeConditionType, pod *v1.Pod, qos v1.PodQOSClass) (message string, ok bool) {
	if len(conds) == 0 || Critical(pod) {
		return "", true
	}
	if len(conds) == 1 && conds[0] == v1.NodeMemoryPressure {
		if qos != v1.PodQOSBestEffort {
			return "", true
		}
		if corev1helpers.TolerationsTolerateTaint(klog.Background(), pod.Spec.Tolerations, &v1.Taint{Key: v1.TaintNodeMemoryPressure, Effect: v1.TaintEffectNoSchedule}, false) {
			return "", true
		}
	}
	return fmt.Sprintf(nodeConditionMessageFmt, conds), false
}

// systemCriticalPriority is upstream's scheduling.SystemCriticalPriority.
const systemCriticalPriority = 2000000000

// Critical pods (static, mirror, or of system-critical priority) are never
// evicted and always admitted.
func Critical(pod *v1.Pod) bool {
	if _, ok := pod.Annotations[v1.MirrorPodAnnotationKey]; ok {
		return true
	}
	if src := pod.Annotations["kubernetes.io/config.source"]; src != "" && src != "api" {
		return true
	}
	return pod.Spec.Priority != nil && *pod.Spec.Priority >= systemCriticalPriority
}
