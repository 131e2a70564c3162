package bench

import (
	"context"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
)

// watchPods calls handle for every change of a pod in ns, with the time the
// event arrived, until the returned stop is called. It lists first, so it
// returns only once the watch is established; a watch the server closes is
// resumed from the last resource version (or relisted).
func (n *node) watchPods(ns string, handle func(watch.EventType, *v1.Pod, time.Time)) (stop func()) {
	b := n.b
	b.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	pods := n.client.CoreV1().Pods(ns)
	list := func() string {
		l, err := pods.List(ctx, metav1.ListOptions{})
		if err != nil {
			return ""
		}
		now := time.Now()
		for i := range l.Items {
			handle(watch.Added, &l.Items[i], now)
		}
		return l.ResourceVersion
	}
	rv := list()
	if rv == "" {
		cancel()
		b.Fatal("cannot list pods")
	}
	w, err := pods.Watch(ctx, metav1.ListOptions{ResourceVersion: rv})
	if err != nil {
		cancel()
		b.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			for ev := range w.ResultChan() {
				at := time.Now()
				pod, ok := ev.Object.(*v1.Pod)
				if !ok { // an error event: the version is too old
					rv = ""
					break
				}
				rv = pod.ResourceVersion
				handle(ev.Type, pod, at)
			}
			w.Stop()
			if ctx.Err() != nil {
				return
			}
			if rv == "" {
				rv = list()
			}
			for {
				w, err = pods.Watch(ctx, metav1.ListOptions{ResourceVersion: rv})
				if err == nil || ctx.Err() != nil {
					break
				}
				time.Sleep(100 * time.Millisecond)
			}
			if ctx.Err() != nil {
				return
			}
		}
	}()
	return func() { cancel(); <-done }
}

// allRunning: every container of the pod is reported running.
func allRunning(pod *v1.Pod) bool {
	if len(pod.Status.ContainerStatuses) != len(pod.Spec.Containers) {
		return false
	}
	for _, cs := range pod.Status.ContainerStatuses {
		if cs.State.Running == nil {
			return false
		}
	}
	return true
}

// terminated returns the state of the first container once it terminated.
func terminated(pod *v1.Pod) *v1.ContainerStateTerminated {
	if len(pod.Status.ContainerStatuses) == 0 {
		return nil
	}
	return pod.Status.ContainerStatuses[0].State.Terminated
}
