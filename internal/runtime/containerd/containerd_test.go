package containerd

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"
	"go.opentelemetry.io/otel/trace/noop"
	criapi "k8s.io/cri-api/pkg/apis"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	criclient "k8s.io/cri-client/pkg"

	"github.com/podvisor/podvisor/internal/runtime/imagebuild"
)

func criRuntime(t *testing.T, p *Process) criapi.RuntimeService {
	t.Helper()
	rs, err := criclient.NewRemoteRuntimeService(context.Background(), p.Endpoint(), 30*time.Second, noop.NewTracerProvider(), false)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rs.Close(context.Background()) })
	return rs
}

func criImages(t *testing.T, p *Process) criapi.ImageManagerService {
	t.Helper()
	is, err := criclient.NewRemoteImageService(context.Background(), p.Endpoint(), 30*time.Second, noop.NewTracerProvider(), false)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { is.Close(context.Background()) })
	return is
}

func connect(t *testing.T, n *testNode) *Client {
	t.Helper()
	c, err := Connect(context.Background(), n.o.DataDir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

const busyboxRef = "podvisor.test/busybox:1"

// busyboxImage is Debian's static busybox with the applets the tests use.
func busyboxImage(t *testing.T) imagebuild.Image {
	t.Helper()
	bb, err := os.ReadFile("/bin/busybox")
	if err != nil {
		t.Skip("needs Debian's busybox-static:", err)
	}
	img := imagebuild.Image{
		Names:  []string{busyboxRef},
		Files:  []imagebuild.File{imagebuild.Regular("/bin/busybox", 0o755, bb)},
		Config: imagebuild.Config{Cmd: []string{"sh"}, Env: []string{"PATH=/bin"}},
	}
	for _, applet := range []string{"sh", "echo", "sleep", "cat", "ls"} {
		img.Files = append(img.Files, imagebuild.Symlink("/bin/"+applet, "busybox"))
	}
	return img
}

// The CRI answers with the runtime ready and, the CNI config written from
// the pod CIDR, the network ready too; the sandbox image is there, pinned.
func TestStartServesTheCRIWithRuntimeAndNetworkReady(t *testing.T) {
	needRoot(t)
	n := startTest(t)
	ctx := context.Background()
	rs := criRuntime(t, n.p)
	v, err := rs.Version(ctx, "v1")
	if err != nil {
		t.Fatal(err)
	}
	if v.RuntimeName != "containerd" || !strings.Contains(v.RuntimeVersion, "2.") || v.RuntimeApiVersion != "v1" {
		t.Errorf("Version = %+v, want containerd 2.x, CRI v1", v)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		st, err := rs.Status(ctx, false)
		if err != nil {
			t.Fatal(err)
		}
		rt, nw := condition(st, runtimeapi.RuntimeReady), condition(st, runtimeapi.NetworkReady)
		if rt == nil || !rt.Status {
			t.Fatalf("RuntimeReady = %v", rt)
		}
		if nw != nil && nw.Status {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("NetworkReady = %v", nw)
		}
		time.Sleep(100 * time.Millisecond)
	}
	// The runtime config took effect (TOML ignores a misspelt key). The
	// images config is not shown: the native snapshotter test covers it.
	st, err := rs.Status(ctx, true)
	if err != nil {
		t.Fatal(err)
	}
	runc, _ := findRunc()
	for _, want := range []string{
		`"restrictOOMScoreAdj":true`,
		`"BinaryName":"` + runc + `"`,
		`"SystemdCgroup":false`,
		`"runtimePath":"` + n.o.Shim + `"`,
		`"confDir":"` + n.p.Paths().CNIConfDir + `"`,
	} {
		if !strings.Contains(st.Info["config"], want) {
			t.Errorf("CRI config has no %s:\n%s", want, st.Info["config"])
		}
	}
	is := criImages(t, n.p)
	ist, err := is.ImageStatus(ctx, &runtimeapi.ImageSpec{Image: SandboxImage}, false)
	if err != nil || ist.Image == nil {
		t.Fatalf("ImageStatus(%s) = %v, %v", SandboxImage, ist, err)
	}
	if !ist.Image.Pinned {
		t.Errorf("%s is not pinned", SandboxImage)
	}
	if len(n.p.Paths().Socket) > 100 {
		t.Errorf("socket path %q is too long for a unix socket", n.p.Paths().Socket)
	}
}

// Both archive formats, plain or compressed, land in the CRI's namespace;
// a file that is no image archive is refused with a reason.
func TestImportArchivesInEveryFormat(t *testing.T) {
	needRoot(t)
	n := startTest(t)
	ctx := context.Background()
	c := connect(t, n)
	img := busyboxImage(t)

	var docker, oci bytes.Buffer
	img.Names = []string{"podvisor.test/docker:plain"}
	if err := img.WriteArchive(&docker, imagebuild.Docker); err != nil {
		t.Fatal(err)
	}
	img.Names = []string{"podvisor.test/oci:gz"}
	if err := img.WriteArchive(&oci, imagebuild.OCI); err != nil {
		t.Fatal(err)
	}
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write(oci.Bytes())
	zw.Close()

	oci.Reset()
	img.Names = []string{"busybox:zst"} // a short name: normalized as docker does
	if err := img.WriteArchive(&oci, imagebuild.OCI); err != nil {
		t.Fatal(err)
	}
	var zst bytes.Buffer
	enc, _ := zstd.NewWriter(&zst)
	enc.Write(oci.Bytes())
	enc.Close()

	dir := t.TempDir()
	for name, b := range map[string][]byte{"a.tar": docker.Bytes(), "b.tar.gz": gz.Bytes(), "c.tar.zst": zst.Bytes(), "notes.txt": []byte("not an archive")} {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	results := c.ImportDir(ctx, dir)
	if len(results) != 3 {
		t.Fatalf("ImportDir imported %d files, want the 3 archives: %+v", len(results), results)
	}
	for _, r := range results {
		if r.Err != nil {
			t.Errorf("%s: %v", r.File, r.Err)
		}
	}
	is := criImages(t, n.p)
	for _, ref := range []string{"podvisor.test/docker:plain", "podvisor.test/oci:gz", "docker.io/library/busybox:zst"} {
		st, err := is.ImageStatus(ctx, &runtimeapi.ImageSpec{Image: ref}, false)
		if err != nil || st.Image == nil {
			t.Errorf("CRI ImageStatus(%s) = %v, %v", ref, st, err)
		}
	}
	list, err := c.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, i := range list {
		names = append(names, i.Name)
	}
	if want := "docker.io/library/busybox:zst podvisor.test/docker:plain podvisor.test/oci:gz " + SandboxImage; strings.Join(names, " ") != want {
		t.Errorf("List = %v, want %s", names, want)
	}

	bad := filepath.Join(dir, "bad.tar")
	os.WriteFile(bad, []byte("this is not a tar"), 0o644)
	if _, err := c.ImportFile(ctx, bad); err == nil || !strings.Contains(err.Error(), "not an image archive") {
		t.Errorf("ImportFile(not a tar) = %v, want an error saying it is not an image archive", err)
	}
}

// The end-to-end proof: an imported image runs in a pod sandbox with its
// own network, writes its log in the CRI format and exits with its code —
// on overlayfs, and on native, the fallback where overlay cannot mount.
func TestContainerFromImportedImageRunsAndExits(t *testing.T) {
	needRoot(t)
	for _, snapshotter := range []string{"overlayfs", "native"} {
		t.Run(snapshotter, func(t *testing.T) {
			n := startTest(t, func(o *Options) { o.Snapshotter = snapshotter })
			if n.p.Snapshotter() != snapshotter {
				t.Fatalf("snapshotter %s, want %s", n.p.Snapshotter(), snapshotter)
			}
			runExit3(t, n)
		})
	}
}

func runExit3(t *testing.T, n *testNode) {
	ctx := context.Background()
	importBusybox(t, n)
	rs := criRuntime(t, n.p)

	pod, podCfg := runPod(t, rs, "exit3")
	st, err := rs.PodSandboxStatus(ctx, pod, false)
	if err != nil {
		t.Fatal(err)
	}
	ip, err := netip.ParseAddr(st.GetStatus().GetNetwork().GetIp())
	if err != nil || !n.o.PodCIDR.Contains(ip) {
		t.Errorf("pod IP %q (%v), want one in %s", st.GetStatus().GetNetwork().GetIp(), err, n.o.PodCIDR)
	}

	id := createStart(t, rs, pod, podCfg, "main", "sh", "-c", "echo hello from podvisor; echo to stderr >&2; exit 3")
	cs := waitContainer(t, rs, id, runtimeapi.ContainerState_CONTAINER_EXITED)
	if cs.ExitCode != 3 || cs.Reason != "Error" {
		t.Errorf("exit code %d, reason %q; want 3, Error", cs.ExitCode, cs.Reason)
	}
	log, err := os.ReadFile(filepath.Join(podCfg.LogDirectory, "main/0.log"))
	if err != nil {
		t.Fatal(err)
	}
	// CRI log lines: TIMESTAMP STREAM P|F TEXT; the two streams are
	// copied concurrently, so their order is not the program's.
	lines := strings.Split(strings.TrimSpace(string(log)), "\n")
	sort.Slice(lines, func(i, j int) bool { return strings.Fields(lines[i])[1] > strings.Fields(lines[j])[1] })
	if len(lines) != 2 || !strings.HasSuffix(lines[0], " stdout F hello from podvisor") || !strings.HasSuffix(lines[1], " stderr F to stderr") {
		t.Errorf("log:\n%s", log)
	}
	if err := rs.RemoveContainer(ctx, id); err != nil {
		t.Error(err)
	}
}

// containerd stopped while a container runs leaves it running; started
// again, it re-adopts it: still running, exec works, stop reports its exit.
// A container that exits while containerd is down keeps its exit code
// (the shim's exitKeeper).
func TestContainerOutlivesContainerdRestart(t *testing.T) {
	needRoot(t)
	n := startTest(t)
	ctx := context.Background()
	importBusybox(t, n)
	rs := criRuntime(t, n.p)
	pod, podCfg := runPod(t, rs, "restart")
	id := createStart(t, rs, pod, podCfg, "sleeper", "sleep", "1000")
	before := waitContainer(t, rs, id, runtimeapi.ContainerState_CONTAINER_RUNNING)
	brief := createStart(t, rs, pod, podCfg, "brief", "sh", "-c", "sleep 2; exit 9")
	briefStarted := time.Now()

	n.stop()
	if _, err := rs.Version(ctx, "v1"); err == nil {
		t.Fatal("the CRI still answers with containerd stopped")
	}
	time.Sleep(time.Until(briefStarted.Add(3 * time.Second))) // brief exits meanwhile
	n.start()

	rs = criRuntime(t, n.p)
	if cs := waitContainer(t, rs, brief, runtimeapi.ContainerState_CONTAINER_EXITED); cs.ExitCode != 9 || cs.Reason != "Error" {
		t.Errorf("a container that exited while containerd was down: exit code %d, reason %q; want 9, Error", cs.ExitCode, cs.Reason)
	}
	after := waitContainer(t, rs, id, runtimeapi.ContainerState_CONTAINER_RUNNING)
	if after.StartedAt != before.StartedAt {
		t.Errorf("started at %d, then %d: the container was restarted", before.StartedAt, after.StartedAt)
	}
	out, _, err := rs.ExecSync(ctx, id, []string{"echo", "adopted"}, 10*time.Second)
	if err != nil || string(out) != "adopted\n" {
		t.Errorf("ExecSync after the restart = %q, %v", out, err)
	}
	if err := rs.StopContainer(ctx, id, 1); err != nil {
		t.Fatal(err)
	}
	cs := waitContainer(t, rs, id, runtimeapi.ContainerState_CONTAINER_EXITED)
	if cs.ExitCode != 137 && cs.ExitCode != 143 {
		t.Errorf("exit code after stop = %d, want 137 or 143", cs.ExitCode)
	}
}

// A missing piece is named before anything starts.
func TestStartNamesTheMissingPiece(t *testing.T) {
	needRoot(t)
	for _, tc := range []struct {
		name string
		set  func(*testing.T, *Options)
		want string
	}{
		{"runc", func(t *testing.T, o *Options) { o.Runc = "/nonexistent/runc" }, "apt-get install runc"},
		{"shim", func(t *testing.T, o *Options) { o.Shim = "/nonexistent/" + ShimBinary }, ShimBinary},
		{"containerd", func(t *testing.T, o *Options) { o.Daemon = nil; t.Setenv("PATH", t.TempDir()) }, "go build -o bin/ ./cmd/" + DaemonBinary},
		{"containerd given", func(t *testing.T, o *Options) { o.Daemon = []string{"/nonexistent/" + DaemonBinary} }, "/nonexistent/" + DaemonBinary},
		{"cni", func(t *testing.T, o *Options) { o.CNIBinDirs = []string{t.TempDir()} }, "containernetworking-plugins"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := testOptions(t, t.TempDir())
			tc.set(t, &o)
			p, err := Start(context.Background(), o)
			if err == nil {
				p.Stop(context.Background())
				t.Fatal("Start succeeded")
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q does not say %q", err, tc.want)
			}
		})
	}
}

func importBusybox(t *testing.T, n *testNode) {
	t.Helper()
	importBusyboxAt(t, n.o.DataDir)
}

func importBusyboxAt(t *testing.T, dataDir string) {
	t.Helper()
	var b bytes.Buffer
	if err := busyboxImage(t).WriteArchive(&b, imagebuild.OCI); err != nil {
		t.Fatal(err)
	}
	c, err := Connect(context.Background(), dataDir)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Import(context.Background(), &b); err != nil {
		t.Fatal(err)
	}
}

func runPod(t *testing.T, rs criapi.RuntimeService, name string) (string, *runtimeapi.PodSandboxConfig) {
	t.Helper()
	cfg := &runtimeapi.PodSandboxConfig{
		Metadata:     &runtimeapi.PodSandboxMetadata{Name: name, Namespace: "default", Uid: name + "-uid"},
		Hostname:     name,
		LogDirectory: t.TempDir(),
		Linux:        &runtimeapi.LinuxPodSandboxConfig{CgroupParent: "/podvisor-test"},
	}
	id, err := rs.RunPodSandbox(context.Background(), cfg, "")
	if err != nil {
		t.Fatal(err)
	}
	return id, cfg
}

// createStart creates and starts the container name in pod, running cmd in
// busybox, with its log in the pod's log directory as NAME/0.log.
func createStart(t *testing.T, rs criapi.RuntimeService, pod string, podCfg *runtimeapi.PodSandboxConfig, name string, cmd ...string) string {
	t.Helper()
	ctx := context.Background()
	id, err := rs.CreateContainer(ctx, pod, &runtimeapi.ContainerConfig{
		Metadata: &runtimeapi.ContainerMetadata{Name: name},
		Image:    &runtimeapi.ImageSpec{Image: busyboxRef},
		Command:  cmd,
		LogPath:  name + "/0.log",
	}, podCfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := rs.StartContainer(ctx, id); err != nil {
		t.Fatal(err)
	}
	return id
}

func waitContainer(t *testing.T, rs criapi.RuntimeService, id string, state runtimeapi.ContainerState) *runtimeapi.ContainerStatus {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		st, err := rs.ContainerStatus(context.Background(), id, false)
		if err != nil {
			t.Fatal(err)
		}
		if st.Status.State == state {
			return st.Status
		}
		if time.Now().After(deadline) {
			t.Fatalf("container %s is %v, want %v", id, st.Status.State, state)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// podvisor killed (a crash, kill -9) takes its containerd with it
// (Pdeathsig) but not the containers: the next podvisor's containerd
// re-adopts them.
func TestContainersOutliveAKilledPodvisor(t *testing.T) {
	needRoot(t)
	o := testOptions(t, t.TempDir())
	self, err := os.Executable() // this test binary plays podvisor (TestMain)
	if err != nil {
		t.Fatal(err)
	}
	podvisor := exec.Command(self, "podvisor", o.DataDir, o.Shim)
	out, err := podvisor.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := podvisor.Start(); err != nil {
		t.Fatal(err)
	}
	n := &testNode{t: t, o: o}
	t.Cleanup(n.cleanUp)
	defer podvisor.Process.Kill()
	line, err := bufio.NewReader(out).ReadString('\n')
	var containerdPid int
	if _, serr := fmt.Sscanf(line, "ready %d", &containerdPid); err != nil || serr != nil {
		t.Fatalf("podvisor: %q, %v", line, err)
	}
	paths, _ := PathsFor(o.DataDir)
	rs, err := criclient.NewRemoteRuntimeService(context.Background(), paths.Endpoint(), 30*time.Second, noop.NewTracerProvider(), false)
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close(context.Background())
	importBusyboxAt(t, o.DataDir)
	pod, podCfg := runPod(t, rs, "crash")
	id, err := rs.CreateContainer(context.Background(), pod, &runtimeapi.ContainerConfig{
		Metadata: &runtimeapi.ContainerMetadata{Name: "sleeper"},
		Image:    &runtimeapi.ImageSpec{Image: busyboxRef},
		Command:  []string{"sleep", "1000"},
	}, podCfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := rs.StartContainer(context.Background(), id); err != nil {
		t.Fatal(err)
	}
	before := waitContainer(t, rs, id, runtimeapi.ContainerState_CONTAINER_RUNNING)

	podvisor.Process.Signal(syscall.SIGKILL)
	podvisor.Wait()
	for deadline := time.Now().Add(10 * time.Second); syscall.Kill(containerdPid, 0) == nil; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("containerd (pid %d) outlived its podvisor", containerdPid)
		}
	}

	n.start()
	after := waitContainer(t, criRuntime(t, n.p), id, runtimeapi.ContainerState_CONTAINER_RUNNING)
	if after.StartedAt != before.StartedAt {
		t.Errorf("started at %d, then %d: the container was restarted", before.StartedAt, after.StartedAt)
	}
}
