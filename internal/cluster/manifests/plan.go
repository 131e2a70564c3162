// Package manifests applies the Kubernetes objects in DATA_DIR/manifests —
// k3s's auto-deploying manifests: every .yaml, .yml and .json file there is
// applied (server-side, field manager "podvisor") at start and whenever it
// changes; the objects of a removed file are deleted. This file holds the
// decisions; manager.go does the I/O.
package manifests

import (
	"crypto/sha256"
	"encoding/hex"
	"path/filepath"
	"regexp"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// Label and annotation on every object podvisor applied from a file: the
// label to select them, the annotation with the exact file name.
const (
	FileLabel      = "podvisor.io/manifest"
	FileAnnotation = "podvisor.io/manifest-file"
	FieldManager   = "podvisor"
)

// Ref names one applied object.
type Ref struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Namespace  string `json:"namespace,omitempty"`
	Name       string `json:"name"`
}

func (r Ref) String() string {
	if r.Namespace == "" {
		return r.Kind + "/" + r.Name
	}
	return r.Kind + "/" + r.Namespace + "/" + r.Name
}

// RefOf names an object.
func RefOf(o *unstructured.Unstructured) Ref {
	return Ref{APIVersion: o.GetAPIVersion(), Kind: o.GetKind(), Namespace: o.GetNamespace(), Name: o.GetName()}
}

// IsManifest says whether a file in the directory is one podvisor applies:
// .yaml, .yml or .json, not hidden (editors' swap and temporary files are).
func IsManifest(name string) bool {
	if strings.HasPrefix(name, ".") {
		return false
	}
	switch strings.ToLower(filepath.Ext(name)) {
	case ".yaml", ".yml", ".json":
		return true
	}
	return false
}

// Hash identifies a file's contents.
func Hash(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// Changed returns the files to apply: those whose contents differ from
// what was last applied (all of them at start), sorted by name.
func Changed(onDisk, applied map[string]string) []string {
	var out []string
	for f, h := range onDisk {
		if applied[f] != h {
			out = append(out, f)
		}
	}
	sort.Strings(out)
	return out
}

// Removed returns the recorded files no longer on disk: their objects go.
func Removed(recorded map[string][]Ref, onDisk map[string]string) []string {
	var out []string
	for f := range recorded {
		if _, ok := onDisk[f]; !ok {
			out = append(out, f)
		}
	}
	sort.Strings(out)
	return out
}

// Stale returns the objects a file applied before and no longer holds.
func Stale(before, now []Ref) []Ref {
	keep := make(map[Ref]bool, len(now))
	for _, r := range now {
		keep[r] = true
	}
	var out []Ref
	for _, r := range before {
		if !keep[r] {
			out = append(out, r)
		}
	}
	return out
}

// Order sorts objects for applying: Namespaces, then CustomResourceDefinitions,
// then the rest in file order, so that what others live in exists first.
func Order(objs []*unstructured.Unstructured) []*unstructured.Unstructured {
	rank := func(o *unstructured.Unstructured) int {
		switch {
		case o.GetKind() == "Namespace" && o.GetAPIVersion() == "v1":
			return 0
		case o.GetKind() == "CustomResourceDefinition":
			return 1
		}
		return 2
	}
	out := append([]*unstructured.Unstructured(nil), objs...)
	sort.SliceStable(out, func(i, j int) bool { return rank(out[i]) < rank(out[j]) })
	return out
}

var notLabelChar = regexp.MustCompile(`[^A-Za-z0-9._-]+`)

// LabelValue makes a file name a valid label value (63 characters of
// [A-Za-z0-9._-], alphanumeric at both ends); the annotation keeps the
// exact name.
func LabelValue(file string) string {
	v := notLabelChar.ReplaceAllString(file, "_")
	if len(v) > 63 {
		v = v[:63]
	}
	return strings.Trim(v, "._-")
}
