package crictl

import (
	"bytes"
	"reflect"
	"strings"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

var now = time.Unix(1_800_000_000, 0)

func TestPsRows(t *testing.T) {
	c := &runtimeapi.Container{
		Id: "0123456789abcdef0123", PodSandboxId: "fedcba9876543210fedc",
		Metadata:  &runtimeapi.ContainerMetadata{Name: "web", Attempt: 2},
		Image:     &runtimeapi.ImageSpec{Image: "sha256:aaaaaaaaaaaaaaaaaaaaaaaa"},
		State:     runtimeapi.ContainerState_CONTAINER_RUNNING,
		CreatedAt: now.Add(-3 * time.Minute).UnixNano(),
		Labels:    map[string]string{podNameLabel: "hello", podNamespaceLabel: "default"},
	}
	want := []string{"0123456789abc", "aaaaaaaaaaaaa", "3 minutes ago", "Running", "web", "2", "fedcba9876543", "hello", "default"}
	if got := psRows([]*runtimeapi.Container{c}, now, false); !reflect.DeepEqual(got, [][]string{want}) {
		t.Errorf("psRows = %q\nwant     %q", got, want)
	}
	if got := psRows([]*runtimeapi.Container{c}, now, true)[0]; got[0] != c.Id || got[1] != c.Image.Image {
		t.Errorf("--no-trunc row %q keeps the whole IDs", got)
	}
	c.Image.Image = "docker.io/library/busybox:latest"
	c.State = runtimeapi.ContainerState_CONTAINER_EXITED
	if got := psRows([]*runtimeapi.Container{c}, now, false)[0]; got[1] != "docker.io/library/busybox:latest" || got[3] != "Exited" {
		t.Errorf("row %q: want the image reference whole and state Exited", got)
	}
}

func TestPodsRows(t *testing.T) {
	p := &runtimeapi.PodSandbox{Id: "abcdefabcdefabcdef", State: runtimeapi.PodSandboxState_SANDBOX_NOTREADY,
		Metadata: &runtimeapi.PodSandboxMetadata{Name: "hello", Namespace: "ns", Attempt: 0}, CreatedAt: now.Add(-2 * time.Hour).UnixNano()}
	want := []string{"abcdefabcdefa", "2 hours ago", "NotReady", "hello", "ns", "0", "(default)"}
	if got := podsRows([]*runtimeapi.PodSandbox{p}, now, false); !reflect.DeepEqual(got, [][]string{want}) {
		t.Errorf("podsRows = %q\nwant       %q", got, want)
	}
}

func TestImagesRows(t *testing.T) {
	imgs := []*runtimeapi.Image{
		{Id: "sha256:1111111111111111111111", RepoTags: []string{"docker.io/library/busybox:latest", "localhost:5000/bb:1"}, Size: 2_000_000},
		{Id: "sha256:2222222222222222222222", RepoDigests: []string{"registry.k8s.io/pause@sha256:abc"}, Size: 700_000},
	}
	want := [][]string{
		{"docker.io/library/busybox", "latest", "1111111111111", "2MB"},
		{"localhost:5000/bb", "1", "1111111111111", "2MB"},
		{"registry.k8s.io/pause", "<none>", "2222222222222", "700kB"},
	}
	if got := imagesRows(imgs, false); !reflect.DeepEqual(got, want) {
		t.Errorf("imagesRows = %q\nwant         %q", got, want)
	}
}

// crictl's layout: columns padded to 20 characters and 3 spaces apart.
func TestWriteTableLayout(t *testing.T) {
	var b bytes.Buffer
	if err := writeTable(&b, podsHeader, [][]string{{"abcdefabcdefa", "2 hours ago", "Ready", "hello", "ns", "0", "(default)"}}); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimRight(b.String(), "\n"), "\n")
	if len(lines) != 2 || !strings.HasPrefix(lines[0], "POD ID              CREATED") || !strings.HasPrefix(lines[1], "abcdefabcdefa       2 hours ago") {
		t.Errorf("table:\n%s", b.String())
	}
}
