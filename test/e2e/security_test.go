package e2e

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/podvisor/podvisor/test/images"
)

// What a container on containerd may do, as its securityContext says —
// observed from inside: /proc/self/status (capabilities, no_new_privs,
// seccomp), a read-only root, /proc masking, the PID namespace it sees,
// the pod's sysctls; and a pod with a sysctl the node does not allow is
// refused with upstream's reason.
func TestContainerdSecurityContext(t *testing.T) {
	t.Parallel()
	p := NewContainerdPodvisor(t, "--config", kubeletConfig(t, "allowedUnsafeSysctls: [net.core.somaxconn]\n"))
	p.Start()
	ns := p.Namespace("security")
	status := `grep -E '^(CapEff|NoNewPrivs|Seccomp):' /proc/self/status`
	run := func(name, script string, mod func(*v1.Pod)) {
		pod := p.imagePod(ns, name, images.BusyboxImage, v1.RestartPolicyNever, []string{"sh", "-c", script}, nil)
		if mod != nil {
			mod(pod)
		}
		p.create(t, pod)
	}
	sc := func(s *v1.SecurityContext) func(*v1.Pod) {
		return func(pod *v1.Pod) { pod.Spec.Containers[0].SecurityContext = s }
	}
	run("defaults", status+"; wc -c < /proc/timer_list; echo root > /rootfs-test && echo wrote; cat /proc/1/cmdline | tr '\\0' ' '; echo", nil)
	run("restricted", status+"; echo x > /rootfs-test || echo refused", sc(&v1.SecurityContext{
		ReadOnlyRootFilesystem: ptr.To(true), AllowPrivilegeEscalation: ptr.To(false),
		Capabilities:   &v1.Capabilities{Drop: []v1.Capability{"ALL"}, Add: []v1.Capability{"NET_BIND_SERVICE"}},
		SeccompProfile: &v1.SeccompProfile{Type: v1.SeccompProfileTypeRuntimeDefault}}))
	run("privileged", status+"; wc -c < /proc/timer_list", sc(&v1.SecurityContext{Privileged: ptr.To(true)}))
	run("shared-pids", "cat /proc/1/cmdline | tr '\\0' ' '; echo", func(pod *v1.Pod) { pod.Spec.ShareProcessNamespace = ptr.To(true) })
	run("host-pids", "cat /proc/1/cmdline | tr '\\0' ' '; echo", func(pod *v1.Pod) { pod.Spec.HostPID = true })
	run("sysctls", "cat /proc/sys/net/ipv4/ip_unprivileged_port_start /proc/sys/net/core/somaxconn", func(pod *v1.Pod) {
		pod.Spec.SecurityContext = &v1.PodSecurityContext{Sysctls: []v1.Sysctl{
			{Name: "net.ipv4.ip_unprivileged_port_start", Value: "0"}, {Name: "net.core.somaxconn", Value: "1234"}}}
	})
	run("apparmor", "cat /proc/self/attr/current", sc(&v1.SecurityContext{AppArmorProfile: &v1.AppArmorProfile{Type: v1.AppArmorProfileTypeRuntimeDefault}}))
	run("forbidden-sysctl", "true", func(pod *v1.Pod) {
		pod.Spec.SecurityContext = &v1.PodSecurityContext{Sysctls: []v1.Sysctl{{Name: "net.ipv4.tcp_max_syn_backlog", Value: "1"}}}
	})

	out := func(name string) string {
		p.waitPod(t, ns, name, 90*time.Second, "succeeded", func(pod *v1.Pod) bool { return pod.Status.Phase == v1.PodSucceeded })
		log, err := p.logs(ns, name, "c")
		if err != nil {
			t.Fatal(err)
		}
		return log
	}
	expect := func(name, log string, want ...string) {
		t.Helper()
		for _, w := range want {
			if !strings.Contains(log, w) {
				t.Errorf("%s: no %q in\n%s", name, w, log)
			}
		}
	}
	// containerd's default set: CHOWN DAC_OVERRIDE FSETID FOWNER MKNOD
	// NET_RAW SETGID SETUID SETFCAP SETPCAP NET_BIND_SERVICE SYS_CHROOT
	// KILL AUDIT_WRITE.
	expect("defaults", out("defaults"), "CapEff:\t00000000a80425fb", "NoNewPrivs:\t0", "Seccomp:\t0",
		"\n0\n", "wrote", "sh -c ")
	expect("restricted", out("restricted"), "CapEff:\t0000000000000400", "NoNewPrivs:\t1", "Seccomp:\t2",
		"Read-only file system", "refused")
	// Privileged: every capability the node's bounding set has (podvisor's own).
	self, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	_, bnd, _ := strings.Cut(string(self), "CapBnd:\t")
	bnd, _, _ = strings.Cut(bnd, "\n")
	privileged := out("privileged")
	expect("privileged", privileged, "CapEff:\t"+bnd+"\n", "Seccomp:\t0")
	if strings.Contains(privileged, "\n0\n") {
		t.Errorf("privileged: /proc/timer_list is masked:\n%s", privileged)
	}
	expect("shared-pids", out("shared-pids"), "/pause")
	var init []byte
	init, err = os.ReadFile("/proc/1/cmdline")
	if err != nil {
		t.Fatal(err)
	}
	expect("host-pids", out("host-pids"), strings.ReplaceAll(string(init), "\x00", " "))
	expect("sysctls", out("sysctls"), "0\n1234\n")

	// AppArmor is enforced where the host has it, refused (not faked) where not.
	if aa, _ := os.ReadFile("/sys/module/apparmor/parameters/enabled"); strings.HasPrefix(string(aa), "Y") {
		expect("apparmor", out("apparmor"), "cri-containerd.apparmor.d")
	} else {
		pod := p.waitPod(t, ns, "apparmor", 30*time.Second, "refused", func(pod *v1.Pod) bool { return pod.Status.Phase == v1.PodFailed })
		if pod.Status.Reason != "AppArmor" || pod.Status.Message != "Pod was rejected: Cannot enforce AppArmor: AppArmor is not enabled on the host" {
			t.Errorf("apparmor pod on a host without AppArmor: reason %q, message %q", pod.Status.Reason, pod.Status.Message)
		}
	}
	refused := p.waitPod(t, ns, "forbidden-sysctl", 30*time.Second, "refused", func(pod *v1.Pod) bool { return pod.Status.Phase == v1.PodFailed })
	if refused.Status.Reason != "SysctlForbidden" ||
		!strings.Contains(refused.Status.Message, `forbidden sysctl: "net.ipv4.tcp_max_syn_backlog" not allowlisted`) {
		t.Errorf("refused pod: reason %q message %q", refused.Status.Reason, refused.Status.Message)
	}
}

// A container over its memory limit is killed by the kernel's OOM killer
// in its cgroup: terminated with exit code 137 and reason OOMKilled, as
// upstream shows it; the pod's other container is untouched.
func TestContainerdMemoryLimitOOMKilled(t *testing.T) {
	t.Parallel()
	p := NewContainerdPodvisor(t)
	p.Start()
	ns := p.Namespace("oom")
	pod := p.pod(ns, "hog", v1.RestartPolicyNever,
		v1.Container{Name: "hog", Image: images.BusyboxImage, ImagePullPolicy: v1.PullIfNotPresent,
			// 64 MiB into a shell variable, under a 16 MiB limit.
			Command:   []string{"sh", "-c", "x=$(head -c 67108864 /dev/zero | tr '\\0' a); echo survived ${#x}"},
			Resources: v1.ResourceRequirements{Limits: v1.ResourceList{v1.ResourceMemory: resource.MustParse("16Mi")}}},
		v1.Container{Name: "calm", Image: images.BusyboxImage, ImagePullPolicy: v1.PullIfNotPresent,
			Command: []string{"sh", "-c", "sleep 2; echo fine"}})
	p.create(t, pod)
	// The phase follows the containers' states once the sandbox is stopped
	// (lifecycle.HoldTerminalPhase).
	done := p.waitPod(t, ns, "hog", 90*time.Second, "both containers terminated, in a terminal phase", func(pod *v1.Pod) bool {
		return terminated(pod, "hog") != nil && terminated(pod, "calm") != nil &&
			(pod.Status.Phase == v1.PodFailed || pod.Status.Phase == v1.PodSucceeded)
	})
	if term := terminated(done, "hog"); term.Reason != "OOMKilled" || term.ExitCode != 137 {
		t.Errorf("hog terminated %+v, want OOMKilled with exit code 137", term)
	}
	if term := terminated(done, "calm"); term.ExitCode != 0 || term.Reason != "Completed" {
		t.Errorf("calm terminated %+v, want Completed", term)
	}
	if done.Status.Phase != v1.PodFailed {
		t.Errorf("phase %s, want Failed", done.Status.Phase)
	}
}

// Pods live in the kubelet's cgroup hierarchy by QoS class, their cgroup
// holding the pod's summed limits; the cgroup goes with the pod.
func TestContainerdPodCgroups(t *testing.T) {
	t.Parallel()
	p := NewContainerdPodvisor(t)
	p.Start()
	ns := p.Namespace("cgroups")
	limits := v1.ResourceList{v1.ResourceCPU: resource.MustParse("100m"), v1.ResourceMemory: resource.MustParse("24Mi")}
	sleeper := func(name string) v1.Container {
		return v1.Container{Name: name, Image: images.BusyboxImage, ImagePullPolicy: v1.PullIfNotPresent,
			Command: []string{"sleep", "3600"}}
	}
	a, b := sleeper("a"), sleeper("b")
	a.Resources = v1.ResourceRequirements{Requests: limits, Limits: limits}
	b.Resources = v1.ResourceRequirements{Requests: limits, Limits: limits}
	guaranteed := p.pod(ns, "guaranteed", v1.RestartPolicyNever, a, b)
	guaranteed.Spec.TerminationGracePeriodSeconds = new(int64)
	besteffort := p.pod(ns, "besteffort", v1.RestartPolicyNever, sleeper("c"))
	besteffort.Spec.TerminationGracePeriodSeconds = new(int64)
	g := p.create(t, guaranteed)
	be := p.create(t, besteffort)
	p.waitRunning(t, ns, "guaranteed")
	p.waitRunning(t, ns, "besteffort")

	_, v1err := os.Stat("/sys/fs/cgroup/memory")
	dir := func(controller, rel string) string {
		if v1err != nil {
			return "/sys/fs/cgroup" + rel
		}
		return "/sys/fs/cgroup/" + controller + rel
	}
	read := func(path string) string {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(string(b))
	}
	gdir, bedir := "/kubepods/pod"+string(g.UID), "/kubepods/besteffort/pod"+string(be.UID)
	if v1err == nil {
		if got := read(dir("memory", gdir) + "/memory.limit_in_bytes"); got != "50331648" {
			t.Errorf("guaranteed pod's memory limit %s, want 48 MiB", got)
		}
		if got := read(dir("cpu", gdir) + "/cpu.cfs_quota_us"); got != "20000" {
			t.Errorf("guaranteed pod's CPU quota %s, want 20000 (200m)", got)
		}
		if got := read(dir("cpu", bedir) + "/cpu.shares"); got != "2" {
			t.Errorf("besteffort pod's CPU shares %s, want 2", got)
		}
	} else {
		if got := read(dir("", gdir) + "/memory.max"); got != "50331648" {
			t.Errorf("guaranteed pod's memory.max %s, want 48 MiB", got)
		}
	}
	// Every container of the pod runs inside its cgroup.
	entries, err := os.ReadDir(dir("memory", gdir))
	if err != nil {
		t.Fatal(err)
	}
	procs := 0
	for _, e := range entries {
		if e.IsDir() {
			procs += len(strings.Fields(read(dir("memory", gdir) + "/" + e.Name() + "/cgroup.procs")))
		}
	}
	if procs != 3 { // pause, a, b
		t.Errorf("%d processes in the guaranteed pod's cgroups, want 3 (pause and two containers)", procs)
	}

	p.deletePod(t, ns, "guaranteed", 0)
	p.waitGone(t, ns, "guaranteed", 60*time.Second)
	Eventually(t, 30*time.Second, "the pod's cgroup removed", func() (bool, error) {
		_, err := os.Stat(dir("memory", gdir))
		return os.IsNotExist(err), err
	})
}

// fsGroup: the pod's volumes belong to its group (setgid directories, so
// that what the container writes does too), the group is among the
// container's, and a configMap's files are group-readable.
func TestContainerdFSGroup(t *testing.T) {
	t.Parallel()
	p := NewContainerdPodvisor(t)
	p.Start()
	ns := p.Namespace("fsgroup")
	ctx := context.Background()
	if _, err := p.Admin.CoreV1().ConfigMaps(ns).Create(ctx, &v1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cfg"},
		Data: map[string]string{"key": "value"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod := p.imagePod(ns, "owner", images.BusyboxImage, v1.RestartPolicyNever, []string{"sh", "-c",
		"id -G; stat -c 'data %g %a' /data; touch /data/new && stat -c 'new %g' /data/new; stat -L -c 'cfg %g %a' /cfg/key"}, nil)
	pod.Spec.SecurityContext = &v1.PodSecurityContext{RunAsUser: ptr.To[int64](1000), FSGroup: ptr.To[int64](2000)}
	pod.Spec.Volumes = []v1.Volume{
		{Name: "data", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}},
		{Name: "cfg", VolumeSource: v1.VolumeSource{ConfigMap: &v1.ConfigMapVolumeSource{LocalObjectReference: v1.LocalObjectReference{Name: "cfg"}}}},
	}
	pod.Spec.Containers[0].VolumeMounts = []v1.VolumeMount{{Name: "data", MountPath: "/data"}, {Name: "cfg", MountPath: "/cfg"}}
	p.create(t, pod)
	p.waitPod(t, ns, "owner", 60*time.Second, "succeeded", func(pod *v1.Pod) bool { return pod.Status.Phase == v1.PodSucceeded })
	log, err := p.logs(ns, "owner", "c")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"2000", "data 2000 2777\n", "new 2000\n", "cfg 2000 644\n"} {
		if !strings.Contains(log, want) {
			t.Errorf("no %q in\n%s", want, log)
		}
	}
}

// The process runtime cannot restrict a host process as a container's
// securityContext asks: it refuses such a container with a reason instead
// of running it with less isolation than asked.
func TestProcessRuntimeRefusesWhatItCannotEnforce(t *testing.T) {
	t.Parallel()
	p := NewPodvisor(t)
	p.Runtime = "process"
	p.Start()
	ns := p.Namespace("unenforceable")
	pod := p.pod(ns, "ro", v1.RestartPolicyNever, sh("c", "echo should not run"))
	pod.Spec.Containers[0].SecurityContext = &v1.SecurityContext{ReadOnlyRootFilesystem: ptr.To(true)}
	p.create(t, pod)
	got := p.waitPod(t, ns, "ro", 30*time.Second, "refused", func(pod *v1.Pod) bool {
		return len(pod.Status.ContainerStatuses) == 1 && pod.Status.ContainerStatuses[0].State.Waiting != nil &&
			pod.Status.ContainerStatuses[0].State.Waiting.Reason == "CreateContainerConfigError"
	})
	want := `container "c": securityContext.readOnlyRootFilesystem cannot be honoured by the process runtime, whose containers are host processes (use --runtime=containerd)`
	if msg := got.Status.ContainerStatuses[0].State.Waiting.Message; msg != want {
		t.Errorf("waiting message %q, want %q", msg, want)
	}
}

// On containerd: id prints the user, its group and every supplementary
// group; a container's PID 1 that has no SIGTERM handler ignores SIGTERM
// (its own PID namespace) and is killed when the grace period ends: 137.
func TestContainerdIdentityAndPID1(t *testing.T) {
	t.Parallel()
	p := NewContainerdPodvisor(t)
	p.Start()
	ns := p.Namespace("identity")
	id := p.imagePod(ns, "id", images.BusyboxImage, v1.RestartPolicyNever, []string{"sh", "-c", "echo uid=$(id -u) gid=$(id -g) groups=$(id -G)"}, nil)
	id.Spec.SecurityContext = &v1.PodSecurityContext{RunAsUser: ptr.To[int64](1234), RunAsGroup: ptr.To[int64](5678),
		SupplementalGroups: []int64{4000, 4001}, FSGroup: ptr.To[int64](4002)}
	p.create(t, id)
	pid1 := p.imagePod(ns, "pid1", images.BusyboxImage, v1.RestartPolicyNever, []string{"sleep", "3600"}, nil)
	pid1.Spec.TerminationGracePeriodSeconds = ptr.To[int64](3)
	p.create(t, pid1)

	p.waitPod(t, ns, "id", 60*time.Second, "succeeded", func(pod *v1.Pod) bool { return pod.Status.Phase == v1.PodSucceeded })
	log, err := p.logs(ns, "id", "c")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(log, "uid=1234 gid=5678 groups=5678 4000 4001 4002") {
		t.Errorf("id: %q, want uid=1234 gid=5678 and groups 5678 4000 4001 4002", log)
	}

	p.waitRunning(t, ns, "pid1")
	final, stop := p.watchFinal(t, ns, "pid1", 60*time.Second)
	defer stop()
	deleted := time.Now()
	p.deletePod(t, ns, "pid1", 3)
	last := final()
	term := terminated(last, "c")
	if term == nil || term.ExitCode != 137 {
		t.Fatalf("pid1 terminated %+v, want killed (137) after ignoring SIGTERM", term)
	}
	// Killed at the end of the grace period, not at SIGTERM (whole seconds in the API).
	if d := term.FinishedAt.Sub(deleted.Truncate(time.Second)); d < 2*time.Second {
		t.Errorf("pid1 finished %v after the delete, want about the 3 s grace", d)
	}
}
