package volume

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/podvisor/podvisor/internal/agent/csi/drivers"
	"github.com/podvisor/podvisor/internal/agent/csi/nodeclient"
	"github.com/podvisor/podvisor/internal/agent/csi/noderequest"
	"github.com/podvisor/podvisor/internal/agent/volume/claim"
	"github.com/podvisor/podvisor/internal/agent/volume/csivolume"
)

// CSI persistent volumes: a claim bound to a PV with spec.csi is staged
// (drivers with STAGE_UNSTAGE_VOLUME) and published into the pod's
// directory by the PV's driver, once the VolumeAttachment says the volume
// is attached where the driver needs that (csivolume decides). A record
// next to the mount (vol_data.json) lets Unmount unpublish it, and unstage
// it once no other pod publishes it, without the PV or an agent that
// remembers it.

// CSIDrivers are the CSI drivers registered on this node
// (drivers.Registry).
type CSIDrivers interface {
	Get(name string) (drivers.Driver, *nodeclient.Client, bool)
}

var _ CSIDrivers = (*drivers.Registry)(nil)

// csiTimeout bounds each operation on a driver, as the kubelet's 2 minutes
// for NodeStage/NodePublish.
const csiTimeout = 2 * time.Minute

// csiLocks serialises operations on one volume (driver and handle) across
// pods: one pod's unstage must not run between another's stage and
// publish.
type csiLocks struct {
	mu    sync.Mutex
	locks map[string]*sync.Mutex
}

func (l *csiLocks) lock(driver, handle string) func() {
	l.mu.Lock()
	if l.locks == nil {
		l.locks = map[string]*sync.Mutex{}
	}
	k := driver + "\x00" + handle
	m := l.locks[k]
	if m == nil {
		m = &sync.Mutex{}
		l.locks[k] = m
	}
	l.mu.Unlock()
	m.Lock()
	return m.Unlock
}

// mountFailed is the FailedMount message of a CSI step, as upstream's
// "MountVolume.SetUp failed for volume "pv" : <err>".
func mountFailed(step, pv string, err error) error {
	return &claim.Message{Msg: fmt.Sprintf("%s failed for volume %q : %v", step, pv, err)}
}

// setupCSI publishes the CSI PV pv into the pod as volume v.
func (vm *Manager) setupCSI(ctx context.Context, pod *v1.Pod, v v1.Volume, pv *v1.PersistentVolume, readOnly bool, pvs *podVolumes) (string, error) {
	vol, err := noderequest.FromPV(pv, readOnly)
	if err != nil {
		return "", mountFailed("MountVolume.SetUp", pv.Name, err)
	}
	var size string
	if c, ok := pv.Spec.Capacity[v1.ResourceStorage]; ok && !c.IsZero() {
		size = c.String()
	}
	return vm.publishCSI(ctx, pod, v, vol, false, size, pvs)
}

// setupInlineCSI publishes the pod's inline (ephemeral) CSI volume v.
func (vm *Manager) setupInlineCSI(ctx context.Context, pod *v1.Pod, v v1.Volume, pvs *podVolumes) (string, error) {
	vol, err := noderequest.FromInline(string(pod.UID), pod.Namespace, &v)
	if err != nil {
		return "", mountFailed("MountVolume.SetUp", v.Name, err)
	}
	return vm.publishCSI(ctx, pod, v, vol, true, "", pvs)
}

// publishCSI stages (a PV, where the driver stages) and publishes vol into
// the pod as volume v; once per pod (SetUp runs before every container
// start). Messages name the PV, or the inline volume, as upstream's. size
// is the PV's capacity ("" for an inline volume), kept in the record.
func (vm *Manager) publishCSI(ctx context.Context, pod *v1.Pod, v v1.Volume, vol noderequest.Volume, ephemeral bool, size string, pvs *podVolumes) (string, error) {
	target := noderequest.PublishPath(pvs.dir, vol.SpecName)
	if pvs.published[v.Name] {
		return target, nil
	}
	if vm.cfg.CSI == nil {
		return "", mountFailed("MountVolume.MountDevice", vol.SpecName, csivolume.DriverNotRegistered(vol.Driver))
	}
	_, client, ok := vm.cfg.CSI.Get(vol.Driver)
	if !ok {
		return "", mountFailed("MountVolume.MountDevice", vol.SpecName, csivolume.DriverNotRegistered(vol.Driver))
	}
	ctx, cancel := context.WithTimeout(ctx, csiTimeout)
	defer cancel()
	api := vm.cfg.Client
	driver, err := api.StorageV1().CSIDrivers().Get(ctx, vol.Driver, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		driver, err = nil, nil
	}
	if err != nil {
		return "", mountFailed("MountVolume.SetUp", vol.SpecName, fmt.Errorf("reading CSIDriver %s: %w", vol.Driver, err))
	}
	if old, err := readRecord(pvs.dir, vol.SpecName); err == nil && old.Size != "" {
		// Published again (requiresRepublish, a reboot): the mount keeps
		// the size it was grown to; a larger PV is grown by the next look.
		size = old.Size
	}
	rec := csivolume.Record{SpecVolID: vol.SpecName, VolumeHandle: vol.Handle, DriverName: vol.Driver, NodeName: vm.cfg.NodeName,
		VolumeLifecycleMode: storagev1.VolumeLifecyclePersistent, PodVolume: v.Name, Size: size}
	if ephemeral {
		rec.VolumeLifecycleMode = storagev1.VolumeLifecycleEphemeral
		if err := csivolume.EphemeralAllowed(driver, vol.Driver); err != nil {
			return "", mountFailed("MountVolume.SetUp", vol.SpecName, err)
		}
	}
	var publishContext map[string]string
	if !ephemeral && csivolume.AttachRequired(driver) {
		rec.AttachmentID = csivolume.AttachmentName(vol.Handle, vol.Driver, vm.cfg.NodeName)
		va, err := api.StorageV1().VolumeAttachments().Get(ctx, rec.AttachmentID, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			va, err = nil, nil
		}
		if err == nil {
			publishContext, err = csivolume.Attached(va, rec.AttachmentID)
		}
		if err != nil {
			return "", &claim.Message{Msg: fmt.Sprintf("Unable to attach or mount volumes: unmounted volumes=[%s], unattached volumes=[%s], failed to process volumes=[]: %v", v.Name, v.Name, err)}
		}
	}
	caps, err := client.Capabilities(ctx)
	if err != nil {
		return "", mountFailed("MountVolume.SetUp", vol.SpecName, err)
	}
	if ephemeral {
		caps.StageUnstage = false // inline volumes are published only
	}
	rec.Staged = caps.StageUnstage
	var fsGroup *int64
	if sc := pod.Spec.SecurityContext; sc != nil {
		fsGroup = sc.FSGroup
	}
	toDriver, byNode := csivolume.FSGroup(driver, vol, caps, fsGroup)
	stageSecrets, err := vm.csiSecrets(ctx, vol.StageSecretRef)
	if err != nil {
		return "", mountFailed("MountVolume.MountDevice", vol.SpecName, err)
	}
	publishSecrets, err := vm.csiSecrets(ctx, vol.PublishSecretRef)
	if err != nil {
		return "", mountFailed("MountVolume.SetUp", vol.SpecName, err)
	}

	tokenAttrs, err := vm.csiTokens(ctx, pod, driver)
	if err != nil {
		return "", mountFailed("MountVolume.SetUp", vol.SpecName, err)
	}

	unlock := vm.csiLocks.lock(vol.Driver, vol.Handle)
	defer unlock()
	// The record first: a call that fails uncertain (a timeout) may have
	// mounted, and Unmount must find it.
	if err := writeRecord(pvs.dir, rec); err != nil {
		return "", mountFailed("MountVolume.SetUp", vol.SpecName, err)
	}
	root := vm.cfg.CSIRoot
	if err := client.Stage(ctx, noderequest.StageRequest(root, vol, caps, publishContext, stageSecrets, toDriver)); err != nil {
		return "", mountFailed("MountVolume.MountDevice", vol.SpecName, err)
	}
	req := noderequest.PublishRequest(root, vol, noderequest.Pod{
		Name: pod.Name, Namespace: pod.Namespace, UID: string(pod.UID), ServiceAccountName: pod.Spec.ServiceAccountName, Dir: pvs.dir,
	}, caps, noderequest.PublishOptions{
		PublishContext: publishContext, Secrets: publishSecrets, FSGroup: toDriver, PodInfoOnMount: csivolume.PodInfoOnMount(driver),
		Ephemeral: ephemeral, TokenAttrs: tokenAttrs, TokensInSecrets: csivolume.TokensInSecrets(driver),
	})
	if err := client.Publish(ctx, req); err != nil {
		return "", mountFailed("MountVolume.SetUp", vol.SpecName, err)
	}
	if byNode {
		if err := applyFSGroup(target, pod, false); err != nil {
			return "", mountFailed("MountVolume.SetUp", vol.SpecName, err)
		}
	}
	if pvs.published == nil {
		pvs.published = map[string]bool{}
	}
	pvs.published[v.Name] = true
	vm.cfg.Log.Info("CSI volume published", "pod", pod.Namespace+"/"+pod.Name, "volume", v.Name, "spec", vol.SpecName, "driver", vol.Driver, "staged", caps.StageUnstage, "ephemeral", ephemeral)
	return target, nil
}

// republishCSI publishes again the pod's CSI volumes whose driver asks for
// it (CSIDriver requiresRepublish), with fresh service account tokens, as
// the kubelet remounts them at each pod sync; called at each resync with
// pvs held. A failure is a FailedMount event; the volume stays published
// and the next resync tries again.
func (vm *Manager) republishCSI(ctx context.Context, pod *v1.Pod, pvs *podVolumes) {
	if len(pvs.published) == 0 || vm.cfg.Client == nil {
		return
	}
	recs, _ := records(pvs.dir)
	drivers := map[string]string{} // pod volume → its driver
	for _, r := range recs {
		drivers[r.PodVolume] = r.DriverName
	}
	republish := map[string]bool{} // by driver
	for name, driver := range drivers {
		if _, seen := republish[driver]; seen || !pvs.published[name] {
			continue
		}
		d, err := vm.cfg.Client.StorageV1().CSIDrivers().Get(ctx, driver, metav1.GetOptions{})
		republish[driver] = err == nil && d.Spec.RequiresRepublish != nil && *d.Spec.RequiresRepublish
	}
	for _, v := range pod.Spec.Volumes {
		if !pvs.published[v.Name] || !republish[drivers[v.Name]] {
			continue
		}
		delete(pvs.published, v.Name)
		if _, err := vm.setupVolume(ctx, pvs.dir, pod, v, pvs); err != nil {
			pvs.published[v.Name] = true
			msg := claim.Event(v.Name, err)
			vm.cfg.Log.Info("CSI volume not published again", "pod", pod.Namespace+"/"+pod.Name, "volume", v.Name, "err", err)
			vm.cfg.Recorder.Event(pod, v1.EventTypeWarning, "FailedMount", msg)
		}
	}
}

// csiTokens are the pod's service account tokens for the audiences the
// driver's tokenRequests name.
func (vm *Manager) csiTokens(ctx context.Context, pod *v1.Pod, driver *storagev1.CSIDriver) (map[string]string, error) {
	if driver == nil || len(driver.Spec.TokenRequests) == 0 {
		return nil, nil
	}
	tokens := map[string]authenticationv1.TokenRequestStatus{}
	for _, tr := range driver.Spec.TokenRequests {
		tok, err := vm.podToken(ctx, pod, tr.Audience, tr.ExpirationSeconds)
		if err != nil {
			return nil, err
		}
		tokens[tr.Audience] = authenticationv1.TokenRequestStatus{Token: tok.token, ExpirationTimestamp: metav1.NewTime(tok.expiresAt)}
	}
	return csivolume.TokenAttrs(tokens)
}

// csiSecrets reads the secret a PV names for a driver call; nil ref: none.
func (vm *Manager) csiSecrets(ctx context.Context, ref *v1.SecretReference) (map[string]string, error) {
	if ref == nil {
		return nil, nil
	}
	s, err := vm.cfg.Client.CoreV1().Secrets(ref.Namespace).Get(ctx, ref.Name, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("fetching secret %s/%s: %w", ref.Namespace, ref.Name, err)
	}
	out := make(map[string]string, len(s.Data))
	for k, b := range s.Data {
		out[k] = string(b)
	}
	return out, nil
}

func writeRecord(podDir string, r csivolume.Record) error {
	b, err := r.Encode()
	if err != nil {
		return err
	}
	path := noderequest.RecordPath(podDir, r.SpecVolID)
	if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o600)
}

// records reads the records of the CSI volumes published into a pod.
func records(podDir string) ([]csivolume.Record, error) {
	matches, _ := filepath.Glob(noderequest.RecordPath(podDir, "*"))
	var out []csivolume.Record
	var errs []error
	for _, m := range matches {
		b, err := os.ReadFile(m)
		if err != nil {
			if !errors.Is(err, os.ErrNotExist) {
				errs = append(errs, err)
			}
			continue
		}
		r, err := csivolume.Decode(b)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", m, err))
			continue
		}
		out = append(out, r)
	}
	return out, errors.Join(errs...)
}

// Unmount unpublishes the CSI volumes of the pod whose directory is podDir
// and unstages those no other pod publishes. The final delete of the pod
// waits for it (lifecycle.Reclaim); an error is retried by the caller. Other
// kinds of volumes stay until TearDown: they hold nothing outside the pod.
func (vm *Manager) Unmount(ctx context.Context, podDir string) error {
	recs, err := records(podDir)
	var errs []error
	if err != nil {
		errs = append(errs, err)
	}
	for _, r := range recs {
		if err := vm.unmountCSI(ctx, podDir, r); err != nil {
			errs = append(errs, fmt.Errorf("UnmountVolume.TearDown failed for volume %q : %w", r.SpecVolID, err))
		}
	}
	vm.mu.Lock()
	for _, pv := range vm.pods {
		if pv.dir == podDir {
			pv.published = nil
		}
	}
	vm.mu.Unlock()
	return errors.Join(errs...)
}

func (vm *Manager) unmountCSI(ctx context.Context, podDir string, r csivolume.Record) error {
	if vm.cfg.CSI == nil {
		return csivolume.DriverNotRegistered(r.DriverName)
	}
	_, client, ok := vm.cfg.CSI.Get(r.DriverName)
	if !ok {
		return csivolume.DriverNotRegistered(r.DriverName)
	}
	ctx, cancel := context.WithTimeout(ctx, csiTimeout)
	defer cancel()
	unlock := vm.csiLocks.lock(r.DriverName, r.VolumeHandle)
	defer unlock()
	vol := r.Volume()
	if err := client.Unpublish(ctx, noderequest.UnpublishRequest(vol, podDir)); err != nil {
		return err
	}
	if !csivolume.Unstage(r, vm.otherRecords(podDir)) {
		return nil
	}
	if err := client.Unstage(ctx, noderequest.UnstageRequest(vm.cfg.CSIRoot, vol, noderequest.Capabilities{StageUnstage: true})); err != nil {
		return fmt.Errorf("UnmountDevice: %w", err)
	}
	// The staging directory is the node's; the driver unmounted it.
	staging := noderequest.StagingPath(vm.cfg.CSIRoot, vol.Driver, vol.Handle)
	_ = os.Remove(staging)
	_ = os.Remove(filepath.Dir(staging))
	vm.cfg.Log.Info("CSI volume unstaged", "pv", r.SpecVolID, "driver", r.DriverName)
	return nil
}

// InUse lists the CSI persistent volumes published (or being published)
// into the pods under podsDir, for the Node's status.volumesInUse: the
// attach/detach controller detaches none of them. Read from the records,
// so it holds across agent restarts. Inline volumes are never attached:
// not listed, as upstream.
func InUse(podsDir string) []v1.UniqueVolumeName {
	entries, _ := os.ReadDir(podsDir)
	seen := map[v1.UniqueVolumeName]bool{}
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		recs, _ := records(filepath.Join(podsDir, e.Name()))
		for _, r := range recs {
			if r.VolumeLifecycleMode != storagev1.VolumeLifecycleEphemeral {
				seen[csivolume.UniqueName(r.DriverName, r.VolumeHandle)] = true
			}
		}
	}
	out := make([]v1.UniqueVolumeName, 0, len(seen))
	for n := range seen {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

// otherRecords are the records of every pod directory but podDir.
func (vm *Manager) otherRecords(podDir string) []csivolume.Record {
	entries, _ := os.ReadDir(vm.cfg.PodsDir)
	var out []csivolume.Record
	for _, e := range entries {
		dir := filepath.Join(vm.cfg.PodsDir, e.Name())
		if !e.IsDir() || filepath.Clean(dir) == filepath.Clean(podDir) {
			continue
		}
		recs, _ := records(dir)
		out = append(out, recs...)
	}
	return out
}

// unmountOnTearDown unpublishes what Unmount did not (a pod gone from the
// API before it finished, or while the agent was down): bounded, logged.
// It reports whether nothing is left published.
func (vm *Manager) unmountOnTearDown(podDir string) bool {
	if recs, err := records(podDir); len(recs) == 0 && err == nil {
		return true
	}
	ctx, cancel := context.WithTimeout(context.Background(), csiTimeout)
	defer cancel()
	if err := vm.Unmount(ctx, podDir); err != nil {
		vm.cfg.Log.Warn("CSI volumes of a removed pod not torn down yet; its directory stays until they are", "dir", podDir, "err", err)
		return false
	}
	return true
}
