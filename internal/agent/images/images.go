// Package images decides what image a container runs and whether and how it
// is pulled, as the kubelet's image manager (kubernetes/kubernetes
// pkg/kubelet/images, v1.36): the pull policy, the image name and its
// default tag, the pod's pull-secret credentials matched to the registry,
// the per-pod-and-image pull back-off, the waiting reasons and the events.
//
// The decisions are functions (name.go, keyring.go, backoff.go); Manager is
// the thin layer that asks the runtime (runtime.Images) and records events.
package images

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/clock"

	"github.com/podvisor/podvisor/internal/agent/podref"
	"github.com/podvisor/podvisor/internal/runtime"
)

// Config of a Manager.
type Config struct {
	Images   runtime.Images
	Recorder record.EventRecorder
	Clock    clock.Clock // nil: the real clock
	// ParallelPulls is how many pulls may run at once on the node; 0 or 1:
	// one at a time, as upstream's default (serializeImagePulls: true);
	// negative: no bound (serializeImagePulls: false without
	// maxParallelImagePulls).
	ParallelPulls int
	Log           *slog.Logger // nil: slog.Default()
	// Records, when set, turns on the pulled-image credential check
	// (pullcheck.go) with Verification's policy; nil: every present image
	// is used, as before KEP-2535.
	Records      *PullRecords
	Verification Verification
	// PullTimes, when set, is told when each pull for a pod starts and
	// when one succeeds (the pod start-up SLI leaves pulls out).
	PullTimes PullTimes
}

// PullTimes hears of pulls as the kubelet's pod startup latency tracker
// does: a start at the Pulling event, a finish just before Pulled; a
// failed pull is never finished.
type PullTimes interface {
	PullStarted(pod types.UID)
	PullFinished(pod types.UID)
}

// Manager ensures containers' images. Safe for concurrent use.
type Manager struct {
	cfg     Config
	backOff *pullBackOff
	slots   chan struct{} // a pull holds one while it runs; nil: no bound
}

// New builds a Manager; cfg.Images and cfg.Recorder are required.
func New(cfg Config) (*Manager, error) {
	if cfg.Images == nil || cfg.Recorder == nil {
		return nil, fmt.Errorf("images: the runtime's images and an event recorder are required")
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	if cfg.Records != nil && cfg.Verification.Policy == "" {
		cfg.Verification.Policy = NeverVerifyPreloadedImages
	}
	m := &Manager{cfg: cfg, backOff: newPullBackOff(cfg.Clock)}
	if cfg.ParallelPulls >= 0 {
		m.slots = make(chan struct{}, max(cfg.ParallelPulls, 1))
	}
	if cfg.Records != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := m.recoverRecords(ctx); err != nil {
			cfg.Log.Warn("image pull records: not brought up to date with the runtime's images", "err", err)
		}
	}
	return m, nil
}

// recoverRecords turns the pulls an earlier agent left unfinished into
// records without credentials for the images the runtime has (every pod's
// credentials will be checked for them), and drops the records of images
// that are gone, as upstream's pull manager at start.
func (m *Manager) recoverRecords(ctx context.Context) error {
	have, err := m.cfg.Images.ListImages(ctx)
	if err != nil {
		return err
	}
	intents, err := m.cfg.Records.intents()
	if err != nil {
		return err
	}
	present := map[string]bool{}
	byRef := map[string]string{}
	for _, img := range have {
		present[img.ID] = true
		for _, ref := range append(slices.Clone(img.RepoTags), img.RepoDigests...) {
			byRef[ref] = img.ID
		}
	}
	var errs []error
	for _, image := range intents {
		id, ok := byRef[image]
		if !ok {
			continue // not pulled: the intent stays, the image counts as the agent's
		}
		errs = append(errs, m.cfg.Records.record(id, "", nil, m.cfg.Clock.Now()), m.cfg.Records.endPull(image))
	}
	errs = append(errs, m.cfg.Records.prune(present))
	return errors.Join(errs...)
}

// Request is a container about to be created, or an image volume one is
// about to mount.
type Request struct {
	Pod       *v1.Pod
	Container *v1.Container
	// Volume, set instead of Container, is an image volume (volumes[].image)
	// of the pod: its image is ensured as a container's, with the volume's
	// pullPolicy, and its events are about the pod itself, as upstream's
	// (kuberuntime_manager.go getImageVolumes).
	Volume *v1.Volume
	// PullSecrets reads the pod's imagePullSecrets; called only when a pull
	// is due. nil: no credentials.
	PullSecrets func(ctx context.Context) []v1.Secret
}

// image is the image as the spec writes it.
func (r Request) image() string {
	if r.Volume != nil {
		return r.Volume.Image.Reference
	}
	return r.Container.Image
}

func (r Request) policy() v1.PullPolicy {
	if r.Volume != nil {
		return VolumePullPolicy(r.Volume.Image)
	}
	return PullPolicy(r.Container)
}

// object is what the request's events are about.
func (r Request) object() *v1.ObjectReference {
	if r.Volume != nil {
		return podref.Container(r.Pod, "")
	}
	return podref.Container(r.Pod, r.Container.Name)
}

// logAttrs name the pod and the container or volume in log lines.
func (r Request) logAttrs() []any {
	if r.Volume != nil {
		return []any{"pod", r.Pod.Namespace + "/" + r.Pod.Name, "volume", r.Volume.Name, "image", r.image()}
	}
	return []any{"pod", r.Pod.Namespace + "/" + r.Pod.Name, "container", r.Container.Name, "image", r.image()}
}

// Failure is why a container cannot be created for its image: it waits
// with Reason and Message. The caller adds the Failed event
// (FailedEventMessage), as upstream's kuberuntime does.
type Failure struct {
	Reason  string
	Message string
}

func (f *Failure) Error() string { return f.Reason + ": " + f.Message }

// Ensure makes the request's image present as its pull policy says,
// recording upstream's events on the pod, and returns it: the container is
// created from its ID (upstream's imageRef), and its User decides
// runAsNonRoot; an image volume is mounted by its ID. Every error is a
// *Failure.
func (m *Manager) Ensure(ctx context.Context, req Request) (runtime.Image, error) {
	image := req.image()
	name, err := ParseName(image)
	if err != nil {
		msg := invalidNameMessage(image, err)
		m.event(req, v1.EventTypeWarning, EventInspectFailed, msg)
		return runtime.Image{}, &Failure{ReasonInvalidImageName, msg}
	}
	policy := req.policy()
	var local runtime.Image
	var present bool
	if needsPresence(policy) {
		local, present, err = m.cfg.Images.ImageStatus(ctx, name.Pull)
		if err != nil {
			msg := inspectFailedMessage(err)
			m.event(req, v1.EventTypeWarning, EventInspectFailed, msg)
			return runtime.Image{}, &Failure{ReasonImageInspectError, msg}
		}
	}
	step := decide(policy, present)
	if step == stepUseLocal && m.cfg.Records != nil {
		if !m.mayUse(ctx, req, name, local) {
			step = stepPull
			if policy == v1.PullNever {
				step = stepNeverPull // present, but not for this pod
			}
		} else {
			m.event(req, v1.EventTypeNormal, EventPulled, accessibleMessage(image))
			return local, nil
		}
	}
	switch step {
	case stepUseLocal:
		m.event(req, v1.EventTypeNormal, EventPulled, presentMessage(image))
		return local, nil
	case stepNeverPull:
		msg := neverPullMessage(image)
		m.event(req, v1.EventTypeWarning, EventErrImageNeverPull, msg)
		return runtime.Image{}, &Failure{ReasonErrImageNeverPull, msg}
	}
	return m.pull(ctx, req, name)
}

func (m *Manager) pull(ctx context.Context, req Request, name Name) (runtime.Image, error) {
	pod, image := req.Pod, req.image()
	var secrets []v1.Secret
	if req.PullSecrets != nil {
		secrets = req.PullSecrets(ctx)
	}
	keyring, err := KeyringFromSecrets(secrets)
	if err != nil {
		// Upstream returns the parse error itself, which becomes the reason.
		return runtime.Image{}, &Failure{err.Error(), err.Error()}
	}
	key := backOffKey(pod.UID, image)
	if last, held := m.backOff.holding(key); held {
		msg := backOffMessage(image)
		m.event(req, v1.EventTypeNormal, EventBackOff, msg)
		if last != "" {
			msg += ": " + last
		}
		return runtime.Image{}, &Failure{ReasonImagePullBackOff, msg}
	}
	if m.cfg.PullTimes != nil {
		m.cfg.PullTimes.PullStarted(pod.UID)
	}
	m.event(req, v1.EventTypeNormal, EventPulling, pullingMessage(image))
	start := m.cfg.Clock.Now()
	log := m.cfg.Log.With(req.logAttrs()...)
	if m.cfg.Records != nil {
		if err := m.cfg.Records.startPull(name.Pull); err != nil {
			log.Warn("image pull record", "err", err)
		}
		defer func() {
			if err := m.cfg.Records.endPull(name.Pull); err != nil {
				log.Warn("image pull record", "err", err)
			}
		}()
	}
	img, took, used, err := m.pullInSlot(ctx, name.Pull, keyring.Lookup(name.Repository))
	if err != nil {
		log.Info("image pull failed", "err", err)
		m.event(req, v1.EventTypeWarning, EventFailed, pullFailedMessage(image, err))
		m.backOff.failed(key, ReasonErrImagePull+": "+err.Error())
		return runtime.Image{}, &Failure{ReasonErrImagePull, err.Error()}
	}
	log.Info("pulled image", "id", img.ID, "took", took, "size", img.Size)
	if m.cfg.Records != nil {
		creds := &PullCredentials{NodeWide: true} // anonymous, or the node's own credentials
		if used != nil {
			creds = &PullCredentials{Secrets: []SecretCredential{used.Secret}}
		}
		if err := m.cfg.Records.record(img.ID, name.Repository, creds, m.cfg.Clock.Now()); err != nil {
			log.Warn("image pull record", "err", err)
		}
	}
	if m.cfg.PullTimes != nil {
		m.cfg.PullTimes.PullFinished(pod.UID)
	}
	m.event(req, v1.EventTypeNormal, EventPulled, pulledMessage(image, took, m.cfg.Clock.Since(start), img.Size))
	m.backOff.succeeded()
	return img, nil
}

// pullInSlot waits for a pull slot, then pulls ref with each credential in
// turn until one works (anonymously without any), and describes the pulled
// image (best effort: its ID alone if the runtime cannot); took excludes
// the wait for the slot; used is the credential that worked (nil: none).
func (m *Manager) pullInSlot(ctx context.Context, ref string, creds []TrackedAuth) (img runtime.Image, took time.Duration, used *TrackedAuth, err error) {
	if m.slots != nil {
		select {
		case m.slots <- struct{}{}:
		case <-ctx.Done():
			return runtime.Image{}, 0, nil, ctx.Err()
		}
		defer func() { <-m.slots }()
	}
	start := m.cfg.Clock.Now()
	id, used, err := m.pullWith(ctx, ref, creds)
	if err != nil {
		return runtime.Image{}, m.cfg.Clock.Since(start), nil, err
	}
	img, ok, err := m.cfg.Images.ImageStatus(ctx, id)
	if err != nil || !ok {
		img = runtime.Image{ID: id}
	}
	return img, m.cfg.Clock.Since(start), used, nil
}

// pullWith is upstream's kuberuntime PullImage: every credential that
// matches the registry in turn, the errors of all of them if none works.
func (m *Manager) pullWith(ctx context.Context, ref string, creds []TrackedAuth) (string, *TrackedAuth, error) {
	if len(creds) == 0 {
		id, err := m.cfg.Images.PullImage(ctx, ref, nil)
		return id, nil, err
	}
	var errs []error
	for i := range creds {
		id, err := m.cfg.Images.PullImage(ctx, ref, &creds[i].RegistryAuth)
		if err == nil {
			return id, &creds[i], nil
		}
		errs = append(errs, err)
	}
	return "", nil, utilerrors.NewAggregate(errs)
}

// mayUse says whether the request's pod may use a present image without
// pulling it, by the credential check; a pod credential that matched by
// hash or by secret alone is remembered for next time.
func (m *Manager) mayUse(ctx context.Context, req Request, name Name, local runtime.Image) bool {
	log := m.cfg.Log.With(req.logAttrs()...)
	rec, err := m.cfg.Records.pulled(local.ID)
	pulledByAgent := rec != nil || err != nil || m.cfg.Records.pulling(name.Pull)
	if err != nil {
		log.Warn("image pull record unreadable, checking the pod's credentials", "err", err)
	}
	if !m.cfg.Verification.requires(name.Repository, pulledByAgent) {
		return true
	}
	var secrets []v1.Secret
	if req.PullSecrets != nil {
		secrets = req.PullSecrets(ctx)
	}
	var podCreds []SecretCredential
	if keyring, err := KeyringFromSecrets(secrets); err == nil {
		for _, c := range keyring.Lookup(name.Repository) {
			podCreds = append(podCreds, c.Secret)
		}
	}
	check := checkAccess(m.cfg.Verification, name.Repository, rec, pulledByAgent, podCreds)
	if check.remember != nil {
		creds := &PullCredentials{Secrets: []SecretCredential{*check.remember}}
		if err := m.cfg.Records.record(local.ID, name.Repository, creds, m.cfg.Clock.Now()); err != nil {
			log.Warn("image pull record", "err", err)
		}
	}
	if check.mustPull {
		log.Info("image present but not pulled with credentials this pod has: pulling it with the pod's", "id", local.ID)
	}
	return !check.mustPull
}

// event records an event about the request's container (or, for an image
// volume, its pod), as upstream.
func (m *Manager) event(req Request, typ, reason, msg string) {
	m.cfg.Recorder.Event(req.object(), typ, reason, msg)
}
