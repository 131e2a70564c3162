package podworker

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/record"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"github.com/podvisor/podvisor/internal/runtime"
	"github.com/podvisor/podvisor/internal/runtime/runtimetest"
)

// imageRuntime is fakeRuntime with images: an in-memory store and
// registry; a container created from an image reports it as containerd
// does (its first tag, its repo digest).
type imageRuntime struct {
	*fakeRuntime
	*runtimetest.Images

	mu    sync.Mutex
	specs []runtime.ContainerSpec
}

var _ runtime.Images = (*imageRuntime)(nil)

func newImageRuntime() *imageRuntime {
	return &imageRuntime{fakeRuntime: newFakeRuntime(), Images: runtimetest.NewImages()}
}

func (r *imageRuntime) Create(ctx context.Context, s runtime.ContainerSpec) (string, error) {
	r.mu.Lock()
	r.specs = append(r.specs, s)
	r.mu.Unlock()
	img, ok, _ := r.ImageStatus(ctx, s.Image)
	if !ok {
		return "", runtime.ErrNotFound
	}
	id, err := r.fakeRuntime.Create(ctx, s)
	r.fakeRuntime.mu.Lock()
	st := r.byID[id]
	st.Image, st.ImageRef = img.RepoTags[0], img.RepoDigests[0]
	r.byID[id] = st
	r.fakeRuntime.mu.Unlock()
	return id, err
}

func (r *imageRuntime) created() []runtime.ContainerSpec {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]runtime.ContainerSpec(nil), r.specs...)
}

// exit ends every running container, as if its process exited 1.
func (r *imageRuntime) exit() {
	r.fakeRuntime.mu.Lock()
	defer r.fakeRuntime.mu.Unlock()
	for id, st := range r.byID {
		if st.State == runtime.StateRunning {
			st.State, st.FinishedAt, st.ExitCode = runtime.StateExited, time.Now(), 1
			r.byID[id] = st
			r.events <- runtime.Event{ID: id, PodUID: st.PodUID, Name: st.Name, State: st.State}
		}
	}
}

var testImage = runtime.Image{ID: "sha256:b0b0", RepoTags: []string{"docker.io/library/busybox:1.36"},
	RepoDigests: []string{"docker.io/library/busybox@sha256:d1d1"}, Size: 2160000, User: "65532"}

type imageFixture struct {
	rt       *imageRuntime
	m        *Manager
	clock    *clocktesting.FakeClock
	statuses *statusLog
	rec      *record.FakeRecorder
	seen     []string // events read from rec so far
}

func newImageFixture(t *testing.T) *imageFixture {
	f := &imageFixture{rt: newImageRuntime(), clock: clocktesting.NewFakeClock(time.Now()),
		statuses: &statusLog{last: map[types.UID]v1.PodStatus{}}, rec: record.NewFakeRecorder(1000)}
	f.m = startManager(t, Config{NodeName: "n", PodsDir: t.TempDir(), Runtime: setOf(f.rt), Clock: f.clock,
		Status: f.statuses, Recorder: f.rec})
	return f
}

func imagePod(name, image string, policy v1.PullPolicy) *v1.Pod {
	pod := testPod(name)
	pod.Spec.Containers[0].Command = nil // the image's entrypoint
	pod.Spec.Containers[0].Image, pod.Spec.Containers[0].ImagePullPolicy = image, policy
	return pod
}

// nextFailed reads events up to the next Warning Failed "Error: …" one
// (the end of a start that failed) and returns its reason.
func (f *imageFixture) nextFailed(t *testing.T) string {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case e := <-f.rec.Events:
			f.seen = append(f.seen, e)
			if r, ok := strings.CutPrefix(e, "Warning Failed Error: "); ok {
				return r
			}
		case <-timeout:
			t.Fatalf("no failed start; events so far %q", f.seen)
		}
	}
}

// drain reads the events recorded so far.
func (f *imageFixture) drain() []string {
	for {
		select {
		case e := <-f.rec.Events:
			f.seen = append(f.seen, e)
		default:
			return f.seen
		}
	}
}

func waitingOf(st v1.PodStatus) *v1.ContainerStateWaiting {
	if len(st.ContainerStatuses) != 1 {
		return nil
	}
	return st.ContainerStatuses[0].State.Waiting
}

func runningOne(st v1.PodStatus) bool {
	return len(st.ContainerStatuses) == 1 && st.ContainerStatuses[0].State.Running != nil
}

// IfNotPresent with the image on the node: no pull, upstream's "already
// present" event, the container created from the image's ID, and its
// status showing the image as the runtime reports it.
func TestImageIfNotPresentAndPresentIsNotPulled(t *testing.T) {
	f := newImageFixture(t)
	f.rt.AddLocal("busybox:1.36", testImage)
	pod := imagePod("present", "busybox:1.36", v1.PullIfNotPresent)
	f.m.UpdatePod(pod)
	st := waitStatus(t, f.statuses, pod.UID, "running", runningOne)
	if cs := st.ContainerStatuses[0]; cs.Image != "docker.io/library/busybox:1.36" || cs.ImageID != "docker.io/library/busybox@sha256:d1d1" {
		t.Errorf("image %q imageID %q, want the runtime's tag and digest", cs.Image, cs.ImageID)
	}
	if p := f.rt.Pulls(); len(p) != 0 {
		t.Errorf("pulls %+v, want none", p)
	}
	if specs := f.rt.created(); len(specs) != 1 || specs[0].Image != testImage.ID || specs[0].Command != nil {
		t.Errorf("created %+v, want one container of image %s with the image's entrypoint", specs, testImage.ID)
	}
	if ev := f.drain(); !slices.Contains(ev, `Normal Pulled Container image "busybox:1.36" already present on machine`) {
		t.Errorf("events %q", ev)
	}
}

// Always pulls at every start of the container, restarts included.
func TestImageAlwaysIsPulledAtEveryStart(t *testing.T) {
	f := newImageFixture(t)
	f.rt.AddRemote("busybox:latest", testImage, nil)
	pod := imagePod("always", "busybox", "") // no tag: Always
	f.m.UpdatePod(pod)
	waitStatus(t, f.statuses, pod.UID, "running", runningOne)
	f.rt.exit()
	waitStatus(t, f.statuses, pod.UID, "running again", func(st v1.PodStatus) bool {
		return runningOne(st) && st.ContainerStatuses[0].RestartCount == 1
	})
	if p := f.rt.Pulls(); len(p) != 2 || p[0].Ref != "busybox:latest" || p[1].Ref != "busybox:latest" {
		t.Errorf("pulls %+v, want busybox:latest twice", p)
	}
	pulled := `Normal Pulled Successfully pulled image "busybox" in 0s (0s including waiting). Image size: 2160000 bytes.`
	n := 0
	for _, e := range f.drain() {
		if e == pulled {
			n++
		}
	}
	if n != 2 {
		t.Errorf("events %q, want %q twice", f.seen, pulled)
	}
}

func TestImageNeverAndAbsentIsErrImageNeverPull(t *testing.T) {
	f := newImageFixture(t)
	pod := imagePod("never", "busybox:1.36", v1.PullNever)
	f.m.UpdatePod(pod)
	if r := f.nextFailed(t); r != "ErrImageNeverPull" {
		t.Fatalf("failed with %q", r)
	}
	msg := `Container image "busybox:1.36" is not present with pull policy of Never`
	waitStatus(t, f.statuses, pod.UID, "waiting ErrImageNeverPull", func(st v1.PodStatus) bool {
		w := waitingOf(st)
		return w != nil && w.Reason == "ErrImageNeverPull" && w.Message == msg
	})
	if !slices.Contains(f.seen, "Warning ErrImageNeverPull "+msg) {
		t.Errorf("events %q", f.seen)
	}
	if len(f.rt.Pulls()) != 0 || len(f.rt.created()) != 0 {
		t.Error("pulled or created with policy Never")
	}
}

func TestImageInvalidNameIsInvalidImageName(t *testing.T) {
	f := newImageFixture(t)
	pod := imagePod("invalid", "BusyBox", "")
	f.m.UpdatePod(pod)
	if r := f.nextFailed(t); r != "InvalidImageName" {
		t.Fatalf("failed with %q", r)
	}
	msg := `Failed to apply default image tag "BusyBox": couldn't parse image name "BusyBox": invalid reference format: repository name (library/BusyBox) must be lowercase`
	waitStatus(t, f.statuses, pod.UID, "waiting InvalidImageName", func(st v1.PodStatus) bool {
		w := waitingOf(st)
		return w != nil && w.Reason == "InvalidImageName" && w.Message == msg
	})
	if !slices.Contains(f.seen, "Warning InspectFailed "+msg) {
		t.Errorf("events %q", f.seen)
	}
}

// A failing pull: ErrImagePull, retried by the worker every 10 s, and
// ImagePullBackOff (with the pull's error) while the image's back-off,
// doubling from 10 s, runs: pulls at 0, 10, 30 and 70 s.
func TestImagePullFailureBacksOffDoubling(t *testing.T) {
	f := newImageFixture(t)
	pod := imagePod("nosuch", "nosuch:1", "")
	f.m.UpdatePod(pod)
	want := []string{"ErrImagePull", "ErrImagePull", "ImagePullBackOff", "ErrImagePull",
		"ImagePullBackOff", "ImagePullBackOff", "ImagePullBackOff", "ErrImagePull"}
	var got []string
	for i := range want {
		if i > 0 {
			f.clock.Step(10 * time.Second)
			f.m.worker(pod.UID).poke() // the retry is due now, whether or not its timer was set before the step
		}
		got = append(got, f.nextFailed(t))
		if got[i] == "ImagePullBackOff" && i == 2 {
			pullErr := `pull image nosuch:1: failed to resolve reference "nosuch:1": not found: not found`
			msg := `Back-off pulling image "nosuch:1": ErrImagePull: ` + pullErr
			waitStatus(t, f.statuses, pod.UID, "waiting ImagePullBackOff", func(st v1.PodStatus) bool {
				w := waitingOf(st)
				return w != nil && w.Reason == "ImagePullBackOff" && w.Message == msg
			})
		}
	}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("starts failed with\n %v, want\n %v", got, want)
	}
	if n := len(f.rt.Pulls()); n != 4 {
		t.Errorf("%d pulls, want 4", n)
	}
	if !slices.Contains(f.seen, `Normal BackOff Back-off pulling image "nosuch:1"`) ||
		!slices.Contains(f.seen, `Warning Failed Failed to pull image "nosuch:1": pull image nosuch:1: failed to resolve reference "nosuch:1": not found: not found`) {
		t.Errorf("events %q", f.seen)
	}
	if len(f.rt.created()) != 0 {
		t.Error("created a container without its image")
	}
}

// The credentials of the pod's pull secret for the image's registry reach
// PullImage; a pull secret that cannot be read is a warning, and the pull
// goes on.
func TestImagePullUsesThePodsPullSecret(t *testing.T) {
	cred := &v1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "regcred"},
		Type:       v1.SecretTypeDockerConfigJson,
		Data: map[string][]byte{v1.DockerConfigJsonKey: []byte(
			`{"auths": {"registry.example.com": {"auth": "YWxpY2U6czNjcmV0"}}}`)}, // alice:s3cret
	}
	rt := newImageRuntime()
	alice := runtime.RegistryAuth{Username: "alice", Password: "s3cret"}
	rt.AddRemote("registry.example.com/team/app:v1", testImage, &alice)
	rec := record.NewFakeRecorder(100)
	m, err := New(Config{NodeName: "n", PodsDir: t.TempDir(), Runtime: setOf(rt), Status: &statusLog{last: map[types.UID]v1.PodStatus{}},
		Recorder: rec, Client: fake.NewClientset(cred)})
	if err != nil {
		t.Fatal(err)
	}
	pod := imagePod("private", "registry.example.com/team/app:v1", "")
	pod.Spec.ImagePullSecrets = []v1.LocalObjectReference{{Name: "missing"}, {Name: "regcred"}}
	w := newWorker(m, pod, nil, nil)
	img, err := w.ensureImage(context.Background(), pod, &pod.Spec.Containers[0])
	if err != nil || img.ID != testImage.ID {
		t.Fatalf("image %+v, %v", img, err)
	}
	if p := rt.Pulls(); len(p) != 1 || p[0].Auth == nil || *p[0].Auth != alice {
		t.Errorf("pulls %+v, want one with alice's credentials", p)
	}
	want := "Warning FailedToRetrieveImagePullSecret Unable to retrieve some image pull secrets (missing); attempting to pull the image may not succeed."
	if e := <-rec.Events; e != want {
		t.Errorf("first event %q, want %q", e, want)
	}
}

// runAsNonRoot without runAsUser: the image's user decides, as upstream —
// a non-root one runs, one without a user (root) waits with
// CreateContainerConfigError.
func TestImageUserDecidesRunAsNonRoot(t *testing.T) {
	f := newImageFixture(t)
	f.rt.AddLocal("busybox:1.36", testImage)
	f.rt.AddLocal("root:1", runtime.Image{ID: "sha256:r00t", RepoTags: []string{"docker.io/library/root:1"}, RepoDigests: []string{"docker.io/library/root@sha256:r"}})
	nonRoot := &v1.PodSecurityContext{RunAsNonRoot: ptr.To(true)}
	ok := imagePod("nonroot", "busybox:1.36", "")
	ok.Spec.SecurityContext = nonRoot
	f.m.UpdatePod(ok)
	waitStatus(t, f.statuses, ok.UID, "running as the image's user 65532", runningOne)
	root := imagePod("root", "root:1", "")
	root.Spec.SecurityContext = nonRoot
	f.m.UpdatePod(root)
	msg := `container has runAsNonRoot and image will run as root (pod: "root_ns(uid-root)", container: c)`
	waitStatus(t, f.statuses, root.UID, "waiting CreateContainerConfigError", func(st v1.PodStatus) bool {
		w := waitingOf(st)
		return w != nil && w.Reason == "CreateContainerConfigError" && w.Message == msg
	})
}
