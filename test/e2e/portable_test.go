package e2e

import (
	"cmp"
	"crypto/rand"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	"github.com/podvisor/podvisor/test/images"
)

// What lets a test mean the same on both runtimes. On the process runtime
// a container is a host process: it shares the host's files, network and
// process IDs. On containerd it has its own root filesystem, network
// namespace (127.0.0.1 is the pod itself; probes and hooks reach it at its
// pod IP) and PID namespace. Tests therefore share files through hostPath
// mounts, find processes by their environment, and serve probe and hook
// targets from pods.

// e2eRuntime is the runtime the suite's podvisors use unless a test asks
// for one: PODVISOR_E2E_RUNTIME, else containerd, podvisor's default.
func e2eRuntime() string { return cmp.Or(os.Getenv("PODVISOR_E2E_RUNTIME"), "containerd") }

// processRuntimeOnly skips a test of something no runtime changes (the
// control plane, operations, the timeline's page) unless the suite runs on
// the process runtime: .ci/run runs the suite on both, and the containerd
// half, already the heavier, need not start another podvisor and containerd
// for it.
func processRuntimeOnly(t *testing.T) {
	t.Helper()
	if e2eRuntime() != "process" {
		t.Skip("runtime-independent: runs with PODVISOR_E2E_RUNTIME=process")
	}
}

// shareHostDirs mounts each host directory at the same path in every
// container of pod, so that the files the test and its containers read and
// write are the same files on either runtime.
func shareHostDirs(pod *v1.Pod, dirs ...string) {
	for i, dir := range dirs {
		name := fmt.Sprintf("e2e-host-dir-%d", i)
		pod.Spec.Volumes = append(pod.Spec.Volumes, v1.Volume{Name: name, VolumeSource: v1.VolumeSource{
			HostPath: &v1.HostPathVolumeSource{Path: dir, Type: ptr.To(v1.HostPathDirectory)}}})
		for _, list := range [][]v1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
			for j := range list {
				list[j].VolumeMounts = append(list[j].VolumeMounts, v1.VolumeMount{Name: name, MountPath: dir})
			}
		}
	}
}

// processTagEnv names the environment variable tagProcesses sets.
const processTagEnv = "PODVISOR_E2E_PROCESS_TAG"

// tagProcesses gives container c an environment variable of its own and
// returns its value: taggedProcesses(tag) then lists the
// container's processes, what they started and exec sessions in it, on
// either runtime (a PID that a containerd container sees is one of its own
// namespace, not the host's).
func tagProcesses(c *v1.Container) string {
	tag := rand.Text()
	c.Env = append(c.Env, v1.EnvVar{Name: processTagEnv, Value: tag})
	return tag
}

// startOrphan is a shell command that starts a process in a session of its
// own, which outlives the shell, and returns once it runs: it has created
// the file dir/orphan.
func startOrphan(dir string) string {
	return fmt.Sprintf(`setsid sh -c 'touch %[1]s/orphan; exec sleep 3600' & while [ ! -e %[1]s/orphan ]; do sleep 0.1; done`, dir)
}

// waitFile waits for a file a container writes.
func waitFile(t *testing.T, path string) {
	t.Helper()
	Eventually(t, 30*time.Second, "file "+path, func() (bool, error) {
		_, err := os.Stat(path)
		return err == nil, err
	})
}

// armedTrap is a shell script that sets trap action for SIGTERM, then
// touches dir/name.armed, then runs loop. A container is reported running
// before its shell has run a line: a SIGTERM sent before the trap is set is
// lost (PID 1 of a pid namespace, on containerd) or ends the shell at once
// (the process runtime), so a test that signals a trapping container waits
// for waitArmed first.
func armedTrap(dir, name, action, loop string) string {
	return "trap '" + action + "' TERM; touch '" + filepath.Join(dir, name+".armed") + "'; " + loop
}

// waitArmed waits until the armedTrap scripts of names in dir have set their
// traps.
func waitArmed(t *testing.T, dir string, names ...string) {
	t.Helper()
	for _, name := range names {
		waitFile(t, filepath.Join(dir, name+".armed"))
	}
}

// timestamp is a shell command that prints the seconds since boot with
// hundredths: the same clock on the host and in any container, finer than
// busybox's date, which has no %N. It has no single quote, so that it fits
// in a trap '...'.
const timestamp = `cut -d" " -f1 /proc/uptime`

// sleepUntilTERM sleeps for an hour and exits 0 on SIGTERM. A plain
// "sleep 3600" does not end on SIGTERM on containerd: it runs as PID 1 of
// its namespace, which has no default action for the signal.
const sleepUntilTERM = "trap 'exit 0' TERM; sleep 3600 & wait"

// testserver is a container running the testserver program with args: the
// testserver image on containerd, a host copy of the program on the process
// runtime.
func (p *Podvisor) testserver(t *testing.T, name string, args ...string) v1.Container {
	t.Helper()
	if p.Runtime != "containerd" {
		return v1.Container{Name: name, Image: "none", Command: append([]string{images.Program(t, "testserver")}, args...)}
	}
	p.testserverImport.Do(func() { importImages(t, p.DataDir, "testserver") })
	return v1.Container{Name: name, Image: images.TestserverImage, ImagePullPolicy: v1.PullIfNotPresent, Args: args}
}

// taggedProcesses lists the live processes of the container tagProcesses tagged.
func taggedProcesses(tag string) []int { return processesWithEnv(processTagEnv, tag) }
