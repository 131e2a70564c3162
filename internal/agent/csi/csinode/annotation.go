package csinode

import (
	"encoding/json"
	"fmt"
	"maps"
)

// NodeIDAnnotation is the Node annotation in which the kubelet keeps a JSON
// object of driver name to node ID, for the external attacher and older
// readers that predate CSINode.
const NodeIDAnnotation = "csi.volume.kubernetes.io/nodeid"

// WithNodeID returns the annotation's value with driver's node ID set
// (nodeID != "") or removed (nodeID == ""), and whether it changed. An
// unreadable old value is replaced, as upstream overwrites it. The result
// is "" when no driver is left: the caller removes the annotation.
func WithNodeID(old, driver, nodeID string) (string, bool, error) {
	ids := map[string]string{}
	if old != "" {
		if err := json.Unmarshal([]byte(old), &ids); err != nil {
			ids = map[string]string{}
		}
	}
	before := maps.Clone(ids)
	if nodeID == "" {
		delete(ids, driver)
	} else {
		ids[driver] = nodeID
	}
	if maps.Equal(before, ids) && old != "" {
		return old, false, nil
	}
	if len(ids) == 0 {
		return "", old != "", nil
	}
	b, err := json.Marshal(ids) // sorted keys: a stable value
	if err != nil {
		return "", false, fmt.Errorf("encoding %s: %w", NodeIDAnnotation, err)
	}
	return string(b), string(b) != old, nil
}
