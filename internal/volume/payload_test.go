package volume

import (
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
)

func TestConfigMapPayloadItemsModesAndMissingKeys(t *testing.T) {
	cm := &v1.ConfigMap{Data: map[string]string{"a": "1"}, BinaryData: map[string][]byte{"b": {0, 1}}}
	all, err := configMapPayload(nil, cm, ptr.To[int32](0o600), false)
	if err != nil || len(all) != 2 || string(all["a"].Data) != "1" || all["b"].Mode != 0o600 {
		t.Errorf("all keys: %+v %v", all, err)
	}
	items := []v1.KeyToPath{{Key: "a", Path: "dir/a.txt", Mode: ptr.To[int32](0o400)}, {Key: "missing", Path: "m"}}
	if _, err := configMapPayload(items, cm, nil, false); err == nil || err.Error() != "configmap references non-existent config key: missing" {
		t.Errorf("missing key: %v", err)
	}
	got, err := configMapPayload(items, cm, nil, true)
	if err != nil || len(got) != 1 || got["dir/a.txt"].Mode != 0o400 {
		t.Errorf("optional: %+v %v", got, err)
	}
	if _, err := secretPayload([]v1.KeyToPath{{Key: "x", Path: "x"}}, &v1.Secret{}, nil, false); err == nil || err.Error() != "secret references non-existent secret key: x" {
		t.Errorf("secret missing key: %v", err)
	}
}
