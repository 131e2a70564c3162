// Package podsource watches the pods bound to this node and hands every change
// to a Handler; informer callbacks only hand over, they never block on work.
package podsource

import (
	"context"
	"fmt"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

// Handler receives pod changes.
type Handler interface {
	UpdatePod(pod *v1.Pod)
	RemovePod(pod *v1.Pod)
}

// Source is the informer on pods with spec.nodeName = this node.
type Source struct {
	factory  informers.SharedInformerFactory
	informer cache.SharedIndexInformer
	// handler is the Handler's registration: it has synced once the Handler
	// was given every pod of the first list, which the informer's own
	// HasSynced does not promise (handlers are called asynchronously).
	handler cache.ResourceEventHandlerRegistration
}

// New builds the source; Start runs it.
func New(client kubernetes.Interface, nodeName string, h Handler) (*Source, error) {
	factory := informers.NewSharedInformerFactoryWithOptions(client, 0,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("spec.nodeName", nodeName).String()
		}))
	inf := factory.Core().V1().Pods()
	s := &Source{factory: factory, informer: inf.Informer()}
	// The UID index lets the status manager find the newest copy of a pod.
	if err := s.informer.AddIndexers(cache.Indexers{"uid": func(obj interface{}) ([]string, error) {
		return []string{string(obj.(*v1.Pod).UID)}, nil
	}}); err != nil {
		return nil, err
	}
	reg, err := s.informer.AddEventHandler(handlerFuncs(h))
	s.handler = reg
	return s, err
}

// Start runs the informer and returns once the Handler has been given every
// pod of the first list: only then may the agent tell which of the
// containers it re-adopted belong to no pod.
func (s *Source) Start(ctx context.Context) error {
	s.factory.Start(ctx.Done())
	sctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if !cache.WaitForCacheSync(sctx.Done(), s.informer.HasSynced, s.handler.HasSynced) {
		return fmt.Errorf("pod informer did not sync")
	}
	return nil
}

// Get returns the newest copy of a pod by UID.
func (s *Source) Get(uid types.UID) (*v1.Pod, bool) {
	objs, err := s.informer.GetIndexer().ByIndex("uid", string(uid))
	if err != nil || len(objs) == 0 {
		return nil, false
	}
	return objs[0].(*v1.Pod), true
}

// UIDs lists the UIDs of the node's pods the informer knows.
func (s *Source) UIDs() map[types.UID]bool {
	out := map[types.UID]bool{}
	for _, obj := range s.informer.GetIndexer().List() {
		out[obj.(*v1.Pod).UID] = true
	}
	return out
}

// handlerFuncs hands informer notifications to h.
func handlerFuncs(h Handler) cache.ResourceEventHandlerFuncs {
	return cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj interface{}) { h.UpdatePod(obj.(*v1.Pod)) },
		UpdateFunc: func(oldObj, obj interface{}) {
			// A relist after a broken watch reports a pod deleted and recreated
			// under the same name as an update: the old UID is gone.
			if old, pod := oldObj.(*v1.Pod), obj.(*v1.Pod); old.UID != pod.UID {
				h.RemovePod(old)
			}
			h.UpdatePod(obj.(*v1.Pod))
		},
		DeleteFunc: func(obj interface{}) {
			if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = t.Obj
			}
			if p, ok := obj.(*v1.Pod); ok {
				h.RemovePod(p)
			}
		},
	}
}
