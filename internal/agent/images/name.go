package images

import (
	"fmt"
	"strings"

	"github.com/distribution/reference"
	v1 "k8s.io/api/core/v1"
)

// Name is a container's image as the agent handles it.
type Name struct {
	// Pull is the image as written, with ":latest" added when it has
	// neither tag nor digest: what the runtime is asked for. A short name
	// stays short, as upstream keeps the CRI free to choose default hosts.
	Pull string
	// Repository is the fully qualified repository
	// ("docker.io/library/busybox"): what pull credentials are matched to.
	Repository string
	Tag        string // "latest" when the image names neither tag nor digest
	Digest     string
}

// ParseName parses image as the kubelet does (kubernetes/kubernetes
// pkg/util/parsers/parsers.go ParseImageName and
// pkg/kubelet/images/image_manager.go applyDefaultImageTag), with the
// distribution library's normalisation (docker.io, library/).
func ParseName(image string) (Name, error) {
	named, err := reference.ParseNormalizedNamed(image)
	if err != nil {
		return Name{}, fmt.Errorf("couldn't parse image name %q: %v", image, err)
	}
	n := Name{Pull: image, Repository: named.Name()}
	if t, ok := named.(reference.Tagged); ok {
		n.Tag = t.Tag()
	}
	if d, ok := named.(reference.Digested); ok {
		n.Digest = d.Digest().String()
	}
	if n.Tag == "" && n.Digest == "" {
		n.Tag = "latest"
	}
	if n.Digest == "" && !strings.HasSuffix(image, ":"+n.Tag) {
		n.Pull = image + ":" + n.Tag
	}
	return n, nil
}

// PullPolicy is the container's imagePullPolicy, or the one API defaulting
// gives it when empty (kubernetes/kubernetes pkg/apis/core/v1/defaults.go
// SetDefaults_Container): Always for the tag latest — named or implied —,
// IfNotPresent otherwise, a digest without tag and a name that does not
// parse included.
func PullPolicy(c *v1.Container) v1.PullPolicy { return defaultPolicy(c.Image, c.ImagePullPolicy) }

// VolumePullPolicy is an image volume's pullPolicy, defaulted from its
// reference as a container's (SetDefaults_ImageVolumeSource).
func VolumePullPolicy(v *v1.ImageVolumeSource) v1.PullPolicy {
	return defaultPolicy(v.Reference, v.PullPolicy)
}

func defaultPolicy(image string, set v1.PullPolicy) v1.PullPolicy {
	if set != "" {
		return set
	}
	if n, err := ParseName(image); err == nil && n.Tag == "latest" {
		return v1.PullAlways
	}
	return v1.PullIfNotPresent
}

// step is what to do about an image. The zero value means unknown.
type step int

const (
	stepUnknown step = iota
	stepUseLocal
	stepPull
	stepNeverPull // absent and may not be pulled: ErrImageNeverPull
)

// decide is the image manager's choice from the pull policy and whether the
// runtime has the image. Always pulls without asking whether it is there,
// and so does a policy upstream does not know.
func decide(policy v1.PullPolicy, present bool) step {
	switch policy {
	case v1.PullIfNotPresent, v1.PullNever:
		if present {
			return stepUseLocal
		}
		if policy == v1.PullNever {
			return stepNeverPull
		}
	}
	return stepPull
}

// needsPresence: the policy asks the runtime whether it has the image.
func needsPresence(policy v1.PullPolicy) bool {
	return policy == v1.PullIfNotPresent || policy == v1.PullNever
}
