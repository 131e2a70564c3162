package agent

import (
	"context"
	"fmt"
	"time"

	"golang.org/x/sys/unix"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"

	"github.com/podvisor/podvisor/internal/agent/containergc"
	"github.com/podvisor/podvisor/internal/agent/imagegc"
	"github.com/podvisor/podvisor/internal/agent/images"
	"github.com/podvisor/podvisor/internal/runtime"
)

// newImageGC makes the image garbage collector, none when there is nothing
// to collect: a runtime without images (the process runtime), one that
// cannot say where its images are, or the kubelet's off switch (high
// threshold 100 and no maximum age).
func (a *Agent) newImageGC() error {
	store := a.runtime.Images
	if store == nil {
		return nil
	}
	p := a.cfg.Kubelet.ImageGC
	if p.Disabled() {
		a.cfg.Log.Info("image garbage collection off: imageGCHighThresholdPercent is 100 and imageMaximumGCAge 0")
		return nil
	}
	var err error
	a.imageGC, err = imagegc.New(imagegc.Config{
		Policy: p, Images: store, Recorder: a.recorder, NodeName: a.cfg.NodeName,
		Period: a.cfg.Kubelet.GCPeriod, Clock: clock.RealClock{}, Log: a.cfg.Log.With("component", "imagegc"),
		Usage: func(ctx context.Context) (imagegc.Usage, error) { return imageFsUsage(ctx, store) },
		InUse: a.imagesInUse,
	})
	return err
}

// imageFsUsage measures the filesystem the runtime keeps its images on,
// as the kubelet's stats provider: the runtime names it, statfs sizes it.
func imageFsUsage(ctx context.Context, fs runtime.Images) (imagegc.Usage, error) {
	info, err := fs.ImageFsInfo(ctx)
	if err != nil {
		return imagegc.Usage{}, err
	}
	var st unix.Statfs_t
	if err := unix.Statfs(info.Mountpoint, &st); err != nil {
		return imagegc.Usage{}, fmt.Errorf("image filesystem %s: %w", info.Mountpoint, err)
	}
	return imagegc.Usage{Capacity: int64(st.Blocks) * st.Bsize, Available: int64(st.Bavail) * st.Bsize}, nil
}

// imagesInUse names the images the node's containers run (every instance
// the runtime has, exited ones included, as upstream) and those its pods
// name, containers and image volumes: a pod waiting for a volume or a
// back-off keeps its images too.
func (a *Agent) imagesInUse(ctx context.Context) (map[string]bool, error) {
	list, err := a.runtime.Containers.List(ctx)
	if err != nil {
		return nil, err
	}
	refs := map[string]bool{}
	for _, s := range list {
		refs[s.Image], refs[s.ImageRef] = true, true
	}
	name := func(ref string) {
		refs[ref] = true
		if n, err := images.ParseName(ref); err == nil {
			if n.Digest != "" {
				refs[n.Repository+"@"+n.Digest] = true
			} else {
				refs[n.Repository+":"+n.Tag] = true
			}
		}
	}
	for _, pod := range a.workers.Pods() {
		for _, c := range pod.Spec.InitContainers {
			name(c.Image)
		}
		for _, c := range pod.Spec.Containers {
			name(c.Image)
		}
		for _, c := range pod.Spec.EphemeralContainers {
			name(c.Image)
		}
		for _, v := range pod.Spec.Volumes {
			if v.Image != nil {
				name(v.Image.Reference)
			}
		}
	}
	delete(refs, "")
	return refs, nil
}

// runContainerGC removes dead containers and sandboxes at once and every
// period (the kubelet's 1 minute); a failed round is a ContainerGCFailed event on
// the node, as upstream.
func (a *Agent) runContainerGC(ctx context.Context) {
	period := a.cfg.Kubelet.GCPeriod
	if period <= 0 {
		period = containergc.Period
	}
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		if err := a.workers.CollectContainers(ctx, containergc.DefaultPolicy()); err != nil && ctx.Err() == nil {
			a.cfg.Log.Error("container garbage collection failed", "err", err)
			a.recorder.Event(&v1.ObjectReference{Kind: "Node", Name: a.cfg.NodeName, UID: types.UID(a.cfg.NodeName)},
				v1.EventTypeWarning, "ContainerGCFailed", err.Error())
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
