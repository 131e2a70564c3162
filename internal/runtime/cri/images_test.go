package cri

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/record"
	clocktesting "k8s.io/utils/clock/testing"

	imagemgr "github.com/podvisor/podvisor/internal/agent/images"
	"github.com/podvisor/podvisor/internal/runtime"
	"github.com/podvisor/podvisor/internal/runtime/pause"
)

// The agent's image manager over a real containerd: what upstream's
// kubelet would show for an image containerd has, and for one no registry
// can serve (there is no network to registries here).
func TestImageManagerOverContainerd(t *testing.T) {
	r, ctx, p := podFixture(t)
	rec := record.NewFakeRecorder(100)
	m, err := imagemgr.New(imagemgr.Config{Images: r, Recorder: rec, Clock: clocktesting.NewFakeClock(time.Now())})
	if err != nil {
		t.Fatal(err)
	}
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: p.spec.PodName, Namespace: "test", UID: "uid-images"}}
	ensure := func(image string, policy v1.PullPolicy) (runtime.Image, error) {
		return m.Ensure(ctx, imagemgr.Request{Pod: pod, Container: &v1.Container{Name: "c", Image: image, ImagePullPolicy: policy}})
	}
	event := func() string {
		select {
		case e := <-rec.Events:
			return e
		default:
			return ""
		}
	}

	// Present: its ID, no pull, and a container from that ID shows the
	// image's tag and ref as the kubelet would.
	img, err := ensure("busybox", v1.PullIfNotPresent)
	ref := img.ID
	if err != nil || !strings.HasPrefix(ref, "sha256:") {
		t.Fatalf("busybox: %+v, %v", img, err)
	}
	if e := event(); e != `Normal Pulled Container image "busybox" already present on machine` {
		t.Errorf("event %q", e)
	}
	spec := p.container("c", "true")
	spec.Image = ref
	id := createStart(t, r, spec)
	st, err := r.Status(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("status image %q image ref %q", st.Image, st.ImageRef)
	if st.Image != busyboxImage || (st.ImageRef != ref && !strings.HasPrefix(st.ImageRef, "docker.io/library/busybox@sha256:")) {
		t.Errorf("status image %q ref %q, want %s and its digest or ID %s", st.Image, st.ImageRef, busyboxImage, ref)
	}

	// Absent and unreachable: containerd answers Unknown, which no class
	// covers; upstream maps any such pull error to ErrImagePull with the
	// runtime's message, then backs off.
	pctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	_, err = m.Ensure(pctx, imagemgr.Request{Pod: pod, Container: &v1.Container{Name: "c", Image: "docker.io/library/nosuch:1"}})
	var fail *imagemgr.Failure
	if !errors.As(err, &fail) || fail.Reason != "ErrImagePull" ||
		!strings.HasPrefix(fail.Message, `pull image docker.io/library/nosuch:1: failed to pull and unpack image "docker.io/library/nosuch:1"`) {
		t.Fatalf("pull of an unreachable image: %v", err)
	}
	t.Logf("ErrImagePull message: %s", fail.Message)
	// A registry that does not resolve is no class: not ErrNotFound (no
	// registry said the image does not exist), not ErrUnavailable (the
	// runtime answered).
	if _, err := r.PullImage(pctx, "docker.io/library/nosuch:1", nil); err == nil ||
		runtime.IsNotFound(err) || runtime.IsUnavailable(err) || runtime.IsInvalid(err) || runtime.IsConflict(err) {
		t.Errorf("pull error %v: want one of no class", err)
	}
	if e := event(); e != `Normal Pulling Pulling image "docker.io/library/nosuch:1"` {
		t.Errorf("event %q", e)
	}
	if e := event(); e != `Warning Failed Failed to pull image "docker.io/library/nosuch:1": `+fail.Message {
		t.Errorf("event %q", e)
	}
	first := fail.Message
	_, err = m.Ensure(pctx, imagemgr.Request{Pod: pod, Container: &v1.Container{Name: "c", Image: "docker.io/library/nosuch:1"}})
	if !errors.As(err, &fail) || fail.Reason != "ImagePullBackOff" ||
		fail.Message != `Back-off pulling image "docker.io/library/nosuch:1": ErrImagePull: `+first {
		t.Errorf("second start: %v", err)
	}
}

// ImageFsInfo names a directory of the filesystem holding containerd's
// images (what image GC measures), and the sandbox image is pinned (what
// image GC never removes).
func TestImageFsInfoAndPinnedSandboxImage(t *testing.T) {
	r, ctx, _ := podFixture(t)
	fs, err := r.ImageFsInfo(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(fs.Mountpoint); err != nil || !st.IsDir() {
		t.Errorf("image filesystem %+v: %v", fs, err)
	}
	list, err := r.ListImages(ctx)
	if err != nil {
		t.Fatal(err)
	}
	pinned := map[string]bool{}
	for _, img := range list {
		for _, tag := range img.RepoTags {
			pinned[tag] = img.Pinned
		}
	}
	if !pinned[pause.ImageName] || pinned["docker.io/library/busybox:latest"] {
		t.Errorf("pinned images: %v; want the sandbox image %s pinned, busybox not", pinned, pause.ImageName)
	}
}
