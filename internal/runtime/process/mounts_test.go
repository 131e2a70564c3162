package process

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/podvisor/podvisor/internal/runtime"
)

func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
}

func TestMountsAreBoundAtContainerPathsOnlyInsideTheContainer(t *testing.T) {
	needRoot(t)
	r := newRuntime(t, t.TempDir())
	src, ro := t.TempDir(), t.TempDir()
	os.WriteFile(filepath.Join(src, "key"), []byte("value"), 0o644)
	os.WriteFile(filepath.Join(ro, "key"), []byte("ro"), 0o644)
	target := filepath.Join(t.TempDir(), "not", "there", "yet")
	roTarget := filepath.Join(t.TempDir(), "ro")
	spec := testSpec(t, "sh", "-c", `cat "$1/key"; echo; echo written > "$1/new"; cat "$2/key"; echo; if echo x > "$2/new"; then echo ro-writable; fi`, "sh", target, roTarget)
	spec.Mounts = []runtime.Mount{{HostPath: src, ContainerPath: target}, {HostPath: ro, ContainerPath: roTarget, ReadOnly: true}}
	id := run(t, r, spec)
	if st := waitExit(t, r, id); st.ExitCode != 0 {
		t.Fatalf("exit %d %q", st.ExitCode, st.Message)
	}
	b, _ := os.ReadFile(spec.LogPath)
	log := string(b)
	for _, want := range []string{" F value\n", " F ro\n"} {
		if !strings.Contains(log, want) {
			t.Errorf("log lacks %q:\n%s", want, log)
		}
	}
	if strings.Contains(log, "ro-writable") {
		t.Errorf("read-only mount was writable:\n%s", log)
	}
	if b, err := os.ReadFile(filepath.Join(src, "new")); err != nil || string(b) != "written\n" {
		t.Errorf("write through the mount: %q %v", b, err)
	}
	// The mount point was created, but the host sees no mount on it.
	if entries, err := os.ReadDir(target); err != nil || len(entries) != 0 {
		t.Errorf("host view of the mount point: %v %v", entries, err)
	}
}

func TestTerminationLogIsAtItsPathWithoutTouchingHostDev(t *testing.T) {
	needRoot(t)
	if _, err := os.Lstat("/dev/termination-log"); err == nil {
		t.Skip("the host has a /dev/termination-log")
	}
	r := newRuntime(t, t.TempDir())
	id := run(t, r, testSpec(t, "sh", "-c", "echo -n DONE > /dev/termination-log && test -c /dev/null && test -d /dev/pts"))
	st := waitExit(t, r, id)
	if st.ExitCode != 0 {
		t.Fatalf("exit %d %q", st.ExitCode, st.Message)
	}
	if b, err := os.ReadFile(st.TerminationMessageFile); err != nil || string(b) != "DONE" {
		t.Errorf("termination message %q, %v", b, err)
	}
	if _, err := os.Lstat("/dev/termination-log"); err == nil {
		t.Error("/dev/termination-log was created on the host")
	}
}

// privateDev binds the host's /dev/shm into the private /dev: a termination
// message path (or mountPath) in it used to create the file in the host's
// /dev/shm. Found by the hostile-specs e2e test.
func TestMountPointInAHostDirectoryOfDevIsRefused(t *testing.T) {
	needRoot(t)
	if fi, err := os.Stat("/dev/shm"); err != nil || !fi.IsDir() {
		t.Skip("the host has no /dev/shm")
	}
	name := filepath.Join("/dev/shm", fmt.Sprintf("podvisor-test-%d", os.Getpid()))
	t.Cleanup(func() { os.Remove(name) })
	r := newRuntime(t, t.TempDir())
	spec := testSpec(t, "sh", "-c", "echo -n bye > "+name)
	spec.TerminationMessagePath = name
	st := waitExit(t, r, run(t, r, spec))
	if st.Reason != "StartError" || !strings.Contains(st.Message, "/dev/shm is the host's") {
		t.Errorf("got %q %q, want StartError naming /dev/shm", st.Reason, st.Message)
	}
	if _, err := os.Lstat(name); err == nil {
		t.Errorf("%s was created on the host", name)
	}
	// Missing mount points under /dev proper still land on the private /dev.
	spec = testSpec(t, "sh", "-c", "echo -n ok > /dev/podvisor-test/deep/log")
	spec.TerminationMessagePath = "/dev/podvisor-test/deep/log"
	if st := waitExit(t, r, run(t, r, spec)); st.ExitCode != 0 {
		t.Errorf("a new path under /dev: exit %d %q", st.ExitCode, st.Message)
	}
	if _, err := os.Lstat("/dev/podvisor-test"); err == nil {
		t.Error("/dev/podvisor-test was created on the host")
	}
}

func TestMountPointThatCannotBeCreatedIsStartError(t *testing.T) {
	needRoot(t)
	r := newRuntime(t, t.TempDir())
	file := filepath.Join(t.TempDir(), "file")
	os.WriteFile(file, nil, 0o644)
	spec := testSpec(t, "true")
	spec.Mounts = []runtime.Mount{{HostPath: t.TempDir(), ContainerPath: filepath.Join(file, "sub")}}
	id := run(t, r, spec)
	st := waitExit(t, r, id)
	if st.Reason != "StartError" || !strings.Contains(st.Message, "cannot create the mount point") {
		t.Errorf("got %q %q, want StartError naming the mount point", st.Reason, st.Message)
	}
}

func TestRunAsUserAndGroups(t *testing.T) {
	needRoot(t)
	r := newRuntime(t, t.TempDir())
	spec := testSpec(t, "sh", "-c", `echo "uid=$(id -u) gid=$(id -g) groups=$(id -G) cwd=$(pwd)"`)
	spec.User = &runtime.Credential{UID: 1000, GID: 3000, Groups: []uint32{4000}}
	id := run(t, r, spec)
	if st := waitExit(t, r, id); st.ExitCode != 0 {
		t.Fatalf("exit %d %q", st.ExitCode, st.Message)
	}
	waitLog(t, spec.LogPath, " F uid=1000 gid=3000 groups=3000 4000 cwd=/\n")
}

func TestMemoryLimitKillIsOOMKilled(t *testing.T) {
	needRoot(t)
	r := newRuntime(t, t.TempDir())
	if !r.features().Limits {
		t.Skip("no cgroups")
	}
	spec := testSpec(t, "sh", "-c", "tail /dev/zero")
	spec.Resources.MemoryLimitBytes = 20 << 20
	id := run(t, r, spec)
	st := waitExit(t, r, id)
	if st.Reason != "OOMKilled" || st.ExitCode != 137 {
		t.Errorf("got reason %q exit %d, want OOMKilled 137", st.Reason, st.ExitCode)
	}
}

func TestLimitsAreWrittenToTheContainersCgroup(t *testing.T) {
	needRoot(t)
	r := newRuntime(t, t.TempDir())
	if !r.features().Limits {
		t.Skip("no cgroups")
	}
	spec := testSpec(t, "sleep", "30")
	spec.Resources = runtime.Resources{MemoryLimitBytes: 64 << 20, CPUQuotaMicros: 50000, CPUPeriodMicros: 100000, CPUShares: 512}
	id := run(t, r, spec)
	st, err := instanceDir(filepath.Join(r.root, id)).readState()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{}
	if unified() {
		want["memory.max"] = "67108864"
		want["cpu.max"] = "50000 100000"
		want["cpu.weight"] = "20"
	} else {
		want["memory.limit_in_bytes"] = "67108864"
		want["cpu.cfs_quota_us"] = "50000"
		want["cpu.shares"] = "512"
	}
	for file, v := range want {
		found := false
		for _, d := range st.Cgroups {
			if b, err := os.ReadFile(filepath.Join(d, file)); err == nil {
				found = true
				if strings.TrimSpace(string(b)) != v {
					t.Errorf("%s = %q, want %q", file, strings.TrimSpace(string(b)), v)
				}
			}
		}
		if !found && !strings.HasPrefix(file, "cpu") { // the cpu hierarchy is optional on v1
			t.Errorf("%s not found in %v", file, st.Cgroups)
		}
	}
}

func TestLimitWritesPerCgroupVersion(t *testing.T) {
	res := runtime.Resources{MemoryLimitBytes: 1 << 20, CPUQuotaMicros: 25000, CPUShares: 2}
	got := limitWrites("/x", res, true)
	want := []cgroupWrite{{file: "memory.max", value: "1048576"}, {file: "memory.swap.max", value: "0", optional: true},
		{file: "cpu.max", value: "25000 100000"}, {file: "cpu.weight", value: "1"}}
	if len(got) != len(want) {
		t.Fatalf("v2 writes %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("v2 write %d = %v, want %v", i, got[i], want[i])
		}
	}
	if got := limitWrites(filepath.Join(cgroupRoot, "cpu", "a", "b"), res, false); len(got) != 3 || got[1].file != "cpu.cfs_quota_us" || got[2].value != "2" {
		t.Errorf("v1 cpu writes %v", got)
	}
	if got := limitWrites(filepath.Join(cgroupRoot, "pids", "a"), res, false); len(got) != 0 {
		t.Errorf("v1 pids writes %v", got)
	}
	if w := sharesToWeight(1024); w != 39 {
		t.Errorf("sharesToWeight(1024) = %d, want 39", w)
	}
}

func TestExecSeesTheContainersMounts(t *testing.T) {
	needRoot(t)
	r := newRuntime(t, t.TempDir())
	src := t.TempDir()
	os.WriteFile(filepath.Join(src, "key"), []byte("from-volume"), 0o644)
	target := filepath.Join(t.TempDir(), "vol")
	spec := testSpec(t, "sleep", "30")
	spec.Mounts = []runtime.Mount{{HostPath: src, ContainerPath: target, ReadOnly: true}}
	id := run(t, r, spec)
	waitEvent(t, r, id, runtime.StateRunning)
	var out strings.Builder
	code, err := r.Exec(context.Background(), id, []string{"cat", filepath.Join(target, "key"), "/dev/termination-log"}, &out, &out, waitLimit)
	if err != nil || code != 0 || out.String() != "from-volume" {
		t.Errorf("exec: code %d err %v output %q", code, err, out.String())
	}
}
