package containerspec

import (
	"fmt"
	"math"
	"os/user"
	"strconv"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/podvisor/podvisor/internal/runtime"
)

// VerifyRunAsNonRoot refuses a container that must not run as root but
// would, as the kubelet's (kubernetes/kubernetes
// pkg/kubelet/kuberuntime/security_context_others.go verifyRunAsNonRoot):
// runAsUser decides when set (container's over pod's), else the image's
// user — a uid, a name (which cannot be checked), or none: root. Without
// images there is no image user: an unset runAsUser means root.
func VerifyRunAsNonRoot(pod *v1.Pod, c *v1.Container, imageUser string) error {
	uid, _, nonRoot := effectiveIdentity(pod, c)
	if nonRoot == nil || !*nonRoot {
		return nil
	}
	podRef := fmt.Sprintf("%s_%s(%s)", pod.Name, pod.Namespace, pod.UID)
	if uid != nil {
		if *uid == 0 {
			return ConfigError{fmt.Sprintf("container's runAsUser breaks non-root policy (pod: %q, container: %s)", podRef, c.Name)}
		}
		return nil
	}
	if imageUser == "" {
		imageUser = "0"
	}
	id, err := strconv.ParseInt(imageUser, 10, 64)
	switch {
	case err != nil:
		return ConfigError{fmt.Sprintf("container has runAsNonRoot and image has non-numeric user (%s), cannot verify user is non-root (pod: %q, container: %s)", imageUser, podRef, c.Name)}
	case id == 0:
		return ConfigError{fmt.Sprintf("container has runAsNonRoot and image will run as root (pod: %q, container: %s)", podRef, c.Name)}
	}
	if errs := validation.IsValidUserID(id); len(errs) > 0 {
		return ConfigError{fmt.Sprintf("container has runAsNonRoot and image has an invalid user id (%d). (Must be 1-(%d)): %s (pod: %q, container: %s)",
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

// User is the user, group and supplementary groups the container
// runs as (container securityContext over pod's); nil when none is set.
// runAsNonRoot is VerifyRunAsNonRoot's, once the image is known.
func User(pod *v1.Pod, c *v1.Container) (*runtime.Credential, error) {
	uid, gid, _ := effectiveIdentity(pod, c)
	psc := pod.Spec.SecurityContext
	var groups []uint32
	if psc != nil {
		for _, g := range psc.SupplementalGroups {
			groups = append(groups, uint32(g))
		}
		if psc.FSGroup != nil {
			groups = append(groups, uint32(*psc.FSGroup))
		}
	}
	strict := psc != nil && psc.SupplementalGroupsPolicy != nil && *psc.SupplementalGroupsPolicy == v1.SupplementalGroupsPolicyStrict
	if uid == nil && gid == nil && len(groups) == 0 && !strict {
		return nil, nil
	}
	cred := &runtime.Credential{Groups: groups, UIDUnset: uid == nil, GIDUnset: gid == nil,
		StrictGroups: strict}
	if uid != nil {
		cred.UID = uint32(*uid)
	}
	switch {
	case gid != nil:
		cred.GID = uint32(*gid)
	case uid != nil:
		// No image /etc/passwd: the host's says the user's group, else 0 as runc.
		if u, err := user.LookupId(strconv.FormatInt(*uid, 10)); err == nil {
			if g, err := strconv.ParseUint(u.Gid, 10, 32); err == nil {
				cred.GID = uint32(g)
			}
		}
	}
	return cred, nil
}
