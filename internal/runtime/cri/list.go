package cri

import (
	"context"
	"fmt"
	"sync"

	"github.com/podvisor/podvisor/internal/runtime"
)

// Status reads the container's status from the runtime: one CRI call.
func (r *Runtime) Status(ctx context.Context, id string) (runtime.Status, error) {
	resp, err := r.rs.ContainerStatus(quiet(ctx), id, false)
	if err != nil {
		return runtime.Status{}, classify(err, "container %s", id)
	}
	s := resp.GetStatus()
	if s == nil {
		return runtime.Status{}, fmt.Errorf("container %s: %w", id, runtime.ErrNotFound)
	}
	st := containerStatus(s)
	r.mu.Lock()
	if _, ok := r.containers[id]; !ok {
		r.containers[id] = metaOf(s.GetLabels(), s.GetAnnotations(), st.Name)
	}
	r.mu.Unlock()
	// Not recorded in the tracker: a caller that reads a status and drops
	// it must not swallow the event of an exit.
	return r.withEarlyExit(st), nil
}

// listConcurrency bounds the status calls of one List.
const listConcurrency = 8

// List returns the status of every pod container (those with a pod UID
// label) the runtime has, an earlier agent's included.
func (r *Runtime) List(ctx context.Context) ([]runtime.Status, error) {
	list, err := r.rs.ListContainers(quiet(ctx), nil)
	if err != nil {
		return nil, classify(err, "list containers")
	}
	var (
		mu   sync.Mutex
		out  = make([]runtime.Status, 0, len(list))
		errs []error
		wg   sync.WaitGroup
		sem  = make(chan struct{}, listConcurrency)
	)
	for _, c := range list {
		if c.GetLabels()[labelPodUID] == "" {
			continue
		}
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			st, err := r.Status(ctx, c.Id)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case runtime.IsNotFound(err): // removed meanwhile
			case err != nil:
				errs = append(errs, err)
			default:
				out = append(out, st)
			}
		}()
	}
	wg.Wait()
	if len(errs) > 0 {
		return nil, fmt.Errorf("list containers: %w", errs[0])
	}
	return out, nil
}
