package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/trace/noop"
	"golang.org/x/sys/unix"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	internalapi "k8s.io/cri-api/pkg/apis"
	criclient "k8s.io/cri-client/pkg"

	"github.com/podvisor/podvisor/internal/runtime/containerd"
	"github.com/podvisor/podvisor/test/images"
)

// Image GC on a small image filesystem: containerd's root is a 128 MiB
// ext4 loop mount; once a filler file takes it over the high threshold
// (85 %), the collector removes the unused testserver image and so frees
// space, while busybox (a running pod's) and the pinned pause image stay.
// The low threshold (50 %) cannot be reached without them: the collector
// tries every image it may remove, then says so with FreeDiskSpaceFailed,
// and ImageGCFailed once a second round fails too.
func TestContainerdImageGCFreesSpace(t *testing.T) {
	t.Parallel()
	p := NewContainerdPodvisor(t, "--gc-period", "2s",
		"--config", kubeletConfig(t, "imageMinimumGCAge: 1s\nimageGCHighThresholdPercent: 85\nimageGCLowThresholdPercent: 50\n"))
	paths, err := containerd.PathsFor(p.DataDir)
	if err != nil {
		t.Fatal(err)
	}
	smallFilesystem(t, paths.Root, 128)
	p.Start()
	importImages(t, p.DataDir, "testserver")
	ns := p.Namespace("imagegc")
	p.create(t, p.pod(ns, "user", v1.RestartPolicyNever, sh("c", "exec sleep 3600")))
	p.waitPod(t, ns, "user", 2*time.Minute, "running", func(pod *v1.Pod) bool {
		cs := containerStatus(pod, "c")
		return cs != nil && cs.State.Running != nil
	})
	is := p.criImages(t)
	have := func() map[string]bool {
		list, err := is.ListImages(context.Background(), nil)
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]bool{}
		for _, img := range list {
			for _, tag := range img.RepoTags {
				out[tag] = true
			}
		}
		return out
	}
	if h := have(); !h[images.TestserverImage] || !h[images.BusyboxImage] || !h[images.PauseImage] {
		t.Fatalf("images before GC: %v", h)
	}

	// Fill the filesystem to 87 % used.
	before := fillTo87(t, paths.Root, "filler")
	Eventually(t, 2*time.Minute, "the unused testserver image removed", func() (bool, error) {
		return !have()[images.TestserverImage], nil
	})
	if h := have(); !h[images.BusyboxImage] || !h[images.PauseImage] {
		t.Errorf("images after GC: %v; busybox (in use) and pause (pinned) must stay", h)
	}
	Eventually(t, time.Minute, "4 MiB freed on the image filesystem", func() (bool, error) {
		var st unix.Statfs_t
		if err := unix.Statfs(paths.Root, &st); err != nil {
			return false, err
		}
		after := int64(st.Bavail) * st.Bsize
		return after-before >= 4<<20, fmt.Errorf("%d bytes available before GC, %d now", before, after)
	})
	const prefix = "Insufficient free disk space on the node's image filesystem ("
	p.waitNodeEvent(t, "FreeDiskSpaceFailed", prefix)
	// Back over the threshold with nothing left to remove: every round
	// fails now, and the second failure in a row is ImageGCFailed.
	fillTo87(t, paths.Root, "filler-2")
	p.waitNodeEvent(t, "ImageGCFailed", prefix)
}

// fillTo87 writes a file named name in dir's filesystem so that it is 87 %
// used, and returns what is then available there.
func fillTo87(t *testing.T, dir, name string) int64 {
	t.Helper()
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	capacity, avail := int64(st.Blocks)*st.Bsize, int64(st.Bavail)*st.Bsize
	filler := avail - capacity*13/100
	if filler <= 0 {
		t.Fatalf("the image filesystem is already %d%% used", 100-avail*100/capacity)
	}
	if out, err := exec.Command("fallocate", "-l", strconv.FormatInt(filler, 10), filepath.Join(dir, name)).CombinedOutput(); err != nil {
		t.Fatalf("fallocate: %v: %s", err, out)
	}
	return avail - filler
}

// waitNodeEvent waits for a warning event of reason on the node whose
// message starts with prefix.
func (p *Podvisor) waitNodeEvent(t *testing.T, reason, prefix string) {
	t.Helper()
	Eventually(t, 2*time.Minute, reason+" on the node", func() (bool, error) {
		evs, err := p.Admin.CoreV1().Events("").List(context.Background(), metav1.ListOptions{
			FieldSelector: "involvedObject.kind=Node,reason=" + reason})
		if err != nil {
			return false, err
		}
		for _, e := range evs.Items {
			if e.InvolvedObject.Name == p.NodeName && e.Type == v1.EventTypeWarning && strings.HasPrefix(e.Message, prefix) {
				return true, nil
			}
		}
		return false, nil
	})
}

// smallFilesystem mounts a fresh ext4 filesystem of size MiB at dir (made
// if missing) for the test's life; the mount goes after the podvisor that
// uses it stopped (cleanups run last registered first).
func smallFilesystem(t *testing.T, dir string, mib int) {
	t.Helper()
	img := filepath.Join(t.TempDir(), "fs.img")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, cmd := range [][]string{
		{"truncate", "-s", strconv.Itoa(mib << 20), img},
		{"mkfs.ext4", "-q", "-F", img},
		{"mount", "-o", "loop", img, dir},
	} {
		if out, err := exec.Command(cmd[0], cmd[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("%s: %v: %s (a loop device and e2fsprogs are needed)", strings.Join(cmd, " "), err, out)
		}
	}
	t.Cleanup(func() {
		if err := unix.Unmount(dir, unix.MNT_DETACH); err != nil && err != unix.EINVAL {
			t.Logf("unmount %s: %v", dir, err)
		}
	})
}

// criImages is the image service of the podvisor's containerd.
func (p *Podvisor) criImages(t *testing.T) internalapi.ImageManagerService {
	t.Helper()
	paths, err := containerd.PathsFor(p.DataDir)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	is, err := criclient.NewRemoteImageService(ctx, paths.Endpoint(), 10*time.Second, noop.NewTracerProvider(), false)
	if err != nil {
		t.Fatal(err)
	}
	return is
}
