package manifests

import (
	"reflect"
	"strings"
	"testing"
)

func TestIsManifest(t *testing.T) {
	for name, want := range map[string]bool{
		"a.yaml": true, "b.yml": true, "c.json": true, "D.YAML": true,
		"e.txt": false, ".a.yaml.swp": false, ".hidden.yaml": false, "f.yaml~": false, "noext": false,
	} {
		if got := IsManifest(name); got != want {
			t.Errorf("IsManifest(%q) = %v, want %v", name, got, want)
		}
	}
}

// At start every file applies; later only those whose contents changed.
func TestChanged(t *testing.T) {
	for _, tc := range []struct {
		name            string
		onDisk, applied map[string]string
		want            []string
	}{
		{"start: all", map[string]string{"b.yaml": "1", "a.yaml": "2"}, map[string]string{}, []string{"a.yaml", "b.yaml"}},
		{"nothing changed", map[string]string{"a.yaml": "1"}, map[string]string{"a.yaml": "1"}, nil},
		{"one changed", map[string]string{"a.yaml": "1", "b.yaml": "3"}, map[string]string{"a.yaml": "1", "b.yaml": "2"}, []string{"b.yaml"}},
		{"a removed file is not to apply", map[string]string{}, map[string]string{"a.yaml": "1"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Changed(tc.onDisk, tc.applied); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("Changed = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestRemovedAndStale(t *testing.T) {
	a := Ref{APIVersion: "v1", Kind: "ConfigMap", Namespace: "default", Name: "a"}
	b := Ref{APIVersion: "v1", Kind: "ConfigMap", Namespace: "default", Name: "b"}
	ns := Ref{APIVersion: "v1", Kind: "Namespace", Name: "x"}
	rec := map[string][]Ref{"gone.yaml": {a}, "kept.yaml": {b}}
	if got := Removed(rec, map[string]string{"kept.yaml": "h"}); !reflect.DeepEqual(got, []string{"gone.yaml"}) {
		t.Errorf("Removed = %v, want [gone.yaml]", got)
	}
	for _, tc := range []struct {
		name        string
		before, now []Ref
		want        []Ref
	}{
		{"first apply", nil, []Ref{a}, nil},
		{"same objects", []Ref{a, ns}, []Ref{ns, a}, nil},
		{"an object left the file", []Ref{a, b, ns}, []Ref{a}, []Ref{b, ns}},
		{"renamed", []Ref{a}, []Ref{b}, []Ref{a}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Stale(tc.before, tc.now); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("Stale = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestOrderPutsNamespacesAndCRDsFirst(t *testing.T) {
	objs, err := Parse([]byte(`
apiVersion: v1
kind: ConfigMap
metadata: {name: cm, namespace: x}
---
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: crd}
---
apiVersion: v1
kind: Namespace
metadata: {name: x}
---
apiVersion: v1
kind: Secret
metadata: {name: s, namespace: x}
`))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, o := range Order(objs) {
		got = append(got, o.GetKind())
	}
	if want := []string{"Namespace", "CustomResourceDefinition", "ConfigMap", "Secret"}; !reflect.DeepEqual(got, want) {
		t.Errorf("Order = %v, want %v", got, want)
	}
}

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		name    string
		in      string
		objects int
		err     string
	}{
		{"empty file", "", 0, ""},
		{"trailing separator", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n---\n", 1, ""},
		{"json", `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a"}}`, 1, ""},
		{"list", "apiVersion: v1\nkind: List\nitems:\n- {apiVersion: v1, kind: ConfigMap, metadata: {name: a}}\n- {apiVersion: v1, kind: ConfigMap, metadata: {name: b}}\n", 2, ""},
		{"broken yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a\n", 0, "document 1"},
		{"second document broken", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n---\nkind: [\n", 0, "document 2"},
		{"no kind", "apiVersion: v1\nmetadata: {name: a}\n", 0, "no kind"},
		{"no name", "apiVersion: v1\nkind: ConfigMap\n", 0, "no metadata.name"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			objs, err := Parse([]byte(tc.in))
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("Parse error %v, want one with %q", err, tc.err)
				}
				return
			}
			if err != nil || len(objs) != tc.objects {
				t.Fatalf("Parse = %d objects, %v; want %d", len(objs), err, tc.objects)
			}
		})
	}
}

func TestLabelValue(t *testing.T) {
	for in, want := range map[string]string{
		"app.yaml":                        "app.yaml",
		"my app!.yaml":                    "my_app_.yaml",
		"-x.yaml":                         "x.yaml",
		strings.Repeat("a", 70) + ".yaml": strings.Repeat("a", 63),
	} {
		if got := LabelValue(in); got != want {
			t.Errorf("LabelValue(%q) = %q, want %q", in, got, want)
		}
	}
}
