package images

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/podvisor/podvisor/internal/runtime"
	"github.com/podvisor/podvisor/internal/runtime/runtimetest"
)

type fixture struct {
	m     *Manager
	store *runtimetest.Images
	clock *clocktesting.FakeClock
	rec   *record.FakeRecorder
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	f := &fixture{store: runtimetest.NewImages(), clock: clocktesting.NewFakeClock(time.Unix(1e9, 0)), rec: record.NewFakeRecorder(100)}
	m, err := New(Config{Images: f.store, Recorder: f.rec, Clock: f.clock})
	if err != nil {
		t.Fatal(err)
	}
	f.m = m
	return f
}

func request(uid, image string, policy v1.PullPolicy) Request {
	return Request{
		Pod:       &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: types.UID(uid)}},
		Container: &v1.Container{Name: "c", Image: image, ImagePullPolicy: policy},
	}
}

// events drains what was recorded so far.
func (f *fixture) events() []string {
	var out []string
	for {
		select {
		case e := <-f.rec.Events:
			out = append(out, e)
		default:
			return out
		}
	}
}

// ensure returns the ID of the image to create the container from.
func (f *fixture) ensure(t *testing.T, req Request) (string, *Failure) {
	t.Helper()
	img, err := f.m.Ensure(context.Background(), req)
	if err == nil {
		return img.ID, nil
	}
	var fail *Failure
	if !errors.As(err, &fail) {
		t.Fatalf("Ensure: %v is not a *Failure", err)
	}
	return "", fail
}

func wantEvents(t *testing.T, got []string, want ...string) {
	t.Helper()
	if !reflect.DeepEqual(got, want) {
		t.Errorf("events:\n got %q\nwant %q", got, want)
	}
}

var busybox = runtime.Image{ID: "sha256:b0b0", RepoTags: []string{"docker.io/library/busybox:1.36"}, Size: 2_160_000, User: "65532"}

// The image comes back described, present or pulled: its user decides
// runAsNonRoot.
func TestEnsureDescribesTheImage(t *testing.T) {
	f := newFixture(t)
	f.store.AddLocal("busybox:1.36", busybox)
	f.store.AddRemote("busybox:latest", busybox, nil)
	for _, image := range []string{"busybox:1.36", "busybox"} {
		img, err := f.m.Ensure(context.Background(), request("u", image, ""))
		if err != nil || !reflect.DeepEqual(img, busybox) {
			t.Errorf("%s: %+v, %v; want %+v", image, img, err, busybox)
		}
	}
}

func TestInvalidImageName(t *testing.T) {
	f := newFixture(t)
	_, fail := f.ensure(t, request("u", "Busybox:1", ""))
	msg := `Failed to apply default image tag "Busybox:1": couldn't parse image name "Busybox:1": invalid reference format: repository name (library/Busybox) must be lowercase`
	if fail == nil || *fail != (Failure{"InvalidImageName", msg}) {
		t.Errorf("failure %+v", fail)
	}
	wantEvents(t, f.events(), "Warning InspectFailed "+msg)
	if len(f.store.Pulls()) != 0 {
		t.Error("pulled an invalid name")
	}
}

func TestIfNotPresentUsesThePresentImageWithoutPulling(t *testing.T) {
	f := newFixture(t)
	f.store.AddLocal("busybox:1.36", busybox)
	req := request("u", "busybox:1.36", "") // defaults to IfNotPresent
	req.PullSecrets = func(context.Context) []v1.Secret { t.Error("secrets read without a pull"); return nil }
	ref, fail := f.ensure(t, req)
	if fail != nil || ref != busybox.ID {
		t.Fatalf("ref %q failure %v, want the image's ID", ref, fail)
	}
	wantEvents(t, f.events(), `Normal Pulled Container image "busybox:1.36" already present on machine`)
	if len(f.store.Pulls()) != 0 {
		t.Errorf("pulls %v, want none", f.store.Pulls())
	}
}

// The name is asked of the runtime with its default tag; events keep the
// name as written.
func TestNeverUsesThePresentImageUnderItsDefaultTag(t *testing.T) {
	f := newFixture(t)
	f.store.AddLocal("busybox:latest", busybox)
	ref, fail := f.ensure(t, request("u", "busybox", v1.PullNever))
	if fail != nil || ref != busybox.ID {
		t.Fatalf("ref %q failure %v", ref, fail)
	}
	wantEvents(t, f.events(), `Normal Pulled Container image "busybox" already present on machine`)
}

func TestNeverWithoutTheImageIsErrImageNeverPull(t *testing.T) {
	f := newFixture(t)
	_, fail := f.ensure(t, request("u", "busybox:1.36", v1.PullNever))
	msg := `Container image "busybox:1.36" is not present with pull policy of Never`
	if fail == nil || *fail != (Failure{"ErrImageNeverPull", msg}) {
		t.Errorf("failure %+v", fail)
	}
	wantEvents(t, f.events(), "Warning ErrImageNeverPull "+msg)
	if len(f.store.Pulls()) != 0 {
		t.Error("pulled with policy Never")
	}
}

// Always pulls at every start, present or not; the Pulled event has
// upstream's durations and size.
func TestAlwaysPullsAtEveryStart(t *testing.T) {
	f := newFixture(t)
	f.store.AddLocal("busybox:latest", busybox)
	f.store.AddRemote("busybox:latest", busybox, nil)
	f.store.OnPull = func(string) { f.clock.Step(1500 * time.Millisecond) }
	for i := range 2 {
		ref, fail := f.ensure(t, request("u", "busybox", "")) // no tag: Always
		if fail != nil || ref != busybox.ID {
			t.Fatalf("start %d: ref %q failure %v", i, ref, fail)
		}
		wantEvents(t, f.events(),
			`Normal Pulling Pulling image "busybox"`,
			`Normal Pulled Successfully pulled image "busybox" in 1.5s (1.5s including waiting). Image size: 2160000 bytes.`)
	}
	if got := f.store.Pulls(); len(got) != 2 || got[0].Ref != "busybox:latest" || got[0].Auth != nil {
		t.Errorf("pulls %+v, want two anonymous pulls of busybox:latest", got)
	}
}

// A failed pull is ErrImagePull with the runtime's error; until the
// back-off (10 s doubling to 300 s, per pod and image) ends, a start is
// ImagePullBackOff carrying that error, with a BackOff event and no pull.
func TestFailedPullsBackOffDoublingPerPodAndImage(t *testing.T) {
	f := newFixture(t)
	pullErr := `pull image nosuch:1: failed to resolve reference "nosuch:1": not found: not found`
	failed := Failure{"ErrImagePull", pullErr}
	backOff := Failure{"ImagePullBackOff", `Back-off pulling image "nosuch:1": ErrImagePull: ` + pullErr}
	req := request("u1", "nosuch:1", "")

	_, fail := f.ensure(t, req)
	if fail == nil || *fail != failed {
		t.Fatalf("first start: %+v, want %+v", fail, failed)
	}
	wantEvents(t, f.events(), `Normal Pulling Pulling image "nosuch:1"`,
		`Warning Failed Failed to pull image "nosuch:1": `+pullErr)

	f.clock.Step(time.Second)
	_, fail = f.ensure(t, req)
	if fail == nil || *fail != backOff {
		t.Fatalf("within the back-off: %+v, want %+v", fail, backOff)
	}
	wantEvents(t, f.events(), `Normal BackOff Back-off pulling image "nosuch:1"`)
	if n := len(f.store.Pulls()); n != 1 {
		t.Fatalf("%d pulls, want 1: none during the back-off", n)
	}
	// Another pod pulling the same image has its own back-off.
	if _, fail := f.ensure(t, request("u2", "nosuch:1", "")); fail == nil || *fail != failed {
		t.Errorf("another pod: %+v, want %+v", fail, failed)
	}
	f.events()

	// Each failure at the end of the back-off doubles it, up to 300 s.
	key := backOffKey("u1", "nosuch:1")
	want := []time.Duration{10, 20, 40, 80, 160, 300, 300}
	for i, d := range want {
		d *= time.Second
		if got := f.m.backOff.delay(key); got != d {
			t.Fatalf("failure %d: back-off %v, want %v", i+1, got, d)
		}
		f.clock.Step(d - time.Second - time.Nanosecond) // one second went by already
		if _, fail := f.ensure(t, req); fail == nil || fail.Reason != "ImagePullBackOff" {
			t.Fatalf("just before the end of %v: %+v, want ImagePullBackOff", d, fail)
		}
		f.clock.Step(time.Nanosecond)
		if _, fail := f.ensure(t, req); fail == nil || *fail != failed {
			t.Fatalf("at the end of %v: %+v, want a pull that fails", d, fail)
		}
		f.clock.Step(time.Second)
	}

	// Twice the maximum without a failure forgets the back-off.
	f.clock.Step(2*MaxPullBackOff + time.Second)
	if _, fail := f.ensure(t, req); fail == nil || *fail != failed {
		t.Fatalf("after 600 s: %+v", fail)
	}
	if got := f.m.backOff.delay(key); got != InitialPullBackOff {
		t.Errorf("back-off after a long pause %v, want %v", got, InitialPullBackOff)
	}
}

func secret(name string, auths string) v1.Secret {
	s := dockerConfigJSON(auths)
	s.Name = name
	return s
}

// Every credential of the pod's pull secrets that matches the registry is
// tried in turn until one works.
func TestPullTriesEachMatchingCredentialInTurn(t *testing.T) {
	f := newFixture(t)
	good := runtime.RegistryAuth{Username: "good", Password: "pw-good"}
	f.store.AddRemote("quay.io/team/app:v1", busybox, &good)
	req := request("u", "quay.io/team/app:v1", "")
	req.PullSecrets = func(context.Context) []v1.Secret {
		return []v1.Secret{
			secret("old", `{"quay.io/team": `+entry("stale")+`}`),
			secret("new", `{"quay.io": `+entry("good")+`, "gcr.io": `+entry("other")+`}`),
		}
	}
	ref, fail := f.ensure(t, req)
	if fail != nil || ref != busybox.ID {
		t.Fatalf("ref %q failure %v", ref, fail)
	}
	pulls := f.store.Pulls()
	if len(pulls) != 2 || *pulls[0].Auth != user("stale") || *pulls[1].Auth != good {
		t.Errorf("pulls %+v, want stale then good credentials", pulls)
	}
}

// When no credential works, the error lists every attempt.
func TestPullWithOnlyBadCredentialsReportsEachError(t *testing.T) {
	f := newFixture(t)
	f.store.AddRemote("quay.io/app:v1", busybox, &runtime.RegistryAuth{Username: "x", Password: "y"})
	req := request("u", "quay.io/app:v1", "")
	req.PullSecrets = func(context.Context) []v1.Secret {
		return []v1.Secret{secret("a", `{"quay.io": `+entry("a")+`}`), secret("b", `{"quay.io": `+entry("b")+`}`)}
	}
	_, fail := f.ensure(t, req)
	denied := "pull image quay.io/app:v1: pull access denied for %s: invalid argument"
	want := "[" + fmt.Sprintf(denied, "a") + ", " + fmt.Sprintf(denied, "b") + "]"
	if fail == nil || *fail != (Failure{"ErrImagePull", want}) {
		t.Errorf("failure %+v", fail)
	}
}

// A pull secret that does not parse fails the start with the parse error
// as its reason, as upstream.
func TestMalformedPullSecret(t *testing.T) {
	f := newFixture(t)
	req := request("u", "quay.io/app:v1", "")
	req.PullSecrets = func(context.Context) []v1.Secret { return []v1.Secret{secret("bad", `{`)} }
	_, fail := f.ensure(t, req)
	if fail == nil || fail.Reason != "unexpected end of JSON input" || fail.Message != fail.Reason {
		t.Errorf("failure %+v", fail)
	}
	if len(f.store.Pulls()) != 0 {
		t.Error("pulled despite the bad secret")
	}
}

type brokenImages struct{ *runtimetest.Images }

func (brokenImages) ImageStatus(context.Context, string) (runtime.Image, bool, error) {
	return runtime.Image{}, false, fmt.Errorf("image status: %w", runtime.ErrUnavailable)
}

// A runtime that cannot say whether it has the image: ImageInspectError,
// with upstream's message naming the (always empty) ref it found.
func TestInspectFailure(t *testing.T) {
	f := newFixture(t)
	m, err := New(Config{Images: brokenImages{f.store}, Recorder: f.rec, Clock: f.clock})
	if err != nil {
		t.Fatal(err)
	}
	_, err = m.Ensure(context.Background(), request("u", "busybox:1.36", ""))
	msg := `Failed to inspect image "": image status: runtime unavailable`
	var fail *Failure
	if !errors.As(err, &fail) || *fail != (Failure{"ImageInspectError", msg}) {
		t.Errorf("error %v", err)
	}
	wantEvents(t, f.events(), "Warning InspectFailed "+msg)
}

// Pulls run one at a time on the node, as upstream's serialized puller:
// the Pulled event of a pull that waited counts the wait as "including
// waiting".
func TestPullsWaitForTheNodesPullSlot(t *testing.T) {
	f := newFixture(t)
	f.store.AddRemote("a:1", runtime.Image{ID: "sha256:a", Size: 1}, nil)
	f.store.AddRemote("b:1", runtime.Image{ID: "sha256:b", Size: 2}, nil)
	release := make(chan struct{})
	f.store.OnPull = func(ref string) {
		if ref == "a:1" {
			<-release
			return
		}
		f.clock.Step(time.Second)
	}
	done := make(chan string, 2)
	ensure := func(image string) {
		if _, err := f.m.Ensure(context.Background(), request("u", image, "")); err != nil {
			done <- err.Error()
			return
		}
		done <- ""
	}
	go ensure("a:1")
	waitFor(t, func() bool { return len(f.store.Pulls()) == 1 })
	go ensure("b:1")
	waitFor(t, func() bool { return len(f.rec.Events) == 2 }) // Pulling a, Pulling b
	f.clock.Step(2 * time.Second)                             // a pulls for 2 s while b waits
	if n := len(f.store.Pulls()); n != 1 {
		t.Fatalf("%d pulls under way, want 1", n)
	}
	close(release)
	for range 2 {
		if e := <-done; e != "" {
			t.Fatal(e)
		}
	}
	got := strings.Join(f.events(), "\n")
	if want := `Normal Pulled Successfully pulled image "b:1" in 1s (3s including waiting). Image size: 2 bytes.`; !strings.Contains(got, want) {
		t.Errorf("events:\n%s\nwant %q", got, want)
	}
}

// With parallel pulls (serializeImagePulls: false), that many pulls run at
// once and one more waits; without a bound, none waits.
func TestParallelPullsRunTogether(t *testing.T) {
	for _, tc := range []struct {
		parallel, pulls, wantAtOnce int
	}{
		{parallel: 2, pulls: 3, wantAtOnce: 2},
		{parallel: -1, pulls: 3, wantAtOnce: 3},
	} {
		f := newFixture(t)
		m, err := New(Config{Images: f.store, Recorder: f.rec, Clock: f.clock, ParallelPulls: tc.parallel})
		if err != nil {
			t.Fatal(err)
		}
		release := make(chan struct{})
		f.store.OnPull = func(string) { <-release }
		done := make(chan error, tc.pulls)
		for i := range tc.pulls {
			ref := fmt.Sprintf("img%d:1", i)
			f.store.AddRemote(ref, runtime.Image{ID: fmt.Sprintf("sha256:%d", i), Size: 1}, nil)
			go func() {
				_, err := m.Ensure(context.Background(), request("u", ref, ""))
				done <- err
			}()
		}
		waitFor(t, func() bool { return len(f.store.Pulls()) == tc.wantAtOnce })
		// The events say every pull was asked for; no more pulls have begun.
		waitFor(t, func() bool { return len(f.rec.Events) == tc.pulls })
		if n := len(f.store.Pulls()); n != tc.wantAtOnce {
			t.Errorf("parallel %d: %d pulls under way, want %d", tc.parallel, n, tc.wantAtOnce)
		}
		close(release)
		for range tc.pulls {
			if err := <-done; err != nil {
				t.Fatal(err)
			}
		}
	}
}

// waitFor polls cond, which goroutines of the test make true.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("timed out")
		}
		time.Sleep(time.Millisecond)
	}
}

func volumeRequest(uid, ref string, policy v1.PullPolicy) Request {
	return Request{
		Pod:    &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: types.UID(uid)}},
		Volume: &v1.Volume{Name: "vol", VolumeSource: v1.VolumeSource{Image: &v1.ImageVolumeSource{Reference: ref, PullPolicy: policy}}},
	}
}

// An image volume's image is ensured as a container's — its own pull
// policy, the same events and failures — and its events are about the pod,
// without a container's field path, as upstream's getImageVolumes.
func TestImageVolumeIsEnsuredLikeAContainerImage(t *testing.T) {
	f := newFixture(t)
	f.store.AddLocal("busybox:1.36", busybox)
	f.store.AddRemote("busybox:1.36", busybox, nil)
	ref, fail := f.ensure(t, volumeRequest("u", "busybox:1.36", v1.PullAlways))
	if fail != nil || ref != busybox.ID {
		t.Fatalf("ref %q failure %v", ref, fail)
	}
	if p := f.store.Pulls(); len(p) != 1 || p[0].Ref != "busybox:1.36" {
		t.Errorf("pulls %+v, want busybox:1.36 once (Always)", p)
	}
	wantEvents(t, f.events(), `Normal Pulling Pulling image "busybox:1.36"`,
		`Normal Pulled Successfully pulled image "busybox:1.36" in 0s (0s including waiting). Image size: 2160000 bytes.`)

	_, fail = f.ensure(t, volumeRequest("u", "nosuch:1", v1.PullNever))
	msg := `Container image "nosuch:1" is not present with pull policy of Never`
	if fail == nil || *fail != (Failure{"ErrImageNeverPull", msg}) {
		t.Errorf("failure %+v", fail)
	}
	wantEvents(t, f.events(), "Warning ErrImageNeverPull "+msg)

	if o := volumeRequest("u", "x", "").object(); o.FieldPath != "" || o.Name != "p" || o.Kind != "Pod" {
		t.Errorf("a volume's events are about %+v, want the pod itself", o)
	}
	if o := request("u", "x", "").object(); o.FieldPath != "spec.containers{c}" {
		t.Errorf("a container's events are about %+v, want its field path", o)
	}
}

// pullLog records what a PullTimes hears.
type pullLog []string

func (l *pullLog) PullStarted(uid types.UID)  { *l = append(*l, "started "+string(uid)) }
func (l *pullLog) PullFinished(uid types.UID) { *l = append(*l, "finished "+string(uid)) }

// The pod start-up SLI hears of each pull: a start, and a finish only when
// it succeeds; a present image is no pull.
func TestPullTimesHearOfPulls(t *testing.T) {
	f := newFixture(t)
	var log pullLog
	f.m.cfg.PullTimes = &log
	f.store.AddRemote("busybox:latest", busybox, nil)
	if _, fail := f.ensure(t, request("u1", "busybox", v1.PullIfNotPresent)); fail != nil {
		t.Fatal(fail)
	}
	if _, fail := f.ensure(t, request("u2", "busybox", v1.PullIfNotPresent)); fail != nil { // present now
		t.Fatal(fail)
	}
	if _, fail := f.ensure(t, request("u3", "nosuch:1", "")); fail == nil {
		t.Fatal("pulled an image no registry has")
	}
	if want := (pullLog{"started u1", "finished u1", "started u3"}); !reflect.DeepEqual(log, want) {
		t.Errorf("heard %q, want %q", log, want)
	}
}
