package csinode

import "testing"

func TestWithNodeID(t *testing.T) {
	for _, tc := range []struct {
		name, old, driver, id, want string
		changed                     bool
	}{
		{name: "first driver", driver: "a.csi", id: "n1", want: `{"a.csi":"n1"}`, changed: true},
		{name: "second driver, sorted", old: `{"b.csi":"x"}`, driver: "a.csi", id: "n1", want: `{"a.csi":"n1","b.csi":"x"}`, changed: true},
		{name: "same again", old: `{"a.csi":"n1"}`, driver: "a.csi", id: "n1", want: `{"a.csi":"n1"}`},
		{name: "new node ID", old: `{"a.csi":"n0"}`, driver: "a.csi", id: "n1", want: `{"a.csi":"n1"}`, changed: true},
		{name: "remove one of two", old: `{"a.csi":"n1","b.csi":"x"}`, driver: "a.csi", want: `{"b.csi":"x"}`, changed: true},
		{name: "remove the last", old: `{"a.csi":"n1"}`, driver: "a.csi", want: "", changed: true},
		{name: "remove from nothing", driver: "a.csi", want: ""},
		{name: "garbage is replaced", old: `not json`, driver: "a.csi", id: "n1", want: `{"a.csi":"n1"}`, changed: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, changed, err := WithNodeID(tc.old, tc.driver, tc.id)
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want || changed != tc.changed {
				t.Fatalf("WithNodeID(%q, %q, %q) = %q, %v; want %q, %v", tc.old, tc.driver, tc.id, got, changed, tc.want, tc.changed)
			}
		})
	}
}
