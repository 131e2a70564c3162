// Package podref makes the object references that events about a pod's
// containers point at, as the kubelet's do: the pod, with the container's
// field path ("spec.containers{app}"), so that kubectl describe and
// `kubectl get events` say which container an event is about.
package podref

import (
	v1 "k8s.io/api/core/v1"
)

// Container is the reference of container name of pod: its field path
// names the list it is in (containers, initContainers or
// ephemeralContainers); a name in none of them gets spec.containers. An
// empty name is the pod itself: no field path.
func Container(pod *v1.Pod, name string) *v1.ObjectReference {
	ref := &v1.ObjectReference{
		Kind:            "Pod",
		APIVersion:      "v1",
		Namespace:       pod.Namespace,
		Name:            pod.Name,
		UID:             pod.UID,
		ResourceVersion: pod.ResourceVersion,
	}
	if name != "" {
		ref.FieldPath = FieldPath(&pod.Spec, name)
	}
	return ref
}

// FieldPath is the field path of container name in spec.
func FieldPath(spec *v1.PodSpec, name string) string {
	for _, c := range spec.InitContainers {
		if c.Name == name {
			return "spec.initContainers{" + name + "}"
		}
	}
	for _, c := range spec.EphemeralContainers {
		if c.Name == name {
			return "spec.ephemeralContainers{" + name + "}"
		}
	}
	return "spec.containers{" + name + "}"
}
