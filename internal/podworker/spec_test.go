package podworker

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"

	"github.com/podvisor/podvisor/internal/expansion"
	"github.com/podvisor/podvisor/internal/runtime"
)

func envManager(objects ...k8sruntime.Object) *Manager {
	cs := fake.NewClientset(objects...)
	m := &Manager{cfg: Config{Client: cs, HostIP: "10.0.0.7", Runtime: newFakeRuntime(), Allocatable: func() v1.ResourceList {
		return v1.ResourceList{v1.ResourceCPU: resource.MustParse("4"), v1.ResourceMemory: resource.MustParse("8Gi")}
	}}}
	m.vols = newVolumeManager(m)
	return m
}

func envPod(c v1.Container) *v1.Pod {
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "uid-1", Labels: map[string]string{"b": "2", "a": "1"}},
		Spec:       v1.PodSpec{NodeName: "node", ServiceAccountName: "sa", Containers: []v1.Container{c}},
	}
}

func env(t *testing.T, m *Manager, pod *v1.Pod) []string {
	t.Helper()
	out, err := m.containerEnv(context.Background(), pod, &pod.Spec.Containers[0], "127.0.0.1", &expansion.Budget{})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func service(ns, name, ip string, ports ...v1.ServicePort) *v1.Service {
	return &v1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: v1.ServiceSpec{ClusterIP: ip, Ports: ports}}
}

func TestEnvFromThenEnvWithExpansionAsUpstream(t *testing.T) {
	m := envManager(&v1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "cm"}, Data: map[string]string{"K": "from-cm", "OTHER": "o"}})
	c := v1.Container{Name: "c",
		EnvFrom: []v1.EnvFromSource{{Prefix: "P_", ConfigMapRef: &v1.ConfigMapEnvSource{LocalObjectReference: v1.LocalObjectReference{Name: "cm"}}}},
		Env: []v1.EnvVar{
			{Name: "P_K", Value: "overridden"},
			{Name: "REF", Value: "$(P_OTHER)-$(UNDEFINED)-$$(P_K)"},
			{Name: "OPT", ValueFrom: &v1.EnvVarSource{ConfigMapKeyRef: &v1.ConfigMapKeySelector{
				LocalObjectReference: v1.LocalObjectReference{Name: "cm"}, Key: "missing", Optional: ptr.To(true)}}},
			{Name: "EMPTY"},
		}}
	got := env(t, m, envPod(c))
	for _, want := range []string{"P_K=overridden", "P_OTHER=o", "REF=o-$(UNDEFINED)-$(P_K)", "EMPTY="} {
		if !slices.Contains(got, want) {
			t.Errorf("env lacks %q: %v", want, got)
		}
	}
	for _, kv := range got {
		if strings.HasPrefix(kv, "OPT=") {
			t.Errorf("an optional missing key is set: %q", kv)
		}
	}
}

func TestMissingObjectsAndKeysHaveUpstreamsMessages(t *testing.T) {
	m := envManager(
		&v1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "cm"}},
		&v1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "s"}})
	ref := func(src *v1.EnvVarSource) v1.Container {
		return v1.Container{Name: "c", Env: []v1.EnvVar{{Name: "X", ValueFrom: src}}}
	}
	for _, tc := range []struct {
		c    v1.Container
		want string
	}{
		{ref(&v1.EnvVarSource{ConfigMapKeyRef: &v1.ConfigMapKeySelector{LocalObjectReference: v1.LocalObjectReference{Name: "nope"}, Key: "k"}}), `configmap "nope" not found`},
		{ref(&v1.EnvVarSource{ConfigMapKeyRef: &v1.ConfigMapKeySelector{LocalObjectReference: v1.LocalObjectReference{Name: "cm"}, Key: "k"}}), "couldn't find key k in ConfigMap ns/cm"},
		{ref(&v1.EnvVarSource{SecretKeyRef: &v1.SecretKeySelector{LocalObjectReference: v1.LocalObjectReference{Name: "nope"}, Key: "k"}}), `secret "nope" not found`},
		{ref(&v1.EnvVarSource{SecretKeyRef: &v1.SecretKeySelector{LocalObjectReference: v1.LocalObjectReference{Name: "s"}, Key: "k"}}), "couldn't find key k in Secret ns/s"},
		{v1.Container{Name: "c", EnvFrom: []v1.EnvFromSource{{SecretRef: &v1.SecretEnvSource{LocalObjectReference: v1.LocalObjectReference{Name: "nope"}}}}}, `secret "nope" not found`},
	} {
		pod := envPod(tc.c)
		_, err := m.containerEnv(context.Background(), pod, &pod.Spec.Containers[0], "127.0.0.1", &expansion.Budget{})
		var ce configError
		if !errors.As(err, &ce) || err.Error() != tc.want {
			t.Errorf("got %v, want config error %q", err, tc.want)
		}
	}
}

func TestServiceEnvironmentAsUpstream(t *testing.T) {
	m := envManager(
		service("default", "kubernetes", "10.43.0.1", v1.ServicePort{Name: "https", Port: 443, Protocol: v1.ProtocolTCP}),
		service("ns", "my-svc", "10.43.0.9", v1.ServicePort{Port: 80}, v1.ServicePort{Name: "metrics", Port: 9090, Protocol: v1.ProtocolUDP}),
		service("ns", "headless", v1.ClusterIPNone, v1.ServicePort{Port: 80}),
		service("other", "elsewhere", "10.43.0.10", v1.ServicePort{Port: 80}))
	got := env(t, m, envPod(v1.Container{Name: "c", Env: []v1.EnvVar{{Name: "URL", Value: "http://$(MY_SVC_SERVICE_HOST)"}}}))
	for _, want := range []string{
		"URL=http://10.43.0.9",
		"KUBERNETES_SERVICE_HOST=10.43.0.1", "KUBERNETES_SERVICE_PORT=443", "KUBERNETES_SERVICE_PORT_HTTPS=443",
		"KUBERNETES_PORT=tcp://10.43.0.1:443", "KUBERNETES_PORT_443_TCP=tcp://10.43.0.1:443",
		"KUBERNETES_PORT_443_TCP_PROTO=tcp", "KUBERNETES_PORT_443_TCP_PORT=443", "KUBERNETES_PORT_443_TCP_ADDR=10.43.0.1",
		"MY_SVC_SERVICE_HOST=10.43.0.9", "MY_SVC_SERVICE_PORT=80", "MY_SVC_SERVICE_PORT_METRICS=9090",
		"MY_SVC_PORT=tcp://10.43.0.9:80", "MY_SVC_PORT_9090_UDP=udp://10.43.0.9:9090",
	} {
		if !slices.Contains(got, want) {
			t.Errorf("env lacks %q: %v", want, got)
		}
	}
	for _, kv := range got {
		if strings.HasPrefix(kv, "HEADLESS_") || strings.HasPrefix(kv, "ELSEWHERE_") {
			t.Errorf("unexpected %q", kv)
		}
	}

	pod := envPod(v1.Container{Name: "c"})
	pod.Spec.EnableServiceLinks = ptr.To(false)
	got = env(t, m, pod)
	if !slices.Contains(got, "KUBERNETES_SERVICE_HOST=10.43.0.1") || slices.ContainsFunc(got, func(s string) bool { return strings.HasPrefix(s, "MY_SVC_") }) {
		t.Errorf("enableServiceLinks=false: want only the master service: %v", got)
	}
}

func TestDownwardAPIValues(t *testing.T) {
	pod := envPod(v1.Container{Name: "c", Resources: v1.ResourceRequirements{
		Limits:   v1.ResourceList{v1.ResourceCPU: resource.MustParse("250m")},
		Requests: v1.ResourceList{v1.ResourceMemory: resource.MustParse("1Mi")},
	}})
	pod.Annotations = map[string]string{"q": `say "hi"`}
	for path, want := range map[string]string{
		"metadata.labels":           "a=\"1\"\nb=\"2\"",
		"metadata.annotations":      `q="say \"hi\""`,
		"metadata.labels['b']":      "2",
		"status.podIPs":             "10.0.0.7",
		"spec.serviceAccountName":   "sa",
		"metadata.annotations['x']": "",
	} {
		if got, err := fieldValue(pod, path, "10.0.0.7", "10.0.0.7"); err != nil || got != want {
			t.Errorf("fieldValue(%s) = %q, %v; want %q", path, got, err, want)
		}
	}
	alloc := v1.ResourceList{v1.ResourceCPU: resource.MustParse("4"), v1.ResourceMemory: resource.MustParse("8Gi")}
	c := &pod.Spec.Containers[0]
	for _, tc := range []struct {
		res, divisor, want string
	}{
		{"limits.cpu", "", "1"}, // 250m rounds up to 1 core
		{"limits.cpu", "1m", "250"},
		{"limits.memory", "", "8589934592"}, // no limit: the node's allocatable
		{"requests.memory", "1Ki", "1024"},
		{"requests.cpu", "", "0"},
	} {
		ref := &v1.ResourceFieldSelector{Resource: tc.res}
		if tc.divisor != "" {
			ref.Divisor = resource.MustParse(tc.divisor)
		}
		if got, err := resourceValue(pod, c, ref, alloc); err != nil || got != tc.want {
			t.Errorf("resourceValue(%s/%s) = %q, %v; want %q", tc.res, tc.divisor, got, err, tc.want)
		}
	}
}

func TestResourcesBecomeCgroupValues(t *testing.T) {
	c := &v1.Container{Resources: v1.ResourceRequirements{
		Limits:   v1.ResourceList{v1.ResourceCPU: resource.MustParse("500m"), v1.ResourceMemory: resource.MustParse("20Mi")},
		Requests: v1.ResourceList{v1.ResourceCPU: resource.MustParse("250m")},
	}}
	want := runtime.Resources{MemoryLimitBytes: 20 << 20, CPUQuotaMicros: 50000, CPUPeriodMicros: 100000, CPUShares: 256}
	if got := containerResources(c); got != want {
		t.Errorf("got %+v, want %+v", got, want)
	}
	if got := containerResources(&v1.Container{}); got != (runtime.Resources{CPUShares: 2}) {
		t.Errorf("best effort: got %+v, want shares 2 only", got)
	}
}

func TestContainerUserFromSecurityContexts(t *testing.T) {
	pod := envPod(v1.Container{Name: "c", SecurityContext: &v1.SecurityContext{RunAsNonRoot: ptr.To(true)}})
	if u, err := containerUser(pod, &pod.Spec.Containers[0]); u != nil || err != nil {
		t.Errorf("no user set: %+v, %v", u, err)
	}
	pod.Spec.SecurityContext = &v1.PodSecurityContext{RunAsUser: ptr.To[int64](1000), RunAsGroup: ptr.To[int64](2000), SupplementalGroups: []int64{3000}, FSGroup: ptr.To[int64](4000)}
	u, err := containerUser(pod, &pod.Spec.Containers[0])
	if err != nil || u.UID != 1000 || u.GID != 2000 || !slices.Equal(u.Groups, []uint32{3000, 4000}) || u.UIDUnset || u.GIDUnset {
		t.Errorf("got %+v, %v", u, err)
	}
	// fsGroup alone: the user and group stay the image's (unset).
	pod.Spec.SecurityContext = &v1.PodSecurityContext{FSGroup: ptr.To[int64](4000)}
	u, err = containerUser(pod, &pod.Spec.Containers[0])
	if err != nil || !u.UIDUnset || !u.GIDUnset || !slices.Equal(u.Groups, []uint32{4000}) {
		t.Errorf("fsGroup only: got %+v, %v; want user and group unset", u, err)
	}
}

func TestTerminationMessageFileAndFallbackToLogs(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "termination-log")
	logPath := filepath.Join(dir, "0.log")
	var log strings.Builder
	for i := range 100 {
		log.WriteString("2024-01-02T15:04:05.000000000Z stdout F line " + strings.Repeat("x", i%3) + "\n")
	}
	log.WriteString("2024-01-02T15:04:05.000000000Z stdout P DONE\n")
	os.WriteFile(logPath, []byte(log.String()), 0o644)
	st := runtime.Status{TerminationMessageFile: file, LogPath: logPath, ExitCode: 1}

	os.WriteFile(file, nil, 0o644)
	if got := readTerminationMessage(st, false); got != "" {
		t.Errorf("empty file, File policy: %q", got)
	}
	got := readTerminationMessage(st, true)
	if !strings.HasSuffix(got, "\nDONE") || strings.Count(got, "\n") != 79 || len(got) > 2048 {
		t.Errorf("fallback: want the last 80 lines ending in DONE, got %d lines %q", strings.Count(got, "\n")+1, got)
	}
	st.ExitCode = 0
	if got := readTerminationMessage(st, true); got != "" {
		t.Errorf("fallback after success: %q", got)
	}
	big := strings.Repeat("a", 5000) + "END"
	os.WriteFile(file, []byte(big), 0o644)
	if got := readTerminationMessage(st, true); len(got) != 4096 || !strings.HasSuffix(got, "END") {
		t.Errorf("file over 4096 bytes: len %d, suffix %q", len(got), got[len(got)-3:])
	}
}

// An env whose references multiply ($(A) x100, then $(B) x100, …) asked the
// agent for gigabytes and took it out of memory: it is a config error now,
// found before the values are built; so are many copies of one big value and
// a command built the same way.
func TestEnvAndCommandExpansionBounded(t *testing.T) {
	m := envManager()
	bomb := []v1.EnvVar{{Name: "A", Value: strings.Repeat("a", 1024)}}
	for i, n := range []string{"B", "C", "D", "E", "F"} {
		bomb = append(bomb, v1.EnvVar{Name: n, Value: strings.Repeat("$("+bomb[i].Name+")", 100)})
	}
	copies := []v1.EnvVar{{Name: "B", Value: strings.Repeat("b", 1<<20)}}
	for i := range 20 {
		copies = append(copies, v1.EnvVar{Name: fmt.Sprintf("C%d", i), Value: "$(B)"})
	}
	for name, envs := range map[string][]v1.EnvVar{"growing references": bomb, "copies of 1 MiB": copies} {
		pod := envPod(v1.Container{Name: "c", Env: envs})
		_, err := m.containerEnv(context.Background(), pod, &pod.Spec.Containers[0], "127.0.0.1", &expansion.Budget{})
		var ce configError
		if !errors.As(err, &ce) || !strings.Contains(err.Error(), "expands to more than") {
			t.Errorf("%s: %v, want a config error", name, err)
		}
	}
}

// Host processes get a PATH and the node's HOSTNAME; a runtime with images
// leaves both to the image and to itself (containerd sets the pod's
// hostname), as under a kubelet. A PATH the pod sets is kept either way.
func TestPathAndHostnameOnlyForHostProcesses(t *testing.T) {
	has := func(list []string, prefix string) bool {
		for _, kv := range list {
			if strings.HasPrefix(kv, prefix) {
				return true
			}
		}
		return false
	}
	m := envManager()
	out := env(t, m, envPod(v1.Container{Name: "c"}))
	if !has(out, "PATH=/usr/local/sbin:") || !has(out, "HOSTNAME=") {
		t.Errorf("host process env %v, want PATH and HOSTNAME", out)
	}
	rt := newFakeRuntime()
	rt.images = true
	m.cfg.Runtime = rt
	out = env(t, m, envPod(v1.Container{Name: "c"}))
	if has(out, "PATH=") || has(out, "HOSTNAME=") {
		t.Errorf("image runtime env %v, want neither PATH nor HOSTNAME", out)
	}
	out = env(t, m, envPod(v1.Container{Name: "c", Env: []v1.EnvVar{{Name: "PATH", Value: "/opt/bin"}}}))
	if !has(out, "PATH=/opt/bin") {
		t.Errorf("env %v, want the pod's PATH", out)
	}
}
