package localpath

import (
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

func TestForNode(t *testing.T) {
	for _, tc := range []struct {
		ann  map[string]string
		want bool
	}{
		{map[string]string{annSelectedNode: "n1"}, true},
		{map[string]string{annSelectedNode: "n2"}, false},
		{nil, false},
	} {
		pvc := &v1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Annotations: tc.ann}}
		if got := forNode(pvc, "n1"); got != tc.want {
			t.Errorf("forNode(%v) = %v, want %v", tc.ann, got, tc.want)
		}
	}
}

func TestOwnedBy(t *testing.T) {
	pv := func(node, by, path string) *v1.PersistentVolume {
		return &v1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: "pv", Annotations: map[string]string{annNode: node, "pv.kubernetes.io/provisioned-by": by}},
			Spec: v1.PersistentVolumeSpec{PersistentVolumeSource: v1.PersistentVolumeSource{HostPath: &v1.HostPathVolumeSource{Path: path}}}}
	}
	for _, tc := range []struct {
		name string
		pv   *v1.PersistentVolume
		want bool
	}{
		{"ours", pv("n1", ProvisionerName, "/data/storage/pvc-1_ns_c"), true},
		{"another node's", pv("n2", ProvisionerName, "/data/storage/pvc-1_ns_c"), false},
		{"another provisioner's", pv("n1", "example.com/x", "/data/storage/pvc-1_ns_c"), false},
		{"outside the root", pv("n1", ProvisionerName, "/etc"), false},
		{"the root itself", pv("n1", ProvisionerName, "/data/storage"), false},
		{"below a volume", pv("n1", ProvisionerName, "/data/storage/pvc-1_ns_c/sub"), false},
		{"dot-dot", pv("n1", ProvisionerName, "/data/storage/../etc"), false},
		{"no source", &v1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{annNode: "n1", "pv.kubernetes.io/provisioned-by": ProvisionerName}}}, false},
	} {
		if got := ownedBy(tc.pv, "n1", "/data/storage"); got != tc.want {
			t.Errorf("%s: ownedBy = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestVolumeFor(t *testing.T) {
	claim := func(mut ...func(*v1.PersistentVolumeClaim)) *v1.PersistentVolumeClaim {
		c := &v1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "data-web-0"},
			Spec: v1.PersistentVolumeClaimSpec{AccessModes: []v1.PersistentVolumeAccessMode{v1.ReadWriteOnce},
				Resources: v1.VolumeResourceRequirements{Requests: v1.ResourceList{v1.ResourceStorage: resource.MustParse("1Gi")}}}}
		for _, m := range mut {
			m(c)
		}
		return c
	}
	class := DefaultStorageClass()
	retain := DefaultStorageClass()
	retain.ReclaimPolicy = ptr.To(v1.PersistentVolumeReclaimRetain)
	localClass := DefaultStorageClass()
	localClass.Parameters = map[string]string{"volumeType": "local"}
	for _, tc := range []struct {
		name     string
		pvc      *v1.PersistentVolumeClaim
		class    *storagev1.StorageClass
		wantKind string
		reclaim  v1.PersistentVolumeReclaimPolicy
		wantErr  string
	}{
		{name: "hostPath by default", pvc: claim(), class: class, wantKind: "hostPath", reclaim: v1.PersistentVolumeReclaimDelete},
		{name: "class reclaim Retain", pvc: claim(), class: retain, wantKind: "hostPath", reclaim: v1.PersistentVolumeReclaimRetain},
		{name: "local from the class", pvc: claim(), class: localClass, wantKind: "local", reclaim: v1.PersistentVolumeReclaimDelete},
		{name: "local from the claim", pvc: claim(func(c *v1.PersistentVolumeClaim) { c.Annotations = map[string]string{"volumeType": "local"} }),
			class: class, wantKind: "local", reclaim: v1.PersistentVolumeReclaimDelete},
		{name: "unknown type", pvc: claim(func(c *v1.PersistentVolumeClaim) { c.Annotations = map[string]string{"volumeType": "nfs"} }),
			class: class, wantErr: `volumeType "nfs" is not supported`},
		{name: "block", pvc: claim(func(c *v1.PersistentVolumeClaim) { c.Spec.VolumeMode = ptr.To(v1.PersistentVolumeBlock) }),
			class: class, wantErr: "not Block"},
		{name: "selector", pvc: claim(func(c *v1.PersistentVolumeClaim) {
			c.Spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"a": "b"}}
		}), class: class, wantErr: "selector"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pv, dir, err := volumeFor(Request{PVName: "pvc-1", PVC: tc.pvc, Class: tc.class, Node: "n1", Root: "/data/storage"})
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if dir != "/data/storage/pvc-1_ns_data-web-0" {
				t.Errorf("dir = %s", dir)
			}
			got := "hostPath"
			if pv.Spec.Local != nil {
				got = "local"
			}
			if got != tc.wantKind {
				t.Errorf("kind = %s, want %s", got, tc.wantKind)
			}
			if p, err := volumeDir(pv, "/data/storage"); err != nil || p != dir {
				t.Errorf("volumeDir = %q, %v; want %s", p, err, dir)
			}
			if pv.Spec.PersistentVolumeReclaimPolicy != tc.reclaim {
				t.Errorf("reclaim = %s, want %s", pv.Spec.PersistentVolumeReclaimPolicy, tc.reclaim)
			}
			if q := pv.Spec.Capacity[v1.ResourceStorage]; q.String() != "1Gi" {
				t.Errorf("capacity = %s", q.String())
			}
			terms := pv.Spec.NodeAffinity.Required.NodeSelectorTerms
			if len(terms) != 1 || terms[0].MatchExpressions[0].Key != v1.LabelHostname || terms[0].MatchExpressions[0].Values[0] != "n1" {
				t.Errorf("node affinity = %+v", terms)
			}
			if pv.Annotations[annNode] != "n1" {
				t.Errorf("annotations = %v", pv.Annotations)
			}
			// The library adds provisioned-by; with it the PV is this node's.
			pv.Annotations["pv.kubernetes.io/provisioned-by"] = ProvisionerName
			if !ownedBy(pv, "n1", "/data/storage") || ownedBy(pv, "n2", "/data/storage") {
				t.Error("a provisioned PV should be owned by its node only")
			}
		})
	}
}
