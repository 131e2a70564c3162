// Package nodeexpand decides the node's part of a volume expansion, as the
// kubelet's volume manager does it for a claim mounted by a running pod:
// whether to call NodeExpandVolume and for what size, and the claim's
// status before and after (node expansion in progress, finished, failed).
// The resize controller (the external-resizer for CSI) grows the volume
// first; the node then grows the filesystem the pod sees. It does no I/O:
// the volume manager reads the claim and its PV, calls the driver and
// writes the statuses this package makes.
package nodeexpand

import (
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Action is what the node does about a claim's size; the zero value is
// unknown.
type Action int

const (
	// Nothing: the sizes agree, expansion is not the node's to do (yet), or
	// not for this kind of volume.
	Nothing Action = iota + 1
	// Expand: call NodeExpandVolume for Decision.NewSize, then write
	// Finished.
	Expand
)

// Decision is what Decide says.
type Decision struct {
	Action Action
	// NewSize is the size to ask the driver for (Expand).
	NewSize resource.Quantity
	// MarkInProgress: write InProgress before the call (a resize
	// controller that keeps allocatedResourceStatuses).
	MarkInProgress bool
	// ClaimDone: the claim's status already has the new size (another node
	// of a ReadWriteMany volume, or an earlier expansion on this one whose
	// record fell behind): the node grows its own mount and writes nothing
	// to the claim, as the kubelet when its recorded size is older.
	ClaimDone bool
	// Why explains Nothing, for logs.
	Why string
}

// Decide says whether the node expands the filesystem of a claim's volume
// mounted by a pod, as upstream: only CSI volumes (hostPath, local and
// local-path volumes have nothing to grow on the node), never a volume the
// pod mounts read-only, and only when the PV has grown past the claim's
// status capacity. With a resize controller that records
// status.allocatedResourceStatuses (external-resizer ≥ 1.x, the
// RecoverVolumeExpansionFailure protocol) the node acts only on
// NodeResizePending (or a NodeResizeInProgress it did not finish), for the
// size in status.allocatedResources; with an older one, whenever the PV is
// larger than the claim's status. mounted is the size this node last
// published or grew the volume at (zero: unknown): when the claim is done
// but the node's mount is smaller than the PV (a ReadWriteMany volume grown
// on another node), the node grows its own mount (ClaimDone).
func Decide(pvc *v1.PersistentVolumeClaim, pv *v1.PersistentVolume, readOnly bool, mounted resource.Quantity) Decision {
	switch {
	case pvc == nil || pv == nil:
		return nothing("no bound claim")
	case pv.Spec.CSI == nil:
		return nothing("not a CSI volume: nothing to expand on the node")
	case readOnly:
		return nothing("mounted read-only")
	}
	pvCap := pv.Spec.Capacity[v1.ResourceStorage]
	statusCap := pvc.Status.Capacity[v1.ResourceStorage]
	if pvCap.IsZero() || statusCap.IsZero() {
		return nothing("sizes unknown")
	}
	resizeStatus := pvc.Status.AllocatedResourceStatuses[v1.ResourceStorage]
	if pvCap.Cmp(statusCap) <= 0 {
		if resizeStatus == "" && !mounted.IsZero() && mounted.Cmp(pvCap) < 0 {
			return Decision{Action: Expand, NewSize: pvCap, ClaimDone: true}
		}
		return nothing("the volume is not larger than the claim's capacity")
	}
	if resizeStatus == "" && pvc.Status.AllocatedResources == nil {
		// An older resize controller: the PV's size is the new size.
		return Decision{Action: Expand, NewSize: pvCap}
	}
	newSize := pvc.Status.AllocatedResources[v1.ResourceStorage]
	if newSize.IsZero() {
		newSize = pvCap
	}
	switch resizeStatus {
	case v1.PersistentVolumeClaimNodeResizePending:
		return Decision{Action: Expand, NewSize: newSize, MarkInProgress: true}
	case v1.PersistentVolumeClaimNodeResizeInProgress:
		return Decision{Action: Expand, NewSize: newSize}
	case "":
		return nothing("no resize in progress")
	}
	return nothing(fmt.Sprintf("resize status %s is not the node's", resizeStatus))
}

func nothing(why string) Decision { return Decision{Action: Nothing, Why: why} }

// resizeConditions are the claim conditions of a resize, which a finished
// node expansion clears (others stay).
var resizeConditions = map[v1.PersistentVolumeClaimConditionType]bool{
	v1.PersistentVolumeClaimFileSystemResizePending: true,
	v1.PersistentVolumeClaimResizing:                true,
	v1.PersistentVolumeClaimControllerResizeError:   true,
	v1.PersistentVolumeClaimNodeResizeError:         true,
}

// InProgress is pvc with the node's expansion marked in progress
// (allocatedResourceStatuses storage: NodeResizeInProgress).
func InProgress(pvc *v1.PersistentVolumeClaim) *v1.PersistentVolumeClaim {
	out := pvc.DeepCopy()
	setResizeStatus(out, v1.PersistentVolumeClaimNodeResizeInProgress)
	return out
}

// Finished is pvc once the node expanded it to size: the status capacity
// is the new size, the storage resize status and every resize condition
// (FileSystemResizePending among them) are gone.
func Finished(pvc *v1.PersistentVolumeClaim, size resource.Quantity) *v1.PersistentVolumeClaim {
	out := pvc.DeepCopy()
	if out.Status.Capacity == nil {
		out.Status.Capacity = v1.ResourceList{}
	}
	out.Status.Capacity[v1.ResourceStorage] = size
	delete(out.Status.AllocatedResourceStatuses, v1.ResourceStorage)
	if len(out.Status.AllocatedResourceStatuses) == 0 {
		out.Status.AllocatedResourceStatuses = nil
	}
	var kept []v1.PersistentVolumeClaimCondition
	for _, c := range out.Status.Conditions {
		if !resizeConditions[c.Type] {
			kept = append(kept, c)
		}
	}
	out.Status.Conditions = kept
	return out
}

// Failed is pvc after NodeExpandVolume failed for good (a final error):
// the NodeResizeError condition (an existing one of the same status is
// kept as it is, as upstream), and for an infeasible size the storage
// resize status NodeResizeInfeasible, which stops the node trying again.
func Failed(pvc *v1.PersistentVolumeClaim, err error, infeasible bool, now metav1.Time) *v1.PersistentVolumeClaim {
	out := pvc.DeepCopy()
	if infeasible {
		setResizeStatus(out, v1.PersistentVolumeClaimNodeResizeInfeasible)
	}
	cond := v1.PersistentVolumeClaimCondition{Type: v1.PersistentVolumeClaimNodeResizeError, Status: v1.ConditionTrue,
		LastTransitionTime: now, Message: fmt.Sprintf("failed to expand pvc with %v", err)}
	for i, c := range out.Status.Conditions {
		if c.Type == cond.Type {
			if c.Status != cond.Status {
				out.Status.Conditions[i] = cond
			}
			return out
		}
	}
	out.Status.Conditions = append(out.Status.Conditions, cond)
	return out
}

func setResizeStatus(pvc *v1.PersistentVolumeClaim, s v1.ClaimResourceStatus) {
	if pvc.Status.AllocatedResourceStatuses == nil {
		pvc.Status.AllocatedResourceStatuses = map[v1.ResourceName]v1.ClaimResourceStatus{}
	}
	pvc.Status.AllocatedResourceStatuses[v1.ResourceStorage] = s
}

// Upstream's event reasons.
const (
	ReasonSucceeded = "FileSystemResizeSuccessful" // on the pod and the claim
	ReasonFailed    = "VolumeResizeFailed"         // on the pod
)

// SucceededMessage is the FileSystemResizeSuccessful event's message, as
// the kubelet's: the PV's name and the node's.
func SucceededMessage(pv, node string) string {
	return fmt.Sprintf("MountVolume.NodeExpandVolume succeeded for volume %q %s", pv, node)
}

// FailedMessage is the VolumeResizeFailed event's message.
func FailedMessage(pv string, err error) string {
	return fmt.Sprintf("NodeExpandVolume.NodeExpandVolume failed for volume %q : %v", pv, err)
}

// Infeasible: the driver said the size cannot be had (InvalidArgument,
// OutOfRange, NotFound), as upstream classifies NodeExpandVolume's errors;
// the node does not try again.
func Infeasible(err error) bool {
	st, ok := status.FromError(err)
	if !ok {
		return false
	}
	switch st.Code() {
	case codes.InvalidArgument, codes.OutOfRange, codes.NotFound:
		return true
	}
	return false
}

// InUse says a failed NodeExpandVolume (FailedPrecondition) means the
// driver cannot grow the volume while it is in use: as the kubelet, the node
// does not try again while the pod has it mounted; the next mount (another
// pod) expands it.
func InUse(err error) bool {
	st, ok := status.FromError(err)
	return ok && st.Code() == codes.FailedPrecondition
}
