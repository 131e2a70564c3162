package imagegc

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/clock"

	"github.com/podvisor/podvisor/internal/runtime"
)

// Period is the kubelet's ImageGCPeriod.
const Period = 5 * time.Minute

// Event reasons on the node, as upstream's.
const (
	ReasonFreeDiskSpaceFailed = "FreeDiskSpaceFailed"
	ReasonImageGCFailed       = "ImageGCFailed"
	ReasonInvalidDiskCapacity = "InvalidDiskCapacity"
)

// Store is the part of the runtime's image store the collector uses.
type Store interface {
	ListImages(ctx context.Context) ([]runtime.Image, error)
	RemoveImage(ctx context.Context, ref string) error
}

// Config of a Manager.
type Config struct {
	Policy Policy
	Images Store
	// Usage measures the filesystem holding the images.
	Usage func(ctx context.Context) (Usage, error)
	// InUse returns what the node's containers (of every state) and pods
	// name as their images: IDs, repo digests or tags.
	InUse    func(ctx context.Context) (map[string]bool, error)
	Recorder record.EventRecorder
	NodeName string
	Period   time.Duration // 0: Period
	Clock    clock.WithTicker
	Log      *slog.Logger
}

// Manager runs the collection every Period.
type Manager struct {
	cfg     Config
	mu      sync.Mutex // one round at a time; guards records
	records Records
	began   time.Time
}

// New checks cfg and fills its defaults.
func New(cfg Config) (*Manager, error) {
	if cfg.Images == nil || cfg.Usage == nil || cfg.InUse == nil || cfg.Recorder == nil {
		return nil, errors.New("imagegc: Images, Usage, InUse and Recorder are required")
	}
	if cfg.Period <= 0 {
		cfg.Period = Period
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	return &Manager{cfg: cfg, began: cfg.Clock.Now()}, nil
}

// Run collects at once (an image present at the start is first seen then,
// as upstream, so only the maximum age and the events can act on it), then
// every Period until ctx ends. A round that fails twice in a row is an
// ImageGCFailed event on the node (the first failure may be the runtime
// still starting, as upstream).
func (m *Manager) Run(ctx context.Context) {
	failedBefore := false
	t := m.cfg.Clock.NewTicker(m.cfg.Period)
	defer t.Stop()
	for {
		err := m.GarbageCollect(ctx)
		switch {
		case ctx.Err() != nil:
			return
		case err != nil && failedBefore:
			m.cfg.Log.Error("image garbage collection failed multiple times in a row", "err", err)
			m.event(ReasonImageGCFailed, err.Error())
		case err != nil:
			m.cfg.Log.Warn("image garbage collection failed once", "err", err)
		}
		failedBefore = err != nil
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		}
	}
}

func (m *Manager) event(reason, msg string) {
	m.cfg.Recorder.Event(&v1.ObjectReference{Kind: "Node", Name: m.cfg.NodeName, UID: types.UID(m.cfg.NodeName)},
		v1.EventTypeWarning, reason, msg)
}

// detectInUse lists the images and what uses them, records both, and
// returns the images in use (by ID).
func (m *Manager) detectInUse(ctx context.Context) (map[string]bool, error) {
	list, err := m.cfg.Images.ListImages(ctx)
	if err != nil {
		return nil, err
	}
	refs, err := m.cfg.InUse(ctx)
	if err != nil {
		return nil, err
	}
	images := make([]Image, 0, len(list))
	for _, img := range list {
		images = append(images, Image{ID: img.ID, Names: append(append([]string{}, img.RepoTags...), img.RepoDigests...),
			Size: int64(img.Size), Pinned: img.Pinned})
	}
	inUse := InUse(images, refs)
	m.records.Detect(images, inUse, m.cfg.Clock.Now())
	return inUse, nil
}

// GarbageCollect is one round: images unused past the maximum age go,
// then, when the image filesystem is at or above the high threshold,
// unused images old enough are removed, least recently used first, until
// what they freed reaches the low threshold. Freeing too little is a
// FreeDiskSpaceFailed event and the round's error.
func (m *Manager) GarbageCollect(ctx context.Context) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.cfg.Clock.Now()
	inUse, err := m.detectInUse(ctx)
	if err != nil {
		return err
	}
	cands := m.records.Unused(inUse)
	old, rest := TooOld(cands, m.cfg.Policy, now, m.began)
	var ageErrs []error
	for _, c := range old {
		if err := m.remove(ctx, c, "age"); err != nil {
			ageErrs = append(ageErrs, err)
			rest = append(rest, c)
		}
	}
	if len(ageErrs) > 0 {
		return fmt.Errorf("wanted to free images older than %v, encountered errors in image deletion: %w", m.cfg.Policy.MaxAge, errors.Join(ageErrs...))
	}

	usage, err := m.cfg.Usage(ctx)
	if err != nil {
		return err
	}
	percent, toFree, err := SpaceToFree(usage, m.cfg.Policy)
	if err != nil {
		m.event(ReasonInvalidDiskCapacity, err.Error())
		return err
	}
	if toFree <= 0 {
		return nil
	}
	m.cfg.Log.Info("image filesystem over the high threshold: freeing space down to the low threshold",
		"usage", percent, "highThreshold", m.cfg.Policy.HighThresholdPercent, "lowThreshold", m.cfg.Policy.LowThresholdPercent, "bytesToFree", toFree)
	var freed int64
	var errs []error
	for _, c := range OldEnough(rest, m.cfg.Policy, now) {
		if freed >= toFree {
			break
		}
		if err := m.remove(ctx, c, "space"); err != nil {
			errs = append(errs, err)
			continue
		}
		freed += c.Size
	}
	if len(errs) > 0 {
		return fmt.Errorf("wanted to free %d bytes, but freed %d bytes space with errors in image deletion: %w", toFree, freed, errors.Join(errs...))
	}
	if freed < toFree {
		msg := FreeDiskSpaceFailedMessage(percent, usage.Capacity, freed)
		m.event(ReasonFreeDiskSpaceFailed, msg)
		return errors.New(msg)
	}
	return nil
}

// remove removes an image by ID; one already gone counts as removed.
func (m *Manager) remove(ctx context.Context, c Candidate, why string) error {
	m.cfg.Log.Info("removing image", "id", c.ID, "size", c.Size, "reason", why)
	if err := m.cfg.Images.RemoveImage(ctx, c.ID); err != nil && !runtime.IsNotFound(err) {
		m.cfg.Log.Warn("removing image", "id", c.ID, "err", err)
		return err
	}
	m.records.Forget(c.ID)
	return nil
}
