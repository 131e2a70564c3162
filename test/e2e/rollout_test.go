package e2e

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/podvisor/podvisor/internal/agent/lifecycle"
)

// rolloutRate is the client's steady load during a rollout, in requests
// (each on a new connection) a second.
const rolloutRate = 100

// TestServiceRollout: what the lifecycle is for, seen in traffic (issue 26
// item 4). A Deployment behind a Service is rolled out under a steady load
// from a client pod: with a readiness probe and a preStop sleep, no request
// is lost — the endpoint is removed, and the proxy stops sending new
// connections, while the old pod still serves. Without the preStop sleep,
// SIGTERM races the endpoint's removal (kubernetes#106476) and the test
// reports how many requests that lost; with podvisor's opt-in to stop a pod
// only once the node's proxy no longer routes to it, none is lost again. A
// pod that is the only endpoint of its Service still gets traffic while it
// terminates and serves.
func TestServiceRollout(t *testing.T) {
	p := serviceProxyTest(t)
	ns := p.Namespace("rollout")
	ctx := context.Background()

	web := p.testserver(t, "web", "serve", "--port", "8080")
	web.Ports = []v1.ContainerPort{{ContainerPort: 8080}}
	web.ReadinessProbe = &v1.Probe{
		ProbeHandler:  v1.ProbeHandler{HTTPGet: &v1.HTTPGetAction{Path: "/healthz", Port: intstr.FromInt32(8080)}},
		PeriodSeconds: 1, FailureThreshold: 1,
	}
	web.Lifecycle = &v1.Lifecycle{PreStop: &v1.LifecycleHandler{Sleep: &v1.SleepAction{Seconds: 5}}}
	labels := map[string]string{"app": "web"}
	dep, err := p.Admin.AppsV1().Deployments(ns).Create(ctx, &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](3),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: v1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: v1.PodSpec{Containers: []v1.Container{web}}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	svc := p.clusterIPService(t, ns, "web", labels)
	url := fmt.Sprintf("http://%s/hostname", net.JoinHostPort(svc.Spec.ClusterIP, "80"))

	client := p.pod(ns, "client", v1.RestartPolicyNever, p.testserver(t, "client", "pause"))
	p.create(t, client)
	p.waitRunning(t, ns, "client")
	p.waitRolledOut(t, ns, dep.Name)
	Eventually(t, 2*time.Minute, "10 of 10 answers through "+url, func() (bool, error) {
		answers, err := p.getFromPod(t, ns, "client", 10, url)
		return len(answers) == 10, err
	})

	t.Run("with a preStop sleep a rollout cuts no request", func(t *testing.T) {
		r := p.rolloutUnderLoad(t, ns, "client", dep.Name, url)
		t.Logf("with a 5 s preStop sleep: %s", r)
		checkNoneCut(t, r)
	})

	t.Run("without a preStop sleep requests are lost, and counted", func(t *testing.T) {
		d, err := p.Admin.AppsV1().Deployments(ns).Get(ctx, dep.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		d.Spec.Template.Spec.Containers[0].Lifecycle = nil
		if _, err := p.Admin.AppsV1().Deployments(ns).Update(ctx, d, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		p.waitRolledOut(t, ns, dep.Name)
		r := p.rolloutUnderLoad(t, ns, "client", dep.Name, url)
		// Not asserted: how many are lost depends on how long the proxy
		// takes to see the endpoint go (the upstream race, which a preStop
		// sleep exists to cover).
		t.Logf("without a preStop sleep: %s", r)
	})

	t.Run("without a preStop sleep, stopped once unrouted, a rollout cuts no request", func(t *testing.T) {
		d, err := p.Admin.AppsV1().Deployments(ns).Get(ctx, dep.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		d.Spec.Template.Annotations = map[string]string{lifecycle.StopAfterUnroutedAnnotation: "true"}
		if _, err := p.Admin.AppsV1().Deployments(ns).Update(ctx, d, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		p.waitRolledOut(t, ns, dep.Name)
		r := p.rolloutUnderLoad(t, ns, "client", dep.Name, url)
		t.Logf("without a preStop sleep, %s=true: %s", lifecycle.StopAfterUnroutedAnnotation, r)
		checkNoneCut(t, r)
	})

	t.Run("the only endpoint still gets traffic while it terminates and serves", func(t *testing.T) {
		solo := p.testserver(t, "solo", "serve", "--port", "8080")
		solo.ReadinessProbe = web.ReadinessProbe
		solo.Lifecycle = &v1.Lifecycle{PreStop: &v1.LifecycleHandler{Sleep: &v1.SleepAction{Seconds: 20}}}
		soloLabels := map[string]string{"app": "solo"}
		pod := p.pod(ns, "solo", v1.RestartPolicyAlways, solo)
		pod.Labels = soloLabels
		pod.Spec.TerminationGracePeriodSeconds = ptr.To[int64](30)
		p.create(t, pod)
		soloSvc := p.clusterIPService(t, ns, "solo", soloLabels)
		soloURL := fmt.Sprintf("http://%s/hostname", net.JoinHostPort(soloSvc.Spec.ClusterIP, "80"))
		p.waitEndpointReady(t, ns, "solo", "solo", true)
		Eventually(t, time.Minute, "an answer from solo through "+soloURL, func() (bool, error) {
			answers, err := p.getFromPod(t, ns, "client", 1, soloURL)
			return len(answers) == 1, err
		})
		if err := p.Admin.CoreV1().Pods(ns).Delete(ctx, "solo", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		// The EndpointSlice keeps it, terminating and (its readiness probe
		// still passing during the preStop sleep) serving, not ready.
		Eventually(t, time.Minute, "solo's endpoint terminating and serving", func() (bool, error) {
			c, err := p.endpointConditions(ns, "solo", "solo")
			return err == nil && c != nil && ptr.Deref(c.Terminating, false) && ptr.Deref(c.Serving, false) && !ptr.Deref(c.Ready, true),
				fmt.Errorf("conditions %s (%v)", conditionsString(c), err)
		})
		// The proxy falls back to serving terminating endpoints when a
		// Service has no ready one: the 20 s preStop sleep leaves time for it.
		Eventually(t, 15*time.Second, "5 of 5 answers from the terminating solo", func() (bool, error) {
			answers, err := p.getFromPod(t, ns, "client", 5, soloURL)
			return len(answers) == 5, fmt.Errorf("answers %v (%v)", answers, err)
		})
	})
}

// clusterIPService creates a ClusterIP Service named name on port 80 for
// the pods with labels, port 8080.
func (p *Podvisor) clusterIPService(t *testing.T, ns, name string, labels map[string]string) *v1.Service {
	t.Helper()
	svc, err := p.Admin.CoreV1().Services(ns).Create(context.Background(), &v1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1.ServiceSpec{Selector: labels,
			Ports: []v1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080)}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return svc
}

// endpointConditions are pod's endpoint conditions in the Service's
// EndpointSlices, nil while it has none.
func (p *Podvisor) endpointConditions(ns, service, pod string) (*discoveryv1.EndpointConditions, error) {
	slices, err := p.Admin.DiscoveryV1().EndpointSlices(ns).List(context.Background(),
		metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=" + service})
	if err != nil {
		return nil, err
	}
	for _, s := range slices.Items {
		for _, e := range s.Endpoints {
			if e.TargetRef != nil && e.TargetRef.Name == pod {
				return &e.Conditions, nil
			}
		}
	}
	return nil, nil
}

func conditionsString(c *discoveryv1.EndpointConditions) string {
	if c == nil {
		return "none"
	}
	b := func(p *bool) string {
		if p == nil {
			return "nil"
		}
		return strconv.FormatBool(*p)
	}
	return fmt.Sprintf("ready=%s serving=%s terminating=%s", b(c.Ready), b(c.Serving), b(c.Terminating))
}

// waitRolledOut waits until the Deployment's rollout is complete and its
// old pods are gone: every pod of it is of its current template and ready,
// none terminating.
func (p *Podvisor) waitRolledOut(t *testing.T, ns, name string) {
	t.Helper()
	ctx := context.Background()
	Eventually(t, 5*time.Minute, "deployment "+name+" rolled out, no old pod left", func() (bool, error) {
		d, err := p.Admin.AppsV1().Deployments(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		want := ptr.Deref(d.Spec.Replicas, 1)
		st := d.Status
		if st.ObservedGeneration < d.Generation || st.UpdatedReplicas != want || st.AvailableReplicas != want || st.Replicas != want {
			return false, fmt.Errorf("status %+v", st)
		}
		sel, err := metav1.LabelSelectorAsSelector(d.Spec.Selector)
		if err != nil {
			return false, err
		}
		pods, err := p.Admin.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: sel.String()})
		if err != nil {
			return false, err
		}
		if int32(len(pods.Items)) != want {
			return false, fmt.Errorf("%d pods, want %d", len(pods.Items), want)
		}
		return true, nil
	})
}

// loadResult is what `testserver load` reported.
type loadResult struct {
	sent, answered, failed         int
	refused, reset, timeout, other int
	samples                        []string
	took                           time.Duration
}

func (r loadResult) String() string {
	return fmt.Sprintf("%d requests at %d/s over %v, %d answered, %d failed (refused %d, reset %d, timed out %d, other %d)",
		r.sent, rolloutRate, r.took.Round(time.Second), r.answered, r.failed, r.refused, r.reset, r.timeout, r.other)
}

// checkNoneCut fails the test for requests a stopping backend cut: refused
// or reset connections (and any error but a timeout), the loss of the race
// a preStop sleep or stop-after-unrouted is there to win. Timeouts are
// reported, not failed: with stop-after-unrouted (and a 1 s drain after it)
// a few still time out at a pod's replacement on a loaded machine (5 of
// 909, 11 of 700), none refused or reset; the preStop variant has shown
// none. Their cause is not known yet (docs/supported.md).
func checkNoneCut(t *testing.T, r loadResult) {
	t.Helper()
	if cut := r.refused + r.reset + r.other; cut != 0 {
		t.Errorf("%d of %d requests were cut during the rollout; want none: %s", cut, r.sent, strings.Join(r.samples, "; "))
	}
	if r.timeout != 0 {
		t.Logf("%d requests timed out (not counted as cut; see checkNoneCut): %s", r.timeout, strings.Join(r.samples, "; "))
	}
}

// rolloutUnderLoad restarts the Deployment's pods (kubectl rollout restart)
// while the client pod loads url, from 2 s before until 2 s after the
// rollout completed, and returns what the load saw.
func (p *Podvisor) rolloutUnderLoad(t *testing.T, ns, client, deployment, url string) loadResult {
	t.Helper()
	cmd := exec.Command(binary, "kubectl", "--kubeconfig", filepath.Join(p.DataDir, "admin.kubeconfig"),
		"exec", "-i", "-n", ns, client, "--", "/testserver", "load", "--rate", strconv.Itoa(rolloutRate), url)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr := &syncBuffer{}
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	lines := make(chan string, 64)
	go func() {
		s := bufio.NewScanner(out)
		for s.Scan() {
			lines <- s.Text()
		}
		close(lines)
	}()
	select {
	case l := <-lines:
		if l != "load started" {
			t.Fatalf("testserver load: %q; stderr %s", l, stderr)
		}
	case <-time.After(time.Minute):
		t.Fatalf("testserver load did not start within a minute; stderr %s", stderr)
	}
	start := time.Now()
	time.Sleep(2 * time.Second)
	if _, errOut, code := p.kubectl(t, "", nil, "rollout", "restart", "-n", ns, "deployment/"+deployment); code != 0 {
		t.Fatalf("kubectl rollout restart: exit %d: %s", code, errOut)
	}
	// The restart changed the template, so the generation: the wait
	// holds until the controller observed it.
	p.waitRolledOut(t, ns, deployment)
	time.Sleep(2 * time.Second)
	_ = stdin.Close()
	var r loadResult
	deadline := time.After(time.Minute)
	for done := false; !done; {
		select {
		case l, ok := <-lines:
			if !ok {
				done = true
				break
			}
			if strings.HasPrefix(l, "failure ") {
				r.samples = append(r.samples, l)
			} else if _, err := fmt.Sscanf(l, "sent %d answered %d failed %d refused %d reset %d timeout %d other %d",
				&r.sent, &r.answered, &r.failed, &r.refused, &r.reset, &r.timeout, &r.other); err != nil {
				t.Logf("testserver load: %s", l)
			}
		case <-deadline:
			t.Fatalf("testserver load did not end within a minute of its stdin closing; stderr %s", stderr)
		}
	}
	r.took = time.Since(start)
	if r.sent == 0 {
		t.Fatalf("testserver load sent nothing; stderr %s", stderr)
	}
	return r
}
