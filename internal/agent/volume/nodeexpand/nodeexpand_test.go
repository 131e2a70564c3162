package nodeexpand

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func storage(q string) v1.ResourceList {
	return v1.ResourceList{v1.ResourceStorage: resource.MustParse(q)}
}

func csiPV(size string) *v1.PersistentVolume {
	return &v1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: "pv1"}, Spec: v1.PersistentVolumeSpec{Capacity: storage(size),
		PersistentVolumeSource: v1.PersistentVolumeSource{CSI: &v1.CSIPersistentVolumeSource{Driver: "d", VolumeHandle: "h"}}}}
}

func claim(capacity string, status v1.ClaimResourceStatus, allocated string) *v1.PersistentVolumeClaim {
	c := &v1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "c"}, Status: v1.PersistentVolumeClaimStatus{
		Phase: v1.ClaimBound, Capacity: storage(capacity)}}
	if status != "" {
		c.Status.AllocatedResourceStatuses = map[v1.ResourceName]v1.ClaimResourceStatus{v1.ResourceStorage: status}
	}
	if allocated != "" {
		c.Status.AllocatedResources = storage(allocated)
	}
	return c
}

func TestDecide(t *testing.T) {
	hostPath := &v1.PersistentVolume{Spec: v1.PersistentVolumeSpec{Capacity: storage("2Gi"),
		PersistentVolumeSource: v1.PersistentVolumeSource{HostPath: &v1.HostPathVolumeSource{Path: "/x"}}}}
	local := &v1.PersistentVolume{Spec: v1.PersistentVolumeSpec{Capacity: storage("2Gi"),
		PersistentVolumeSource: v1.PersistentVolumeSource{Local: &v1.LocalVolumeSource{Path: "/x"}}}}
	for _, tc := range []struct {
		name     string
		pvc      *v1.PersistentVolumeClaim
		pv       *v1.PersistentVolume
		readOnly bool
		mounted  string // the node's recorded size; "" unknown
		want     Action
		size     string
		mark     bool
		done     bool // ClaimDone
	}{
		{name: "no claim", pv: csiPV("2Gi"), want: Nothing},
		{name: "no PV", pvc: claim("1Gi", "", ""), want: Nothing},
		{name: "hostPath PV: nothing to grow on the node", pvc: claim("1Gi", v1.PersistentVolumeClaimNodeResizePending, "2Gi"), pv: hostPath, want: Nothing},
		{name: "local PV: nothing to grow on the node", pvc: claim("1Gi", v1.PersistentVolumeClaimNodeResizePending, "2Gi"), pv: local, want: Nothing},
		{name: "read-only mount is never resized", pvc: claim("1Gi", v1.PersistentVolumeClaimNodeResizePending, "2Gi"), pv: csiPV("2Gi"), readOnly: true, want: Nothing},
		{name: "sizes agree", pvc: claim("1Gi", "", ""), pv: csiPV("1Gi"), want: Nothing},
		{name: "PV smaller than the claim's status", pvc: claim("2Gi", "", ""), pv: csiPV("1Gi"), want: Nothing},
		{name: "no status capacity yet", pvc: &v1.PersistentVolumeClaim{}, pv: csiPV("1Gi"), want: Nothing},
		{name: "older resize controller: the PV's size", pvc: claim("1Gi", "", ""), pv: csiPV("2Gi"), want: Expand, size: "2Gi"},
		{name: "NodeResizePending: the allocated size, marked in progress first", pvc: claim("1Gi", v1.PersistentVolumeClaimNodeResizePending, "2Gi"), pv: csiPV("2Gi"), want: Expand, size: "2Gi", mark: true},
		{name: "NodeResizeInProgress (a retry): expanded again, not marked again", pvc: claim("1Gi", v1.PersistentVolumeClaimNodeResizeInProgress, "2Gi"), pv: csiPV("2Gi"), want: Expand, size: "2Gi"},
		{name: "allocated size wins over the PV's", pvc: claim("1Gi", v1.PersistentVolumeClaimNodeResizePending, "3Gi"), pv: csiPV("4Gi"), want: Expand, size: "3Gi", mark: true},
		{name: "no allocated size: the PV's", pvc: claim("1Gi", v1.PersistentVolumeClaimNodeResizePending, ""), pv: csiPV("2Gi"), want: Expand, size: "2Gi", mark: true},
		{name: "controller still resizing", pvc: claim("1Gi", v1.PersistentVolumeClaimControllerResizeInProgress, "2Gi"), pv: csiPV("2Gi"), want: Nothing},
		{name: "controller resize infeasible", pvc: claim("1Gi", v1.PersistentVolumeClaimControllerResizeInfeasible, "2Gi"), pv: csiPV("2Gi"), want: Nothing},
		{name: "node resize infeasible: not tried again", pvc: claim("1Gi", v1.PersistentVolumeClaimNodeResizeInfeasible, "2Gi"), pv: csiPV("2Gi"), want: Nothing},
		{name: "allocated but no resize status: done by the controller", pvc: claim("1Gi", "", "2Gi"), pv: csiPV("2Gi"), want: Nothing},
		{name: "claim done, the node's mount older: grown, claim left alone", pvc: claim("2Gi", "", "2Gi"), pv: csiPV("2Gi"), mounted: "1Gi", want: Expand, size: "2Gi", done: true},
		{name: "claim done, the node's mount as large", pvc: claim("2Gi", "", ""), pv: csiPV("2Gi"), mounted: "2Gi", want: Nothing},
		{name: "claim done, the node's size unknown", pvc: claim("2Gi", "", ""), pv: csiPV("2Gi"), want: Nothing},
		{name: "claim done, the node's mount older, read-only", pvc: claim("2Gi", "", ""), pv: csiPV("2Gi"), mounted: "1Gi", readOnly: true, want: Nothing},
		{name: "node resize infeasible, the node's mount older: not tried again", pvc: claim("2Gi", v1.PersistentVolumeClaimNodeResizeInfeasible, "3Gi"), pv: csiPV("2Gi"), mounted: "1Gi", want: Nothing},
		{name: "the node's mount older and a resize pending: the claim's resize", pvc: claim("1Gi", v1.PersistentVolumeClaimNodeResizePending, "2Gi"), pv: csiPV("2Gi"), mounted: "1Gi", want: Expand, size: "2Gi", mark: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var mounted resource.Quantity
			if tc.mounted != "" {
				mounted = resource.MustParse(tc.mounted)
			}
			d := Decide(tc.pvc, tc.pv, tc.readOnly, mounted)
			if d.Action != tc.want || d.MarkInProgress != tc.mark || d.ClaimDone != tc.done {
				t.Fatalf("Decide = %+v, want action %d mark %v claim done %v", d, tc.want, tc.mark, tc.done)
			}
			if tc.want == Nothing && d.Why == "" {
				t.Errorf("Nothing without a reason")
			}
			if tc.size != "" && d.NewSize.Cmp(resource.MustParse(tc.size)) != 0 {
				t.Errorf("NewSize = %s, want %s", d.NewSize.String(), tc.size)
			}
		})
	}
}

func TestStatuses(t *testing.T) {
	now := metav1.NewTime(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	earlier := metav1.NewTime(now.Add(-time.Hour))
	other := v1.PersistentVolumeClaimCondition{Type: "Other", Status: v1.ConditionTrue}
	pending := v1.PersistentVolumeClaimCondition{Type: v1.PersistentVolumeClaimFileSystemResizePending, Status: v1.ConditionTrue}
	nodeErr := v1.PersistentVolumeClaimCondition{Type: v1.PersistentVolumeClaimNodeResizeError, Status: v1.ConditionTrue, Message: "old", LastTransitionTime: earlier}
	base := claim("1Gi", v1.PersistentVolumeClaimNodeResizePending, "2Gi")
	base.Status.Conditions = []v1.PersistentVolumeClaimCondition{other, pending}
	base.Status.AllocatedResourceStatuses["example.com/other"] = v1.PersistentVolumeClaimNodeResizePending
	boom := status.Error(codes.Internal, "boom")

	withStatus := func(c *v1.PersistentVolumeClaim, f func(*v1.PersistentVolumeClaimStatus)) *v1.PersistentVolumeClaim {
		c = c.DeepCopy()
		f(&c.Status)
		return c
	}
	for _, tc := range []struct {
		name string
		got  *v1.PersistentVolumeClaim
		want *v1.PersistentVolumeClaim
	}{
		{name: "in progress", got: InProgress(base), want: withStatus(base, func(s *v1.PersistentVolumeClaimStatus) {
			s.AllocatedResourceStatuses[v1.ResourceStorage] = v1.PersistentVolumeClaimNodeResizeInProgress
		})},
		{name: "in progress without statuses", got: InProgress(claim("1Gi", "", "")), want: claim("1Gi", v1.PersistentVolumeClaimNodeResizeInProgress, "")},
		{name: "finished: capacity, storage status and resize conditions", got: Finished(base, resource.MustParse("2Gi")), want: withStatus(base, func(s *v1.PersistentVolumeClaimStatus) {
			s.Capacity = storage("2Gi")
			delete(s.AllocatedResourceStatuses, v1.ResourceStorage)
			s.Conditions = []v1.PersistentVolumeClaimCondition{other}
		})},
		{name: "finished: the last status goes with its map", got: Finished(claim("1Gi", v1.PersistentVolumeClaimNodeResizeInProgress, "2Gi"), resource.MustParse("2Gi")),
			want: claim("2Gi", "", "2Gi")},
		{name: "failed: NodeResizeError added", got: Failed(base, boom, false, now), want: withStatus(base, func(s *v1.PersistentVolumeClaimStatus) {
			s.Conditions = append(s.Conditions, v1.PersistentVolumeClaimCondition{Type: v1.PersistentVolumeClaimNodeResizeError, Status: v1.ConditionTrue,
				LastTransitionTime: now, Message: "failed to expand pvc with " + boom.Error()})
		})},
		{name: "failed again: the condition as it was", got: Failed(withStatus(base, func(s *v1.PersistentVolumeClaimStatus) { s.Conditions = append(s.Conditions, nodeErr) }), boom, false, now),
			want: withStatus(base, func(s *v1.PersistentVolumeClaimStatus) { s.Conditions = append(s.Conditions, nodeErr) })},
		{name: "failed, infeasible: NodeResizeInfeasible", got: Failed(base, boom, true, now), want: withStatus(base, func(s *v1.PersistentVolumeClaimStatus) {
			s.AllocatedResourceStatuses[v1.ResourceStorage] = v1.PersistentVolumeClaimNodeResizeInfeasible
			s.Conditions = append(s.Conditions, v1.PersistentVolumeClaimCondition{Type: v1.PersistentVolumeClaimNodeResizeError, Status: v1.ConditionTrue,
				LastTransitionTime: now, Message: "failed to expand pvc with " + boom.Error()})
		})},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if !equality.Semantic.DeepEqual(tc.got, tc.want) {
				t.Errorf("got status\n%+v\nwant\n%+v", tc.got.Status, tc.want.Status)
			}
		})
	}
	if base.Status.AllocatedResourceStatuses[v1.ResourceStorage] != v1.PersistentVolumeClaimNodeResizePending || len(base.Status.Conditions) != 2 {
		t.Errorf("the input claim was changed: %+v", base.Status)
	}
}

func TestInfeasible(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{status.Error(codes.OutOfRange, "too big"), true},
		{status.Error(codes.InvalidArgument, "bad"), true},
		{fmt.Errorf("NodeExpandVolume h: %w", status.Error(codes.NotFound, "gone")), true},
		{status.Error(codes.Internal, "boom"), false},
		{status.Error(codes.FailedPrecondition, "in use"), false},
		{errors.New("not a gRPC error"), false},
	} {
		if got := Infeasible(tc.err); got != tc.want {
			t.Errorf("Infeasible(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}

func TestMessages(t *testing.T) {
	if got, want := SucceededMessage("pv1", "node1"), `MountVolume.NodeExpandVolume succeeded for volume "pv1" node1`; got != want {
		t.Errorf("SucceededMessage = %q, want %q", got, want)
	}
	if got, want := FailedMessage("pv1", errors.New("boom")), `NodeExpandVolume.NodeExpandVolume failed for volume "pv1" : boom`; got != want {
		t.Errorf("FailedMessage = %q, want %q", got, want)
	}
}
