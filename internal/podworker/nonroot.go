package podworker

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"
)

// verifyRunAsNonRoot refuses a container that must not run as root but
// would, as the kubelet's (kubernetes/kubernetes
// pkg/kubelet/kuberuntime/security_context_others.go verifyRunAsNonRoot):
// runAsUser decides when set (container's over pod's), else the image's
// user — a uid, a name (which cannot be checked), or none: root. Without
// images there is no image user: an unset runAsUser means root.
func verifyRunAsNonRoot(pod *v1.Pod, c *v1.Container, imageUser string) error {
	uid, _, nonRoot := effectiveIdentity(pod, c)
	if nonRoot == nil || !*nonRoot {
		return nil
	}
	podRef := fmt.Sprintf("%s_%s(%s)", pod.Name, pod.Namespace, pod.UID)
	if uid != nil {
		if *uid == 0 {
			return configError{fmt.Sprintf("container's runAsUser breaks non-root policy (pod: %q, container: %s)", podRef, c.Name)}
		}
		return nil
	}
	if imageUser == "" {
		imageUser = "0"
	}
	id, err := strconv.ParseInt(imageUser, 10, 64)
	switch {
	case err != nil:
		return configError{fmt.Sprintf("container has runAsNonRoot and image has non-numeric user (%s), cannot verify user is non-root (pod: %q, container: %s)", imageUser, podRef, c.Name)}
	case id == 0:
		return configError{fmt.Sprintf("container has runAsNonRoot and image will run as root (pod: %q, container: %s)", podRef, c.Name)}
	}
	if errs := validation.IsValidUserID(id); len(errs) > 0 {
		return configError{fmt.Sprintf("container has runAsNonRoot and image has an invalid user id (%d). (Must be 1-(%d)): %s (pod: %q, container: %s)",
			id, math.MaxInt32, strings.Join(errs, "; "), podRef, c.Name)}
	}
	return nil
}

// effectiveIdentity is runAsUser, runAsGroup and runAsNonRoot of the
// container's securityContext, each over the pod's.
func effectiveIdentity(pod *v1.Pod, c *v1.Container) (uid, gid *int64, nonRoot *bool) {
	if psc := pod.Spec.SecurityContext; psc != nil {
		uid, gid, nonRoot = psc.RunAsUser, psc.RunAsGroup, psc.RunAsNonRoot
	}
	if sc := c.SecurityContext; sc != nil {
		if sc.RunAsUser != nil {
			uid = sc.RunAsUser
		}
		if sc.RunAsGroup != nil {
			gid = sc.RunAsGroup
		}
		if sc.RunAsNonRoot != nil {
			nonRoot = sc.RunAsNonRoot
		}
	}
	return uid, gid, nonRoot
}
