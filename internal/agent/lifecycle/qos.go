package lifecycle

import (
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// qosClass is the pod's QoS class by upstream's rules: only cpu and memory
// count; no request or limit at all is BestEffort; limits for both on every
// container, with the summed requests equal to the summed limits, is
// Guaranteed; anything else is Burstable. Pod-level resources, when set,
// decide alone. The class is immutable, so a published one is kept.
func qosClass(pod *v1.Pod) v1.PodQOSClass {
	return QOSClass(pod)
}

// QOSClass is qosClass for the shell (eviction's admission).
func QOSClass(pod *v1.Pod) v1.PodQOSClass {
	if pod.Status.QOSClass != "" {
		return pod.Status.QOSClass
	}
	requests, limits := v1.ResourceList{}, v1.ResourceList{}
	guaranteed := true
	add := func(r *v1.ResourceRequirements) {
		for _, name := range []v1.ResourceName{v1.ResourceCPU, v1.ResourceMemory} {
			if q, ok := r.Requests[name]; ok && q.Sign() > 0 {
				sum(requests, name, q)
			}
			if q, ok := r.Limits[name]; ok && q.Sign() > 0 {
				sum(limits, name, q)
			} else {
				guaranteed = false
			}
		}
	}
	if pod.Spec.Resources != nil {
		add(pod.Spec.Resources)
	} else {
		for i := range pod.Spec.InitContainers {
			add(&pod.Spec.InitContainers[i].Resources)
		}
		for i := range pod.Spec.Containers {
			add(&pod.Spec.Containers[i].Resources)
		}
	}
	if len(requests) == 0 && len(limits) == 0 {
		return v1.PodQOSBestEffort
	}
	if guaranteed && len(requests) == len(limits) {
		for name, req := range requests {
			if lim, ok := limits[name]; !ok || lim.Cmp(req) != 0 {
				return v1.PodQOSBurstable
			}
		}
		return v1.PodQOSGuaranteed
	}
	return v1.PodQOSBurstable
}

func sum(l v1.ResourceList, name v1.ResourceName, q resource.Quantity) {
	if cur, ok := l[name]; ok {
		cur.Add(q)
		l[name] = cur
		return
	}
	l[name] = q.DeepCopy()
}
