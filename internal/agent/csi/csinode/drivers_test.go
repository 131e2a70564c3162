package csinode

import (
	"math"
	"testing"

	"github.com/google/go-cmp/cmp"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/utils/ptr"
)

func TestDriver(t *testing.T) {
	for _, tc := range []struct {
		name string
		max  int64
		topo map[string]string
		want storagev1.CSINodeDriver
	}{
		{name: "no limit, no topology", want: storagev1.CSINodeDriver{Name: "d", NodeID: "n"}},
		{name: "limit and sorted topology keys", max: 16, topo: map[string]string{"z": "1", "a": "2"},
			want: storagev1.CSINodeDriver{Name: "d", NodeID: "n", TopologyKeys: []string{"a", "z"},
				Allocatable: &storagev1.VolumeNodeResources{Count: ptr.To[int32](16)}}},
		{name: "limit past int32 is capped", max: math.MaxInt32 + 5,
			want: storagev1.CSINodeDriver{Name: "d", NodeID: "n", Allocatable: &storagev1.VolumeNodeResources{Count: ptr.To[int32](math.MaxInt32)}}},
		{name: "negative limit is not written", max: -1, want: storagev1.CSINodeDriver{Name: "d", NodeID: "n"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Driver("d", "n", tc.max, tc.topo)
			if tc.want.TopologyKeys == nil {
				tc.want.TopologyKeys = []string{}
			}
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Fatalf("Driver (-want +got):\n%s", d)
			}
		})
	}
}

func TestWithDriver(t *testing.T) {
	a := Driver("a", "n1", 0, map[string]string{"zone": "z"})
	b := Driver("b", "n1", 4, nil)
	for _, tc := range []struct {
		name        string
		drivers     []storagev1.CSINodeDriver
		add         storagev1.CSINodeDriver
		want        []storagev1.CSINodeDriver
		wantChanged bool
	}{
		{name: "added to empty", add: a, want: []storagev1.CSINodeDriver{a}, wantChanged: true},
		{name: "same entry: unchanged", drivers: []storagev1.CSINodeDriver{a, b}, add: Driver("a", "n1", 0, map[string]string{"zone": "other value"}),
			want: []storagev1.CSINodeDriver{a, b}},
		{name: "new node ID replaces the entry, at the end", drivers: []storagev1.CSINodeDriver{a, b}, add: Driver("a", "n2", 0, nil),
			want: []storagev1.CSINodeDriver{b, Driver("a", "n2", 0, nil)}, wantChanged: true},
		{name: "new limit replaces the entry", drivers: []storagev1.CSINodeDriver{b}, add: Driver("b", "n1", 8, nil),
			want: []storagev1.CSINodeDriver{Driver("b", "n1", 8, nil)}, wantChanged: true},
		{name: "limit removed replaces the entry", drivers: []storagev1.CSINodeDriver{b}, add: Driver("b", "n1", 0, nil),
			want: []storagev1.CSINodeDriver{Driver("b", "n1", 0, nil)}, wantChanged: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, changed := WithDriver(tc.drivers, tc.add)
			if changed != tc.wantChanged {
				t.Errorf("changed = %v, want %v", changed, tc.wantChanged)
			}
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Errorf("drivers (-want +got):\n%s", d)
			}
		})
	}
}

func TestWithoutDriver(t *testing.T) {
	a, b := Driver("a", "n", 0, nil), Driver("b", "n", 0, nil)
	in := []storagev1.CSINodeDriver{a, b}
	got, changed := WithoutDriver(in, "a")
	if !changed || !cmp.Equal(got, []storagev1.CSINodeDriver{b}) {
		t.Fatalf("WithoutDriver(a) = %v, %v", got, changed)
	}
	if !cmp.Equal(in, []storagev1.CSINodeDriver{a, b}) {
		t.Fatalf("input was changed: %v", in)
	}
	if _, changed := WithoutDriver(in, "c"); changed {
		t.Fatal("removing a missing driver reported a change")
	}
}
