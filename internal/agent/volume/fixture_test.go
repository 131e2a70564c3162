package volume

import (
	"context"
	"path/filepath"
	"sync"
	"testing"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/record"
)

func testPod(name string) *v1.Pod {
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", UID: types.UID("uid-" + name)},
		Spec: v1.PodSpec{Containers: []v1.Container{{Name: "c", Command: []string{"sleep", "3600"}}},
			RestartPolicy: v1.RestartPolicyAlways},
	}
}

// fixture is a volume manager over a fake API holding objects, for one
// live pod whose directory is podDir.
type fixture struct {
	vm     *Manager
	client *fake.Clientset
	rec    *record.FakeRecorder
	pods   *fakePods
	podDir string
}

func newFixture(t *testing.T, pod *v1.Pod, objects ...k8sruntime.Object) *fixture {
	t.Helper()
	f := &fixture{client: fake.NewClientset(objects...), rec: record.NewFakeRecorder(100),
		pods: &fakePods{pods: map[types.UID]*v1.Pod{pod.UID: pod}}}
	podsDir := t.TempDir()
	f.podDir = filepath.Join(podsDir, "ns_"+pod.Name+"_"+string(pod.UID))
	vm, err := New(Config{NodeName: "n", PodsDir: podsDir, Client: f.client, Objects: clientObjects{f.client},
		Pods: f.pods, Recorder: f.rec})
	if err != nil {
		t.Fatal(err)
	}
	f.vm = vm
	return f
}

// clientObjects reads objects straight from the API, with upstream's
// not-found messages (as the agent's watched reads).
type clientObjects struct{ c *fake.Clientset }

func (o clientObjects) ConfigMap(ctx context.Context, _ types.UID, ns, name string) (*v1.ConfigMap, error) {
	cm, err := o.c.CoreV1().ConfigMaps(ns).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, apierrors.NewNotFound(schema.GroupResource{Resource: "configmap"}, name)
	}
	return cm, err
}

func (o clientObjects) Secret(ctx context.Context, _ types.UID, ns, name string) (*v1.Secret, error) {
	s, err := o.c.CoreV1().Secrets(ns).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, apierrors.NewNotFound(schema.GroupResource{Resource: "secret"}, name)
	}
	return s, err
}

// fakePods are the live pods by UID.
type fakePods struct {
	mu   sync.Mutex
	pods map[types.UID]*v1.Pod
}

func (p *fakePods) Pod(uid types.UID) (*v1.Pod, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	pod, ok := p.pods[uid]
	return pod, ok
}

func (p *fakePods) Dirs() map[string]bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := map[string]bool{}
	for _, pod := range p.pods {
		out[pod.Namespace+"_"+pod.Name+"_"+string(pod.UID)] = true
	}
	return out
}
