package podworker

import (
	"context"
	"fmt"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
)

// The ConfigMaps and Secrets pods refer to (env, envFrom, volumes) are
// watched one object at a time, as the kubelet's watch-based manager does
// (the node may only read objects its pods use): when one appears or changes,
// the workers of the pods using it retry a container held back by it at once
// (instead of after the 10 s config-error back-off) and rewrite the volumes
// that project it. A watch lives while a worker of a pod that used it does.

type objectKind string

const (
	kindConfigMap objectKind = "configmap"
	kindSecret    objectKind = "secret"
)

type objectKey struct {
	kind      objectKind
	namespace string
	name      string
}

type objectWatch struct {
	stop chan struct{}
	pods map[types.UID]bool
}

// objectWatches is the Manager's set of per-object watches.
type objectWatches struct {
	m *Manager

	mu      sync.Mutex
	watches map[objectKey]*objectWatch
}

func newObjectWatches(m *Manager) *objectWatches {
	return &objectWatches{m: m, watches: map[objectKey]*objectWatch{}}
}

// use records that pod uid uses the object, watching it from now on.
func (o *objectWatches) use(uid types.UID, key objectKey) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if w, ok := o.watches[key]; ok {
		w.pods[uid] = true
		return
	}
	if o.m.cfg.Client == nil || o.m.ctx == nil {
		return
	}
	w := &objectWatch{stop: make(chan struct{}), pods: map[types.UID]bool{uid: true}}
	o.watches[key] = w
	go o.run(key, w.stop)
}

func (o *objectWatches) run(key objectKey, stop chan struct{}) {
	sel := fields.OneTermEqualSelector("metadata.name", key.name).String()
	var lw *cache.ListWatch
	var obj k8sruntime.Object
	client := o.m.cfg.Client.CoreV1()
	switch key.kind {
	case kindConfigMap:
		obj = &v1.ConfigMap{}
		lw = cache.NewListWatchFromClient(client.RESTClient(), "configmaps", key.namespace, fields.ParseSelectorOrDie(sel))
	case kindSecret:
		obj = &v1.Secret{}
		lw = cache.NewListWatchFromClient(client.RESTClient(), "secrets", key.namespace, fields.ParseSelectorOrDie(sel))
	}
	changed := func(any) { o.m.objectChanged(key) }
	_, ctrl := cache.NewInformerWithOptions(cache.InformerOptions{
		ListerWatcher: lw,
		ObjectType:    obj,
		Handler: cache.ResourceEventHandlerFuncs{
			AddFunc:    changed,
			UpdateFunc: func(_, n any) { changed(n) },
			DeleteFunc: changed,
		},
	})
	ctx, cancel := context.WithCancel(o.m.ctx)
	defer cancel()
	go func() {
		select {
		case <-stop:
		case <-ctx.Done():
		}
		cancel()
	}()
	ctrl.RunWithContext(ctx)
}

// prune stops the watches no live pod uses any more.
func (o *objectWatches) prune(live func(types.UID) bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for key, w := range o.watches {
		for uid := range w.pods {
			if !live(uid) {
				delete(w.pods, uid)
			}
		}
		if len(w.pods) == 0 {
			close(w.stop)
			delete(o.watches, key)
		}
	}
}

// objectChanged wakes the workers of the pods using key.
func (m *Manager) objectChanged(key objectKey) {
	m.mu.Lock()
	workers := make([]*worker, 0, len(m.workers))
	for _, w := range m.workers {
		workers = append(workers, w)
	}
	m.mu.Unlock()
	for _, w := range workers {
		w.mu.Lock()
		pod := w.pod
		w.mu.Unlock()
		if pod.Namespace != key.namespace || !usesObject(pod, key) {
			continue
		}
		w.retryConfigNow()
		m.vols.Refresh(w.uid)
	}
}

// retryConfigNow makes containers held back by a configuration error
// (a missing ConfigMap, Secret or key) try again on the next sync.
func (w *worker) retryConfigNow() {
	w.mu.Lock()
	for _, cf := range w.containers {
		if st := cf.waiting; st != nil && (st.Reason == "CreateContainerConfigError" || st.Reason == "ContainerCreating") {
			cf.waitingSince = time.Time{}
		}
	}
	w.mu.Unlock()
	w.poke()
}

// usesObject reports whether the pod's spec refers to the object.
func usesObject(pod *v1.Pod, key objectKey) bool {
	found := false
	visit := func(kind objectKind, name string) {
		if kind == key.kind && name == key.name {
			found = true
		}
	}
	visitObjects(pod, visit)
	return found
}

// visitObjects calls fn for every ConfigMap and Secret the pod refers to.
func visitObjects(pod *v1.Pod, fn func(objectKind, string)) {
	for _, c := range allContainers(pod) {
		for _, e := range c.EnvFrom {
			if e.ConfigMapRef != nil {
				fn(kindConfigMap, e.ConfigMapRef.Name)
			}
			if e.SecretRef != nil {
				fn(kindSecret, e.SecretRef.Name)
			}
		}
		for _, e := range c.Env {
			if e.ValueFrom == nil {
				continue
			}
			if r := e.ValueFrom.ConfigMapKeyRef; r != nil {
				fn(kindConfigMap, r.Name)
			}
			if r := e.ValueFrom.SecretKeyRef; r != nil {
				fn(kindSecret, r.Name)
			}
		}
	}
	for _, v := range pod.Spec.Volumes {
		switch {
		case v.ConfigMap != nil:
			fn(kindConfigMap, v.ConfigMap.Name)
		case v.Secret != nil:
			fn(kindSecret, v.Secret.SecretName)
		case v.Projected != nil:
			for _, s := range v.Projected.Sources {
				if s.ConfigMap != nil {
					fn(kindConfigMap, s.ConfigMap.Name)
				}
				if s.Secret != nil {
					fn(kindSecret, s.Secret.Name)
				}
			}
		}
	}
}

// getConfigMap reads a ConfigMap for pod uid and watches it from now on. A
// missing one is upstream's `configmap "<name>" not found`. A refusal while
// the API server has not caught up with the pod is waited out (apilag.go):
// the watch, if one exists already, would not wake the worker when it ends.
func (m *Manager) getConfigMap(ctx context.Context, uid types.UID, ns, name string) (*v1.ConfigMap, error) {
	if m.cfg.Client == nil {
		return nil, fmt.Errorf("couldn't get configMap %v/%v, no kubeClient defined", ns, name)
	}
	m.watches.use(uid, objectKey{kindConfigMap, ns, name})
	var cm *v1.ConfigMap
	err := m.untilCaughtUp(ctx, uid, "get configmap "+name, refusedForLag, func() (err error) {
		cm, err = m.cfg.Client.CoreV1().ConfigMaps(ns).Get(ctx, name, metav1.GetOptions{})
		return err
	})
	if apierrors.IsNotFound(err) {
		return nil, apierrors.NewNotFound(schema.GroupResource{Resource: string(kindConfigMap)}, name)
	}
	return cm, err
}

// getSecret is getConfigMap for Secrets: `secret "<name>" not found`.
func (m *Manager) getSecret(ctx context.Context, uid types.UID, ns, name string) (*v1.Secret, error) {
	if m.cfg.Client == nil {
		return nil, fmt.Errorf("couldn't get secret %v/%v, no kubeClient defined", ns, name)
	}
	m.watches.use(uid, objectKey{kindSecret, ns, name})
	var s *v1.Secret
	err := m.untilCaughtUp(ctx, uid, "get secret "+name, refusedForLag, func() (err error) {
		s, err = m.cfg.Client.CoreV1().Secrets(ns).Get(ctx, name, metav1.GetOptions{})
		return err
	})
	if apierrors.IsNotFound(err) {
		return nil, apierrors.NewNotFound(schema.GroupResource{Resource: string(kindSecret)}, name)
	}
	return s, err
}
