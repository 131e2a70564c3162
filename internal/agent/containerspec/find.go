package containerspec

import v1 "k8s.io/api/core/v1"

// Find is the spec of the pod's container name: an init, regular or
// ephemeral one (whose fields are a container's).
func Find(pod *v1.Pod, name string) (*v1.Container, bool) {
	for i := range pod.Spec.InitContainers {
		if pod.Spec.InitContainers[i].Name == name {
			return &pod.Spec.InitContainers[i], true
		}
	}
	for i := range pod.Spec.Containers {
		if pod.Spec.Containers[i].Name == name {
			return &pod.Spec.Containers[i], true
		}
	}
	for i := range pod.Spec.EphemeralContainers {
		if e := &pod.Spec.EphemeralContainers[i]; e.Name == name {
			return (*v1.Container)(&e.EphemeralContainerCommon), true
		}
	}
	return nil, false
}
