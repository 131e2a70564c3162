package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// DATA_DIR/manifests, as k3s's server/manifests: files put there before the
// first start are applied; a change is applied; a removed file's objects are
// deleted; a file that does not parse is reported (log and a kube-system
// event) while the others still apply.
func TestManifestsFolder(t *testing.T) {
	processRuntimeOnly(t)
	t.Parallel()
	p := NewPodvisor(t)
	dir := filepath.Join(p.DataDir, "manifests")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	app := func(value string) string {
		return fmt.Sprintf(`apiVersion: v1
kind: Namespace
metadata:
  name: mf-app
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: settings
  namespace: mf-app
data:
  value: %q
`, value)
	}
	write := func(name, content string) {
		t.Helper()
		// Through a hidden file and a rename, as editors and config tools do.
		tmp := filepath.Join(dir, ".tmp-"+name)
		if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	write("app.yaml", app("one"))
	write("broken.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: nope\n")
	p.Start()
	ctx := context.Background()
	c := p.Admin.CoreV1()

	value := func() (string, error) {
		cm, err := c.ConfigMaps("mf-app").Get(ctx, "settings", metav1.GetOptions{})
		if err != nil {
			return "", err
		}
		return cm.Data["value"], nil
	}
	Eventually(t, time.Minute, "app.yaml's ConfigMap applied", func() (bool, error) {
		v, err := value()
		return v == "one", err
	})
	cm, _ := c.ConfigMaps("mf-app").Get(ctx, "settings", metav1.GetOptions{})
	if cm.Annotations["podvisor.io/manifest-file"] != "app.yaml" || cm.Labels["podvisor.io/manifest"] != "app.yaml" {
		t.Errorf("applied ConfigMap's label/annotation %v / %v, want them to name app.yaml", cm.Labels, cm.Annotations)
	}
	if mf := managers(cm.ManagedFields); !strings.Contains(mf, "podvisor:Apply") {
		t.Errorf("managed fields %s, want podvisor's server-side apply", mf)
	}
	if _, err := c.Namespaces().Get(ctx, "mf-app", metav1.GetOptions{}); err != nil {
		t.Errorf("app.yaml's Namespace: %v", err)
	}
	Eventually(t, time.Minute, "an event about broken.yaml", func() (bool, error) {
		evs, err := c.Events("kube-system").List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		for _, e := range evs.Items {
			if e.Reason == "ManifestInvalid" && e.InvolvedObject.Name == "podvisor-manifests" && strings.Contains(e.Message, "broken.yaml") {
				t.Logf("event: %s %s: %s", e.Type, e.Reason, e.Message)
				return true, nil
			}
		}
		return false, fmt.Errorf("%d events, none about broken.yaml", len(evs.Items))
	})
	if log, _ := os.ReadFile(filepath.Join(p.DataDir, "podvisor.log")); !strings.Contains(string(log), "broken.yaml") {
		t.Errorf("podvisor.log says nothing about broken.yaml")
	}
	if _, err := c.ConfigMaps("default").Get(ctx, "nope", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("broken.yaml's ConfigMap: %v, want not found", err)
	}

	// A file dropped while podvisor runs.
	write("later.json", `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"later"},"data":{"k":"v"}}`)
	Eventually(t, time.Minute, "later.json applied", func() (bool, error) {
		_, err := c.ConfigMaps("default").Get(ctx, "later", metav1.GetOptions{})
		return err == nil, err
	})

	write("app.yaml", app("two"))
	Eventually(t, time.Minute, "the change to app.yaml applied", func() (bool, error) {
		v, err := value()
		return v == "two", err
	})

	if err := os.Remove(filepath.Join(dir, "app.yaml")); err != nil {
		t.Fatal(err)
	}
	Eventually(t, time.Minute, "app.yaml's objects deleted", func() (bool, error) {
		ns, err := c.Namespaces().Get(ctx, "mf-app", metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		if err != nil {
			return false, err
		}
		// The namespace controller empties it and then removes it.
		return ns.DeletionTimestamp != nil, fmt.Errorf("namespace mf-app not being deleted")
	})
}

func managers(fields []metav1.ManagedFieldsEntry) string {
	var out []string
	for _, f := range fields {
		out = append(out, f.Manager+":"+string(f.Operation))
	}
	return strings.Join(out, ",")
}
