package manifests

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/clock"
)

// RecordName is the kube-system ConfigMap that records which objects each
// file applied (so a removed file's objects can be deleted, also after a
// restart or an etcd restore) and that the manifests' events are about.
const RecordName = "podvisor-manifests"

const recordKey = "applied"

// Dir is the folder of auto-applied manifests.
func Dir(dataDir string) string { return filepath.Join(dataDir, "manifests") }

// Manager applies a folder of manifests and keeps it applied.
type Manager struct {
	Dir      string
	Config   *rest.Config
	Interval time.Duration // how often the folder is read for changes
	Clock    clock.WithTicker
	Log      *slog.Logger

	client  kubernetes.Interface
	dyn     dynamic.Interface
	mapper  *restmapper.DeferredDiscoveryRESTMapper
	events  record.EventRecorder
	applied map[string]string // file -> hash of the contents last applied
	failed  map[string]string // file -> hash of contents already reported as failing
	// noRecord: the record was found empty, so an empty folder needs no
	// API call (most podvisors have no manifests).
	noRecord bool
}

// Run applies the folder now and whenever it changes, until ctx ends.
func (m *Manager) Run(ctx context.Context) error {
	var err error
	if m.client, err = kubernetes.NewForConfig(m.Config); err != nil {
		return err
	}
	if m.dyn, err = dynamic.NewForConfig(m.Config); err != nil {
		return err
	}
	dc, err := discovery.NewDiscoveryClientForConfig(m.Config)
	if err != nil {
		return err
	}
	m.mapper = restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(dc))
	b := record.NewBroadcaster(record.WithContext(ctx))
	b.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: m.client.CoreV1().Events("")})
	defer b.Shutdown()
	m.events = b.NewRecorder(scheme.Scheme, v1.EventSource{Component: "podvisor-manifests"})
	m.applied, m.failed = map[string]string{}, map[string]string{}
	t := m.Clock.NewTicker(m.Interval)
	defer t.Stop()
	for {
		if err := m.sync(ctx); err != nil && ctx.Err() == nil {
			m.Log.Error("manifests", "dir", m.Dir, "err", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C():
		}
	}
}

// sync applies changed files and deletes removed files' objects.
func (m *Manager) sync(ctx context.Context) error {
	onDisk, contents, err := readDir(m.Dir)
	if err != nil {
		return err
	}
	if len(onDisk) == 0 && m.noRecord {
		return nil
	}
	rec, cm, err := m.loadRecord(ctx, len(onDisk) > 0)
	if err != nil {
		return err
	}
	defer func() { m.noRecord = len(rec) == 0 }()
	changed := false
	for _, f := range Changed(onDisk, m.applied) {
		objs, err := Parse(contents[f])
		if err != nil {
			m.reportOnce(cm, f, onDisk[f], "ManifestInvalid", fmt.Sprintf("%s: %v (its objects are left as they were)", filepath.Join(m.Dir, f), err))
			continue
		}
		refs, err := m.applyFile(ctx, f, objs)
		if err != nil {
			// Retried at the next read; what did apply is recorded so that
			// it is deleted with the file.
			m.reportOnce(cm, f, onDisk[f], "ManifestApplyFailed", fmt.Sprintf("%s: %v", filepath.Join(m.Dir, f), err))
			rec[f] = union(rec[f], refs)
			changed = true
			continue
		}
		for _, r := range Stale(rec[f], refs) {
			m.deleteObject(ctx, f, r)
		}
		rec[f] = refs
		changed = true
		m.applied[f] = onDisk[f]
		delete(m.failed, f)
		m.Log.Info("manifest applied", "file", filepath.Join(m.Dir, f), "objects", len(refs))
		m.events.Eventf(cm, v1.EventTypeNormal, "ManifestApplied", "applied %d object(s) from %s", len(refs), filepath.Join(m.Dir, f))
	}
	for _, f := range Removed(rec, onDisk) {
		for _, r := range rec[f] {
			m.deleteObject(ctx, f, r)
		}
		delete(rec, f)
		delete(m.applied, f)
		changed = true
		m.Log.Info("manifest removed: its objects deleted", "file", filepath.Join(m.Dir, f))
	}
	if changed {
		return m.saveRecord(ctx, cm, rec)
	}
	return nil
}

func (m *Manager) reportOnce(cm *v1.ConfigMap, file, hash, reason, msg string) {
	if m.failed[file] == hash {
		return
	}
	m.failed[file] = hash
	m.Log.Error("manifest not applied", "file", filepath.Join(m.Dir, file), "reason", reason, "err", msg)
	m.events.Event(cm, v1.EventTypeWarning, reason, msg)
}

// applyFile server-side applies a file's objects, labelled with the file;
// it returns the objects that applied, and the first error.
func (m *Manager) applyFile(ctx context.Context, file string, objs []*unstructured.Unstructured) ([]Ref, error) {
	var refs []Ref
	var firstErr error
	for _, o := range Order(objs) {
		ri, namespaced, err := m.resource(o.GroupVersionKind())
		if err != nil {
			firstErr = cmpErr(firstErr, fmt.Errorf("%s %s: %v", o.GetKind(), o.GetName(), err))
			continue
		}
		if namespaced && o.GetNamespace() == "" {
			o.SetNamespace(metav1.NamespaceDefault)
		}
		if !namespaced {
			o.SetNamespace("")
		}
		labels := o.GetLabels()
		if labels == nil {
			labels = map[string]string{}
		}
		labels[FileLabel] = LabelValue(file)
		o.SetLabels(labels)
		ann := o.GetAnnotations()
		if ann == nil {
			ann = map[string]string{}
		}
		ann[FileAnnotation] = file
		o.SetAnnotations(ann)
		var c dynamic.ResourceInterface = m.dyn.Resource(ri)
		if namespaced {
			c = m.dyn.Resource(ri).Namespace(o.GetNamespace())
		}
		if _, err := c.Apply(ctx, o.GetName(), o, metav1.ApplyOptions{FieldManager: FieldManager, Force: true}); err != nil {
			firstErr = cmpErr(firstErr, fmt.Errorf("%s: %v", RefOf(o), err))
			continue
		}
		refs = append(refs, RefOf(o))
	}
	return refs, firstErr
}

// resource maps a kind to its resource; a kind the cached discovery does
// not know (a CRD applied a moment ago) resets the cache once.
func (m *Manager) resource(gvk schema.GroupVersionKind) (schema.GroupVersionResource, bool, error) {
	mapping, err := m.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if meta.IsNoMatchError(err) {
		m.mapper.Reset()
		mapping, err = m.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	}
	if err != nil {
		return schema.GroupVersionResource{}, false, err
	}
	return mapping.Resource, mapping.Scope.Name() == meta.RESTScopeNameNamespace, nil
}

// deleteObject deletes an object the file applied, unless another file has
// taken it over since.
func (m *Manager) deleteObject(ctx context.Context, file string, r Ref) {
	gv, err := schema.ParseGroupVersion(r.APIVersion)
	if err != nil {
		return
	}
	ri, namespaced, err := m.resource(gv.WithKind(r.Kind))
	if err != nil {
		m.Log.Error("manifest object not deleted", "file", file, "object", r.String(), "err", err)
		return
	}
	var c dynamic.ResourceInterface = m.dyn.Resource(ri)
	if namespaced {
		c = m.dyn.Resource(ri).Namespace(r.Namespace)
	}
	cur, err := c.Get(ctx, r.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return
	}
	if err != nil {
		m.Log.Error("manifest object not deleted", "file", file, "object", r.String(), "err", err)
		return
	}
	if cur.GetAnnotations()[FileAnnotation] != file {
		return
	}
	bg := metav1.DeletePropagationBackground
	if err := c.Delete(ctx, r.Name, metav1.DeleteOptions{PropagationPolicy: &bg}); err != nil && !apierrors.IsNotFound(err) {
		m.Log.Error("manifest object not deleted", "file", file, "object", r.String(), "err", err)
		return
	}
	m.Log.Info("manifest object deleted", "file", file, "object", r.String())
}

// loadRecord reads the record, creating it when create is set (there are
// files to record, or to report about on it); without it, a missing record
// is an empty one.
func (m *Manager) loadRecord(ctx context.Context, create bool) (map[string][]Ref, *v1.ConfigMap, error) {
	cms := m.client.CoreV1().ConfigMaps(metav1.NamespaceSystem)
	cm, err := cms.Get(ctx, RecordName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) && !create {
		return map[string][]Ref{}, nil, nil
	}
	if apierrors.IsNotFound(err) {
		cm, err = cms.Create(ctx, &v1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: RecordName, Namespace: metav1.NamespaceSystem}}, metav1.CreateOptions{})
	}
	if err != nil {
		return nil, nil, fmt.Errorf("record %s/%s: %w", metav1.NamespaceSystem, RecordName, err)
	}
	rec := map[string][]Ref{}
	if s := cm.Data[recordKey]; s != "" {
		if err := json.Unmarshal([]byte(s), &rec); err != nil {
			m.Log.Error("manifest record unreadable: starting afresh", "configmap", RecordName, "err", err)
			rec = map[string][]Ref{}
		}
	}
	return rec, cm, nil
}

func (m *Manager) saveRecord(ctx context.Context, cm *v1.ConfigMap, rec map[string][]Ref) error {
	b, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	cm = cm.DeepCopy()
	if cm.Data == nil {
		cm.Data = map[string]string{}
	}
	cm.Data[recordKey] = string(b)
	_, err = m.client.CoreV1().ConfigMaps(metav1.NamespaceSystem).Update(ctx, cm, metav1.UpdateOptions{})
	return err
}

// readDir returns the manifest files' hashes and contents; a missing
// folder has none.
func readDir(dir string) (map[string]string, map[string][]byte, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return map[string]string{}, nil, nil
	}
	if err != nil {
		return nil, nil, err
	}
	hashes, contents := map[string]string{}, map[string][]byte{}
	for _, e := range entries {
		if e.IsDir() || !IsManifest(e.Name()) {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			continue // removed meanwhile: next read
		}
		hashes[e.Name()], contents[e.Name()] = Hash(b), b
	}
	return hashes, contents, nil
}

func union(a, b []Ref) []Ref {
	seen := map[Ref]bool{}
	var out []Ref
	for _, r := range append(append([]Ref(nil), a...), b...) {
		if !seen[r] {
			seen[r] = true
			out = append(out, r)
		}
	}
	return out
}

func cmpErr(first, err error) error {
	if first != nil {
		return first
	}
	return err
}
