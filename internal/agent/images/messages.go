package images

import (
	"fmt"
	"strings"
	"time"
)

// Waiting reasons of a container whose image is not there, as upstream's
// errors of the same names (kubernetes/kubernetes pkg/kubelet/images/types.go,
// v1.36): the kubelet shows the error's text as the reason.
const (
	ReasonErrImagePull      = "ErrImagePull"
	ReasonImagePullBackOff  = "ImagePullBackOff"
	ReasonErrImageNeverPull = "ErrImageNeverPull"
	ReasonInvalidImageName  = "InvalidImageName"
	ReasonImageInspectError = "ImageInspectError"
)

// Event reasons, from kubernetes/kubernetes pkg/kubelet/events/event.go
// (v1.36). A failed pull and the kuberuntime's "Error: …" share "Failed".
const (
	EventPulling           = "Pulling"
	EventPulled            = "Pulled"
	EventFailed            = "Failed"
	EventInspectFailed     = "InspectFailed"
	EventErrImageNeverPull = "ErrImageNeverPull"
	EventBackOff           = "BackOff"
	// EventFailedToRetrievePullSecret is kubelet_pods.go's getPullSecretsForPod.
	EventFailedToRetrievePullSecret = "FailedToRetrieveImagePullSecret"
)

// The messages below are those of kubernetes/kubernetes
// pkg/kubelet/images/image_manager.go (v1.36) unless said otherwise; image
// is the name as the container spec writes it.

func pullingMessage(image string) string { return fmt.Sprintf("Pulling image %q", image) }

// pulledMessage: the pull itself, then the pull with the wait for the
// node's pull slot, both truncated to milliseconds as upstream.
func pulledMessage(image string, pull, total time.Duration, size uint64) string {
	return fmt.Sprintf("Successfully pulled image %q in %v (%v including waiting). Image size: %v bytes.",
		image, pull.Truncate(time.Millisecond), total.Truncate(time.Millisecond), size)
}

// presentMessage is upstream's when it does not verify that the pod may use
// a present image (feature KubeletEnsureSecretPulledImages off); with it on,
// upstream adds " and can be accessed by the pod" — podvisor does not check
// that, so it does not claim it.
// accessibleMessage is presentMessage once the credential check has let
// the pod use the image.
func accessibleMessage(image string) string {
	return fmt.Sprintf("Container image %q already present on machine and can be accessed by the pod", image)
}

func presentMessage(image string) string {
	return fmt.Sprintf("Container image %q already present on machine", image)
}

func pullFailedMessage(image string, err error) string {
	return fmt.Sprintf("Failed to pull image %q: %v", image, err)
}

func backOffMessage(image string) string { return fmt.Sprintf("Back-off pulling image %q", image) }

func neverPullMessage(image string) string {
	return fmt.Sprintf("Container image %q is not present with pull policy of Never", image)
}

func invalidNameMessage(image string, err error) string {
	return fmt.Sprintf("Failed to apply default image tag %q: %v", image, err)
}

// inspectFailedMessage names the image ref upstream found, which is always
// empty when inspecting failed: upstream prints "" there.
func inspectFailedMessage(err error) string {
	return fmt.Sprintf("Failed to inspect image %q: %v", "", err)
}

// MissingPullSecretsMessage is the Warning event of pull secrets the agent
// could not read: kubernetes/kubernetes pkg/kubelet/kubelet_pods.go
// getPullSecretsForPod's.
func MissingPullSecretsMessage(names []string) string {
	return fmt.Sprintf("Unable to retrieve some image pull secrets (%s); attempting to pull the image may not succeed.", strings.Join(names, ", "))
}

// FailedEventMessage is the Warning "Failed" event the kubelet adds for any
// start that failed before creating the container:
// kubernetes/kubernetes pkg/kubelet/kuberuntime/kuberuntime_container.go
// startContainer's "Error: %v" of the reason ("Error: ErrImagePull").
func FailedEventMessage(reason string) string { return "Error: " + reason }
