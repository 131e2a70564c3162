package manifests

import (
	"bytes"
	"errors"
	"fmt"
	"io"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/yaml"
)

// Parse reads every object of a manifest file (YAML documents separated by
// ---, or JSON; a List's items count as objects). Any document that does not
// parse, or an object without apiVersion, kind or name, fails the whole
// file: applying half a file would be a surprise.
func Parse(data []byte) ([]*unstructured.Unstructured, error) {
	dec := yaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	var out []*unstructured.Unstructured
	for doc := 1; ; doc++ {
		var m map[string]any
		if err := dec.Decode(&m); err != nil {
			if errors.Is(err, io.EOF) {
				return out, nil
			}
			return nil, fmt.Errorf("document %d: %v", doc, err)
		}
		if len(m) == 0 {
			continue // an empty document, e.g. after a trailing ---
		}
		u := &unstructured.Unstructured{Object: m}
		if u.IsList() {
			l, err := u.ToList()
			if err != nil {
				return nil, fmt.Errorf("document %d: %v", doc, err)
			}
			for i := range l.Items {
				if err := check(&l.Items[i]); err != nil {
					return nil, fmt.Errorf("document %d, item %d: %v", doc, i+1, err)
				}
				out = append(out, &l.Items[i])
			}
			continue
		}
		if err := check(u); err != nil {
			return nil, fmt.Errorf("document %d: %v", doc, err)
		}
		out = append(out, u)
	}
}

func check(u *unstructured.Unstructured) error {
	switch {
	case u.GetAPIVersion() == "":
		return fmt.Errorf("no apiVersion")
	case u.GetKind() == "":
		return fmt.Errorf("no kind")
	case u.GetName() == "":
		return fmt.Errorf("%s has no metadata.name", u.GetKind())
	}
	return nil
}
