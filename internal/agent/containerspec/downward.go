package containerspec

import (
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// The downward API: values of the pod (fieldRef) and of a container's
// resources (resourceFieldRef), for env and for downwardAPI volumes alike.

// FieldValue resolves a fieldRef path as the kubelet does. Pods share the
// host network here, so the pod IPs are the host IPs.
func FieldValue(pod *v1.Pod, path, hostIP, podIP string) (string, error) {
	switch path {
	case "metadata.name":
		return pod.Name, nil
	case "metadata.namespace":
		return pod.Namespace, nil
	case "metadata.uid":
		return string(pod.UID), nil
	case "metadata.labels":
		return formatMap(pod.Labels), nil
	case "metadata.annotations":
		return formatMap(pod.Annotations), nil
	case "spec.nodeName":
		return pod.Spec.NodeName, nil
	case "spec.serviceAccountName":
		return pod.Spec.ServiceAccountName, nil
	case "status.hostIP", "status.hostIPs":
		// One IP: the list joined with "," is that one IP.
		return hostIP, nil
	case "status.podIP", "status.podIPs":
		return podIP, nil
	}
	for _, prefix := range []string{"metadata.labels", "metadata.annotations"} {
		if rest, ok := strings.CutPrefix(path, prefix+"['"); ok && strings.HasSuffix(rest, "']") {
			key := strings.TrimSuffix(rest, "']")
			if prefix == "metadata.labels" {
				return pod.Labels[key], nil
			}
			return pod.Annotations[key], nil
		}
	}
	return "", ConfigError{fmt.Sprintf("unsupported fieldPath: %v", path)}
}

// formatMap is upstream's rendering of all labels or annotations: sorted
// key="quoted value" lines.
func formatMap(m map[string]string) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for i, k := range keys {
		if i > 0 {
			b.WriteByte('\n')
		}
		fmt.Fprintf(&b, "%v=%q", k, m[k])
	}
	return b.String()
}

// ResourceValue resolves a resourceFieldRef against container c (or the one
// the ref names). Limits that are not set are the node's allocatable, as
// upstream's defaultPodLimitsForDownwardAPI; requests that are not set are 0.
func ResourceValue(pod *v1.Pod, c *v1.Container, ref *v1.ResourceFieldSelector, allocatable v1.ResourceList) (string, error) {
	target := c
	if ref.ContainerName != "" {
		t, ok := Find(pod, ref.ContainerName)
		if !ok {
			return "", ConfigError{fmt.Sprintf("container %s not found", ref.ContainerName)}
		}
		target = t
	}
	if target == nil {
		return "", ConfigError{"resourceFieldRef: containerName is required"}
	}
	divisor := ref.Divisor
	if divisor.IsZero() {
		divisor = resource.MustParse("1")
	}
	kind, name, ok := strings.Cut(ref.Resource, ".")
	if !ok || (kind != "limits" && kind != "requests") {
		return "", ConfigError{fmt.Sprintf("unsupported container resource : %v", ref.Resource)}
	}
	rn := v1.ResourceName(name)
	switch {
	case rn == v1.ResourceCPU, rn == v1.ResourceMemory, rn == v1.ResourceEphemeralStorage, strings.HasPrefix(name, v1.ResourceHugePagesPrefix):
	default:
		return "", ConfigError{fmt.Sprintf("unsupported container resource : %v", ref.Resource)}
	}
	list := target.Resources.Requests
	if kind == "limits" {
		list = target.Resources.Limits
	}
	q, set := list[rn]
	if !set && kind == "limits" && !strings.HasPrefix(name, v1.ResourceHugePagesPrefix) {
		q = allocatable[rn]
	}
	if rn == v1.ResourceCPU {
		return strconv.FormatInt(int64(math.Ceil(float64(q.MilliValue())/float64(divisor.MilliValue()))), 10), nil
	}
	return strconv.FormatInt(int64(math.Ceil(float64(q.Value())/float64(divisor.Value()))), 10), nil
}
