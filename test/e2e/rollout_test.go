package e2e

import (
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
	"github.com/podvisor/podvisor/test/servicetraffic"
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
			c, err := servicetraffic.EndpointConditions(ctx, p.Admin, ns, "solo", "solo")
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
// old pods are gone (servicetraffic.RolledOut).
func (p *Podvisor) waitRolledOut(t *testing.T, ns, name string) {
	t.Helper()
	Eventually(t, 5*time.Minute, "deployment "+name+" rolled out, no old pod left", func() (bool, error) {
		return servicetraffic.RolledOut(context.Background(), p.Admin, ns, name)
	})
}

// checkNoneCut fails the test for requests a stopping backend cut: refused
// or reset connections (and any error but a timeout), the loss of the race
// a preStop sleep or stop-after-unrouted is there to win. Timeouts are
// reported, not failed: with stop-after-unrouted (and a 1 s drain after it)
// a few still time out at a pod's replacement on a loaded machine (5 of
// 909, 11 of 700), none refused or reset; the preStop variant has shown
// none. Their cause is not known yet (docs/supported.md).
func checkNoneCut(t *testing.T, r servicetraffic.LoadResult) {
	t.Helper()
	if cut := r.Cut(); cut != 0 {
		t.Errorf("%d of %d requests were cut during the rollout; want none: %s", cut, r.Sent, strings.Join(r.Samples, "; "))
	}
	if r.Timeout != 0 {
		t.Logf("%d requests timed out (not counted as cut; see checkNoneCut): %s", r.Timeout, strings.Join(r.Samples, "; "))
	}
}

// rolloutUnderLoad restarts the Deployment's pods (kubectl rollout restart)
// while the client pod loads url, from 2 s before until 2 s after the
// rollout completed, and returns what the load saw.
func (p *Podvisor) rolloutUnderLoad(t *testing.T, ns, client, deployment, url string) servicetraffic.LoadResult {
	t.Helper()
	cmd := exec.Command(binary, append([]string{"kubectl", "--kubeconfig", filepath.Join(p.DataDir, "admin.kubeconfig"),
		"exec", "-i", "-n", ns, client, "--"}, servicetraffic.LoadCommand(rolloutRate, url)...)...)
	load, err := servicetraffic.StartLoad(cmd, rolloutRate)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(load.Kill)
	time.Sleep(2 * time.Second)
	if _, errOut, code := p.kubectl(t, "", nil, "rollout", "restart", "-n", ns, "deployment/"+deployment); code != 0 {
		t.Fatalf("kubectl rollout restart: exit %d: %s", code, errOut)
	}
	// The restart changed the template, so the generation: the wait
	// holds until the controller observed it.
	p.waitRolledOut(t, ns, deployment)
	time.Sleep(2 * time.Second)
	r, err := load.Stop()
	if err != nil {
		t.Fatal(err)
	}
	return r
}
