package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// What containers see (issue 4): termination messages, env, ConfigMaps and
// Secrets, the downward API, volumes and resource limits.

func (p *Podvisor) logs(ns, pod, container string) (string, error) {
	b, err := p.Admin.CoreV1().Pods(ns).GetLogs(pod, &v1.PodLogOptions{Container: container}).DoRaw(context.Background())
	return string(b), err
}

// waitLogs waits until the container's log contains every one of want.
func (p *Podvisor) waitLogs(t *testing.T, ns, pod, container string, timeout time.Duration, want ...string) string {
	t.Helper()
	var out string
	Eventually(t, timeout, fmt.Sprintf("log of %s/%s lines %q", pod, container, want), func() (bool, error) {
		o, err := p.logs(ns, pod, container)
		out = o
		if err != nil {
			return false, err
		}
		for _, w := range want {
			if !strings.Contains(o, w) {
				return false, fmt.Errorf("log so far:\n%s", o)
			}
		}
		return true, nil
	})
	return out
}

func terminated(pod *v1.Pod, name string) *v1.ContainerStateTerminated {
	if cs := containerStatus(pod, name); cs != nil {
		return cs.State.Terminated
	}
	return nil
}

// The upstream "Container Runtime blackbox test: on terminated container"
// cases, docs/lifecycle.md §3.
func TestContainersTerminationMessage(t *testing.T) {
	t.Parallel()
	p := Shared(t)
	ns := p.Namespace("termination-message")
	cases := []struct {
		name   string
		script string
		path   string
		policy v1.TerminationMessagePolicy
		user   *int64
		exit   int32
		want   string
	}{
		{name: "from-file", script: "echo -n DONE > /dev/termination-log", want: "DONE"},
		{name: "non-root-custom-path", script: "echo -n DONE > /dev/termination-custom-log", path: "/dev/termination-custom-log", user: ptr.To[int64](1000), want: "DONE"},
		{name: "fallback-to-logs-on-error", script: "echo -n DONE; /bin/false", policy: v1.TerminationMessageFallbackToLogsOnError, exit: 1, want: "DONE"},
		{name: "fallback-succeeded-is-empty", script: "echo -n DONE", policy: v1.TerminationMessageFallbackToLogsOnError, want: ""},
		{name: "file-wins-over-logs", script: "echo -n OK > /dev/termination-log; echo DONE; exit 1", policy: v1.TerminationMessageFallbackToLogsOnError, exit: 1, want: "OK"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := sh("c", tc.script)
			c.TerminationMessagePath = tc.path
			c.TerminationMessagePolicy = tc.policy
			if tc.user != nil {
				c.SecurityContext = &v1.SecurityContext{RunAsUser: tc.user}
			}
			p.create(t, p.pod(ns, tc.name, v1.RestartPolicyNever, c))
			// A message from the log may come a status later than the exit
			// (the runtime copies output on its own time), as upstream reads
			// the log anew for every status.
			pod := p.waitPod(t, ns, tc.name, 60*time.Second, "terminated with the expected message", func(pod *v1.Pod) bool {
				term := terminated(pod, "c")
				return term != nil && term.ExitCode == tc.exit && term.Message == tc.want
			})
			term := terminated(pod, "c")
			if term.ExitCode != tc.exit || term.Message != tc.want {
				t.Errorf("terminated exit %d message %q, want exit %d message %q\n%s", term.ExitCode, term.Message, tc.exit, tc.want, describe(pod))
			}
		})
	}
}

// A ConfigMap key read from env and from a mounted file; the file follows
// an update of the ConfigMap, the environment does not.
func TestContainersConfigMapEnvAndVolumeUpdate(t *testing.T) {
	t.Parallel()
	p := Shared(t)
	ns := p.Namespace("configmap")
	ctx := context.Background()
	cms := p.Admin.CoreV1().ConfigMaps(ns)
	if _, err := cms.Create(ctx, &v1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cm"}, Data: map[string]string{"data-1": "value-1"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	mnt := filepath.Join(t.TempDir(), "configmap-volume")
	c := sh("c", fmt.Sprintf(`echo "env=$CONFIG_DATA_1"; while true; do echo "file=$(cat '%s/data-1')"; sleep 0.5; done`, mnt))
	c.Env = []v1.EnvVar{{Name: "CONFIG_DATA_1", ValueFrom: &v1.EnvVarSource{ConfigMapKeyRef: &v1.ConfigMapKeySelector{
		LocalObjectReference: v1.LocalObjectReference{Name: "cm"}, Key: "data-1"}}}}
	c.VolumeMounts = []v1.VolumeMount{{Name: "cfg", MountPath: mnt}}
	pod := p.pod(ns, "reader", v1.RestartPolicyAlways, c)
	pod.Spec.Volumes = []v1.Volume{{Name: "cfg", VolumeSource: v1.VolumeSource{ConfigMap: &v1.ConfigMapVolumeSource{
		LocalObjectReference: v1.LocalObjectReference{Name: "cm"}}}}}
	p.create(t, pod)
	p.waitLogs(t, ns, "reader", "c", 60*time.Second, "env=value-1", "file=value-1")

	cm, err := cms.Get(ctx, "cm", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cm.Data["data-1"] = "value-2"
	if _, err := cms.Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	out := p.waitLogs(t, ns, "reader", "c", 90*time.Second, "file=value-2")
	if strings.Contains(out, "env=value-2") {
		t.Errorf("the environment changed with the ConfigMap:\n%s", out)
	}
	got := p.waitPod(t, ns, "reader", 5*time.Second, "still running", func(pod *v1.Pod) bool { return pod.Status.Phase == v1.PodRunning })
	if cs := containerStatus(got, "c"); cs.RestartCount != 0 {
		t.Errorf("container restarted: %s", describe(got))
	}
}

// Downward API values in env and in a volume match the pod object.
func TestContainersDownwardAPIMatchesThePod(t *testing.T) {
	t.Parallel()
	p := Shared(t)
	ns := p.Namespace("downward")
	mnt := filepath.Join(t.TempDir(), "podinfo")
	field := func(path string) *v1.EnvVarSource {
		return &v1.EnvVarSource{FieldRef: &v1.ObjectFieldSelector{FieldPath: path}}
	}
	c := sh("c", fmt.Sprintf(`env | sort | grep -E '^(POD_|NODE_|HOST_|SA_|LABEL_|ANNOTATION_|MEM_|CPU_|KUBERNETES_SERVICE_)'; for f in labels annotations name cpu_limit; do echo "vol-$f=$(cat '%s'/$f | tr '\n' ';')"; done`, mnt))
	c.Resources = v1.ResourceRequirements{
		Limits:   v1.ResourceList{v1.ResourceMemory: resourceMust("64Mi"), v1.ResourceCPU: resourceMust("250m")},
		Requests: v1.ResourceList{v1.ResourceMemory: resourceMust("32Mi"), v1.ResourceCPU: resourceMust("250m")},
	}
	c.Env = []v1.EnvVar{
		{Name: "POD_NAME", ValueFrom: field("metadata.name")},
		{Name: "POD_NAMESPACE", ValueFrom: field("metadata.namespace")},
		{Name: "POD_UID", ValueFrom: field("metadata.uid")},
		{Name: "NODE_NAME", ValueFrom: field("spec.nodeName")},
		{Name: "SA_NAME", ValueFrom: field("spec.serviceAccountName")},
		{Name: "HOST_IP", ValueFrom: field("status.hostIP")},
		{Name: "POD_IP", ValueFrom: field("status.podIP")},
		{Name: "POD_IPS", ValueFrom: field("status.podIPs")},
		{Name: "LABEL_APP", ValueFrom: field("metadata.labels['app']")},
		{Name: "ANNOTATION_NOTE", ValueFrom: field("metadata.annotations['note']")},
		{Name: "MEM_LIMIT", ValueFrom: &v1.EnvVarSource{ResourceFieldRef: &v1.ResourceFieldSelector{Resource: "limits.memory"}}},
		{Name: "MEM_REQUEST_MI", ValueFrom: &v1.EnvVarSource{ResourceFieldRef: &v1.ResourceFieldSelector{Resource: "requests.memory", Divisor: resourceMust("1Mi")}}},
		{Name: "CPU_LIMIT_M", ValueFrom: &v1.EnvVarSource{ResourceFieldRef: &v1.ResourceFieldSelector{Resource: "limits.cpu", Divisor: resourceMust("1m")}}},
		{Name: "POD_GREETING", Value: "hello $(POD_NAME) in $(POD_NAMESPACE)"},
	}
	c.VolumeMounts = []v1.VolumeMount{{Name: "podinfo", MountPath: mnt}}
	pod := p.pod(ns, "downward", v1.RestartPolicyNever, c)
	pod.Labels = map[string]string{"app": "downward", "tier": "test"}
	pod.Annotations = map[string]string{"note": "an annotation"}
	pod.Spec.Volumes = []v1.Volume{{Name: "podinfo", VolumeSource: v1.VolumeSource{DownwardAPI: &v1.DownwardAPIVolumeSource{Items: []v1.DownwardAPIVolumeFile{
		{Path: "labels", FieldRef: &v1.ObjectFieldSelector{FieldPath: "metadata.labels"}},
		{Path: "annotations", FieldRef: &v1.ObjectFieldSelector{FieldPath: "metadata.annotations['note']"}},
		{Path: "name", FieldRef: &v1.ObjectFieldSelector{FieldPath: "metadata.name"}},
		{Path: "cpu_limit", ResourceFieldRef: &v1.ResourceFieldSelector{ContainerName: "c", Resource: "limits.cpu", Divisor: resourceMust("1m")}},
	}}}}}
	p.create(t, pod)
	got := p.waitPod(t, ns, "downward", 60*time.Second, "Succeeded", func(pod *v1.Pod) bool { return pod.Status.Phase == v1.PodSucceeded })
	out, err := p.logs(ns, "downward", "c")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"POD_NAME=downward", "POD_NAMESPACE=" + ns, "POD_UID=" + string(got.UID),
		"NODE_NAME=" + got.Spec.NodeName, "SA_NAME=default",
		"HOST_IP=" + got.Status.HostIP, "POD_IP=" + got.Status.PodIP, "POD_IPS=" + got.Status.PodIP,
		"LABEL_APP=downward", "ANNOTATION_NOTE=an annotation",
		"MEM_LIMIT=67108864", "MEM_REQUEST_MI=32", "CPU_LIMIT_M=250",
		"POD_GREETING=hello downward in " + ns,
		"KUBERNETES_SERVICE_HOST=", "KUBERNETES_SERVICE_PORT=",
		`vol-labels=app="downward";tier="test"`, "vol-annotations=an annotation", "vol-name=downward", "vol-cpu_limit=250",
	}
	for _, w := range want {
		if !strings.Contains(out, w) {
			t.Errorf("log lacks %q:\n%s", w, out)
		}
	}
}

// The service account token volume the API server adds to every pod is
// mounted where client libraries look for it.
func TestContainersServiceAccountTokenIsMounted(t *testing.T) {
	t.Parallel()
	p := Shared(t)
	ns := p.Namespace("sa-token")
	dir := "/var/run/secrets/kubernetes.io/serviceaccount"
	p.create(t, p.pod(ns, "sa", v1.RestartPolicyNever, sh("c",
		fmt.Sprintf(`echo "ns=$(cat %[1]s/namespace)"; test -s %[1]s/token && echo token-ok; grep -q 'BEGIN CERTIFICATE' %[1]s/ca.crt && echo ca-ok`, dir))))
	pod := p.waitPod(t, ns, "sa", 60*time.Second, "terminated", func(pod *v1.Pod) bool { return terminated(pod, "c") != nil })
	out, _ := p.logs(ns, "sa", "c")
	for _, w := range []string{"ns=" + ns, "token-ok", "ca-ok"} {
		if !strings.Contains(out, w) {
			t.Errorf("log lacks %q:\n%s\n%s", w, out, describe(pod))
		}
	}
}

// An emptyDir (medium Memory) is shared by the containers of a pod.
func TestContainersEmptyDirIsSharedByThePodsContainers(t *testing.T) {
	t.Parallel()
	p := Shared(t)
	ns := p.Namespace("emptydir")
	mnt := filepath.Join(t.TempDir(), "scratch")
	writer := sh("writer", fmt.Sprintf(`echo -n shared > '%s/file'`, mnt))
	writer.VolumeMounts = []v1.VolumeMount{{Name: "scratch", MountPath: mnt}}
	reader := sh("reader", fmt.Sprintf(`cat '%s/file'`, mnt))
	reader.VolumeMounts = []v1.VolumeMount{{Name: "scratch", MountPath: mnt}}
	pod := p.pod(ns, "emptydir", v1.RestartPolicyNever, reader)
	pod.Spec.InitContainers = []v1.Container{writer}
	pod.Spec.Volumes = []v1.Volume{{Name: "scratch", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{Medium: v1.StorageMediumMemory}}}}
	p.create(t, pod)
	got := p.waitPod(t, ns, "emptydir", 60*time.Second, "Succeeded", func(pod *v1.Pod) bool { return pod.Status.Phase == v1.PodSucceeded })
	if out, _ := p.logs(ns, "emptydir", "reader"); out != "shared" {
		t.Errorf("reader saw %q, want %q\n%s", out, "shared", describe(got))
	}
	// Volumes live exactly as long as the pod UID: the tmpfs goes with the pod.
	podDir := filepath.Join(p.DataDir, "agent", "pods", fmt.Sprintf("%s_%s_%s", ns, got.Name, got.UID))
	if !mountedUnder(podDir) {
		t.Errorf("no tmpfs mounted under %s", podDir)
	}
	if err := p.Admin.CoreV1().Pods(ns).Delete(context.Background(), got.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(90 * time.Second)
	for {
		_, err := os.Stat(podDir)
		if os.IsNotExist(err) && !mountedUnder(podDir) {
			return
		}
		if time.Now().After(deadline) {
			entries, _ := os.ReadDir(podDir)
			var names []string
			for _, e := range entries {
				names = append(names, e.Name())
			}
			t.Errorf("90 s after the force deletion: pod directory entries %v (stat err %v), tmpfs mounted %v; the agent's log of the pod:\n%s",
				names, err, mountedUnder(podDir), p.agentLogOf(append(containerIDs(got), string(got.UID), ns+"/"+got.Name)...))
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// containerIDs are the runtime IDs of the pod's containers, without scheme.
func containerIDs(pod *v1.Pod) []string {
	var ids []string
	for _, cs := range append(append([]v1.ContainerStatus{}, pod.Status.InitContainerStatuses...), pod.Status.ContainerStatuses...) {
		if _, id, ok := strings.Cut(cs.ContainerID, "://"); ok {
			ids = append(ids, id)
		}
	}
	return ids
}

// agentLogOf is what the agent logged with any of keys (a pod UID, ns/name).
func (p *Podvisor) agentLogOf(keys ...string) string {
	b, err := os.ReadFile(filepath.Join(p.DataDir, "podvisor.log"))
	if err != nil {
		return err.Error()
	}
	var out []string
	for _, line := range strings.Split(string(b), "\n") {
		for _, k := range keys {
			if strings.Contains(line, k) {
				out = append(out, line)
				break
			}
		}
	}
	return strings.Join(out, "\n")
}

func mountedUnder(dir string) bool {
	b, _ := os.ReadFile("/proc/self/mountinfo")
	return strings.Contains(string(b), " "+dir+"/")
}

// A memory hog with a 20Mi limit is killed by the kernel and reported OOMKilled.
func TestContainersMemoryHogIsOOMKilled(t *testing.T) {
	t.Parallel()
	p := Shared(t)
	ns := p.Namespace("oom")
	c := sh("hog", "tail /dev/zero")
	c.Resources = v1.ResourceRequirements{
		Limits:   v1.ResourceList{v1.ResourceMemory: resourceMust("20Mi")},
		Requests: v1.ResourceList{v1.ResourceMemory: resourceMust("20Mi")},
	}
	p.create(t, p.pod(ns, "hog", v1.RestartPolicyNever, c))
	pod := p.waitPod(t, ns, "hog", 60*time.Second, "terminated", func(pod *v1.Pod) bool { return terminated(pod, "hog") != nil })
	if term := terminated(pod, "hog"); term.Reason != "OOMKilled" || term.ExitCode != 137 {
		t.Errorf("want OOMKilled with exit 137: %s", describe(pod))
	}
}

// Pods created before the Secret they need wait — with upstream's reason and
// message for env, with a FailedMount event for a volume — and start as soon
// as the Secret is created: the agent watches it rather than waiting out the
// 10 s retry.
func TestContainersStartOnceTheirSecretIsCreated(t *testing.T) {
	t.Parallel()
	p := Shared(t)
	ns := p.Namespace("late-secret")
	ctx := context.Background()
	fromEnv := sh("c", `echo "env=$SECRET_DATA"; exec sleep 3600`)
	fromEnv.Env = []v1.EnvVar{{Name: "SECRET_DATA", ValueFrom: &v1.EnvVarSource{SecretKeyRef: &v1.SecretKeySelector{
		LocalObjectReference: v1.LocalObjectReference{Name: "late"}, Key: "data-1"}}}}
	p.create(t, p.pod(ns, "env", v1.RestartPolicyAlways, fromEnv))

	mnt := filepath.Join(t.TempDir(), "secret-volume")
	fromFile := sh("c", fmt.Sprintf(`echo "file=$(cat '%s/data-1')"; exec sleep 3600`, mnt))
	fromFile.VolumeMounts = []v1.VolumeMount{{Name: "sec", MountPath: mnt}}
	vol := p.pod(ns, "volume", v1.RestartPolicyAlways, fromFile)
	vol.Spec.Volumes = []v1.Volume{{Name: "sec", VolumeSource: v1.VolumeSource{Secret: &v1.SecretVolumeSource{SecretName: "late"}}}}
	p.create(t, vol)

	p.waitPod(t, ns, "env", 60*time.Second, "CreateContainerConfigError", func(pod *v1.Pod) bool {
		cs := containerStatus(pod, "c")
		return cs != nil && cs.State.Waiting != nil && cs.State.Waiting.Reason == "CreateContainerConfigError" &&
			cs.State.Waiting.Message == `secret "late" not found`
	})
	Eventually(t, 60*time.Second, "FailedMount event", func() (bool, error) {
		evs, err := p.Admin.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=volume,reason=FailedMount"})
		if err != nil {
			return false, err
		}
		for _, e := range evs.Items {
			if e.Message == `MountVolume.SetUp failed for volume "sec" : secret "late" not found` {
				return true, nil
			}
		}
		return false, fmt.Errorf("events: %v", evs.Items)
	})
	if pod, err := p.Admin.CoreV1().Pods(ns).Get(ctx, "volume", metav1.GetOptions{}); err == nil && pod.Status.Phase != v1.PodPending {
		t.Errorf("pod with a missing volume is not Pending: %s", describe(pod))
	}

	created := time.Now()
	_, err := p.Admin.CoreV1().Secrets(ns).Create(ctx, &v1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "late"}, Data: map[string][]byte{"data-1": []byte("value-1")}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"env", "volume"} {
		p.waitPod(t, ns, name, 60*time.Second, "Running", func(pod *v1.Pod) bool {
			cs := containerStatus(pod, "c")
			return cs != nil && cs.State.Running != nil
		})
		if d := time.Since(created); d > 8*time.Second {
			t.Errorf("pod %s started %v after the Secret was created: the watch did not wake it", name, d.Round(time.Millisecond))
		}
	}
	p.waitLogs(t, ns, "env", "c", 30*time.Second, "env=value-1")
	p.waitLogs(t, ns, "volume", "c", 30*time.Second, "file=value-1")
}

// envFrom with names that are not shell identifiers (data-1, and prefixes
// such as "1-", "$_-", "#@!"): the API allows them and the container's
// process gets every one, as the upstream ConfigMap/Secret conformance specs
// expect. They print `sh -c env`; here `env` runs as the container's process
// itself, because Debian's busybox 1.35 sh (the test images') drops such
// variables before its children see them.
func TestContainersEnvFromNamesThatAreNotIdentifiers(t *testing.T) {
	t.Parallel()
	p := Shared(t)
	ns := p.Namespace("envfrom")
	ctx := context.Background()
	if _, err := p.Admin.CoreV1().ConfigMaps(ns).Create(ctx, &v1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cm"},
		Data: map[string]string{"data-1": "value-1"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Admin.CoreV1().Secrets(ns).Create(ctx, &v1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "s"},
		Data: map[string][]byte{"data-2": []byte("value-2")}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	cm := func(prefix string) v1.EnvFromSource {
		return v1.EnvFromSource{Prefix: prefix, ConfigMapRef: &v1.ConfigMapEnvSource{LocalObjectReference: v1.LocalObjectReference{Name: "cm"}}}
	}
	c := v1.Container{Name: "c", Image: "none", Command: []string{"env"}, EnvFrom: []v1.EnvFromSource{
		cm(""), cm("1-"), cm("$_-"), cm("#@!"),
		{Prefix: "p-", SecretRef: &v1.SecretEnvSource{LocalObjectReference: v1.LocalObjectReference{Name: "s"}}},
	}}
	p.create(t, p.pod(ns, "env", v1.RestartPolicyNever, c))
	p.waitPod(t, ns, "env", 60*time.Second, "Succeeded", func(pod *v1.Pod) bool { return pod.Status.Phase == v1.PodSucceeded })
	log, err := p.logs(ns, "env", "c")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(log, "\n")
	for _, want := range []string{"data-1=value-1", "1-data-1=value-1", "$_-data-1=value-1", "#@!data-1=value-1", "p-data-2=value-2"} {
		if !slices.Contains(lines, want) {
			t.Errorf("no %q in the container's environment:\n%s", want, log)
		}
	}
}
