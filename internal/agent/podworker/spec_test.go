package podworker

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"github.com/podvisor/podvisor/internal/agent/expansion"
	"github.com/podvisor/podvisor/internal/runtime"
)

func envManager(objects ...k8sruntime.Object) *Manager {
	cs := fake.NewClientset(objects...)
	m := &Manager{cfg: Config{Client: cs, HostIP: "10.0.0.7", Runtime: setOf(newFakeRuntime()), Allocatable: func() v1.ResourceList {
		return v1.ResourceList{v1.ResourceCPU: resource.MustParse("4"), v1.ResourceMemory: resource.MustParse("8Gi")}
	}}}
	m.watches = newObjectWatches(m)
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

// A log still empty right after a FallbackToLogsOnError container failed is
// read again (the runtime may not have copied its last output yet) until
// logSettle has passed; what was read then is kept.
func TestTerminationMessageFromALogWrittenLate(t *testing.T) {
	dir := t.TempDir()
	logPath := filepath.Join(dir, "0.log")
	if err := os.WriteFile(logPath, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	clk := clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	c := v1.Container{Name: "c", TerminationMessagePolicy: v1.TerminationMessageFallbackToLogsOnError}
	w := &worker{m: &Manager{cfg: Config{Clock: clk}}, instFacts: map[string]*instanceFacts{}, wake: make(chan struct{}, 1),
		pod: &v1.Pod{Spec: v1.PodSpec{Containers: []v1.Container{c}}}}
	st := runtime.Status{ID: "a", Name: "c", LogPath: logPath, ExitCode: 1, FinishedAt: clk.Now()}
	if got := w.terminationMessage(st); got != "" {
		t.Fatalf("empty log: %q", got)
	}
	if err := os.WriteFile(logPath, []byte("2026-01-01T00:00:00.000000000Z stdout P DONE\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	clk.Step(logSettleRetry)
	select {
	case <-w.wake:
	default:
		t.Fatal("no status computed again after an empty log right after the exit")
	}
	if got := w.terminationMessage(st); got != "DONE" {
		t.Fatalf("log written after the exit: %q, want DONE", got)
	}
	// Long after an exit, an empty log is the answer, and kept.
	empty := filepath.Join(dir, "1.log")
	if err := os.WriteFile(empty, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	old := runtime.Status{ID: "b", Name: "c", LogPath: empty, ExitCode: 1, FinishedAt: clk.Now().Add(-time.Minute)}
	if got := w.terminationMessage(old); got != "" {
		t.Fatalf("empty log long after the exit: %q", got)
	}
	if !w.factsOf("b").messageRead {
		t.Fatal("an empty message long after the exit was not kept")
	}
}
