package podsecurity

import (
	"fmt"
	"os"
	"strings"

	v1 "k8s.io/api/core/v1"

	"github.com/podvisor/podvisor/internal/runtime"
)

// ReasonAppArmor is the admission reason of a pod whose AppArmor profile
// the node cannot enforce (upstream's).
const ReasonAppArmor = "AppArmor"

// AppArmorEnabled reports whether the host's kernel enforces AppArmor.
func AppArmorEnabled() bool {
	b, err := os.ReadFile("/sys/module/apparmor/parameters/enabled")
	return err == nil && strings.HasPrefix(string(b), "Y")
}

// AdmitAppArmor refuses a pod that asks for an AppArmor profile (other than
// Unconfined, in its fields or the deprecated annotations) on a host
// without AppArmor, or names an empty Localhost profile — the kubelet's
// check, with its message. Only pending pods are checked.
func AdmitAppArmor(pod *v1.Pod, hostEnabled bool) (message string, ok bool) {
	if pod.Status.Phase != "" && pod.Status.Phase != v1.PodPending {
		return "", true
	}
	if !appArmorRequired(pod) {
		return "", true
	}
	if !hostEnabled {
		return "Cannot enforce AppArmor: AppArmor is not enabled on the host", false
	}
	for _, c := range allContainers(pod) {
		if p := appArmorProfile(pod, c); p != nil && p.Type == v1.AppArmorProfileTypeLocalhost &&
			(p.LocalhostProfile == nil || strings.TrimSpace(*p.LocalhostProfile) == "") {
			return fmt.Sprintf("Cannot enforce AppArmor: invalid empty AppArmor profile name: %q", p), false
		}
	}
	return "", true
}

func appArmorRequired(pod *v1.Pod) bool {
	if psc := pod.Spec.SecurityContext; psc != nil && psc.AppArmorProfile != nil && psc.AppArmorProfile.Type != v1.AppArmorProfileTypeUnconfined {
		return true
	}
	for _, c := range allContainers(pod) {
		if sc := c.SecurityContext; sc != nil && sc.AppArmorProfile != nil && sc.AppArmorProfile.Type != v1.AppArmorProfileTypeUnconfined {
			return true
		}
	}
	for k, v := range pod.Annotations {
		if strings.HasPrefix(k, v1.DeprecatedAppArmorBetaContainerAnnotationKeyPrefix) {
			return v != v1.DeprecatedAppArmorBetaProfileNameUnconfined
		}
	}
	return false
}

// appArmorProfile is container c's profile: its own, else its deprecated
// annotation, else the pod's; nil: none set.
func appArmorProfile(pod *v1.Pod, c *v1.Container) *v1.AppArmorProfile {
	if sc := c.SecurityContext; sc != nil && sc.AppArmorProfile != nil {
		return sc.AppArmorProfile
	}
	if v, ok := pod.Annotations[v1.DeprecatedAppArmorBetaContainerAnnotationKeyPrefix+c.Name]; ok {
		switch {
		case v == v1.DeprecatedAppArmorBetaProfileRuntimeDefault:
			return &v1.AppArmorProfile{Type: v1.AppArmorProfileTypeRuntimeDefault}
		case v == v1.DeprecatedAppArmorBetaProfileNameUnconfined:
			return &v1.AppArmorProfile{Type: v1.AppArmorProfileTypeUnconfined}
		case strings.HasPrefix(v, v1.DeprecatedAppArmorBetaProfileNamePrefix):
			name := strings.TrimPrefix(v, v1.DeprecatedAppArmorBetaProfileNamePrefix)
			return &v1.AppArmorProfile{Type: v1.AppArmorProfileTypeLocalhost, LocalhostProfile: &name}
		}
		return nil
	}
	if psc := pod.Spec.SecurityContext; psc != nil {
		return psc.AppArmorProfile
	}
	return nil
}

// appArmor is the runtime's profile of container c; the zero value when
// none is set (the runtime's default on an AppArmor host).
func appArmor(pod *v1.Pod, c *v1.Container) runtime.SecurityProfile {
	p := appArmorProfile(pod, c)
	if p == nil {
		return runtime.SecurityProfile{}
	}
	out := runtime.SecurityProfile{Type: string(p.Type)}
	if p.LocalhostProfile != nil {
		out.Path = *p.LocalhostProfile // a profile name loaded in the kernel
	}
	return out
}

func allContainers(pod *v1.Pod) []*v1.Container {
	var out []*v1.Container
	for i := range pod.Spec.InitContainers {
		out = append(out, &pod.Spec.InitContainers[i])
	}
	for i := range pod.Spec.Containers {
		out = append(out, &pod.Spec.Containers[i])
	}
	for i := range pod.Spec.EphemeralContainers {
		out = append(out, (*v1.Container)(&pod.Spec.EphemeralContainers[i].EphemeralContainerCommon))
	}
	return out
}
