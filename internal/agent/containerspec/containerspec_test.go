package containerspec

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"

	"github.com/podvisor/podvisor/internal/agent/expansion"
	"github.com/podvisor/podvisor/internal/runtime"
)

// objects is an Objects from a fixed set, with the API's not-found errors.
type objects struct {
	cms     map[string]*v1.ConfigMap
	secrets map[string]*v1.Secret
}

func newObjects(objs ...any) objects {
	o := objects{cms: map[string]*v1.ConfigMap{}, secrets: map[string]*v1.Secret{}}
	for _, x := range objs {
		switch x := x.(type) {
		case *v1.ConfigMap:
			o.cms[x.Namespace+"/"+x.Name] = x
		case *v1.Secret:
			o.secrets[x.Namespace+"/"+x.Name] = x
		}
	}
	return o
}

func (o objects) ConfigMap(_ context.Context, ns, name string) (*v1.ConfigMap, error) {
	if cm, ok := o.cms[ns+"/"+name]; ok {
		return cm, nil
	}
	return nil, apierrors.NewNotFound(schema.GroupResource{Resource: "configmap"}, name)
}

func (o objects) Secret(_ context.Context, ns, name string) (*v1.Secret, error) {
	if s, ok := o.secrets[ns+"/"+name]; ok {
		return s, nil
	}
	return nil, apierrors.NewNotFound(schema.GroupResource{Resource: "secret"}, name)
}

func envPod(c v1.Container) *v1.Pod {
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "uid-1", Labels: map[string]string{"b": "2", "a": "1"}},
		Spec:       v1.PodSpec{NodeName: "node", ServiceAccountName: "sa", Containers: []v1.Container{c}},
	}
}

func envInput(pod *v1.Pod) EnvInput {
	return EnvInput{Pod: pod, Container: &pod.Spec.Containers[0], PodIP: "127.0.0.1", HostIP: "10.0.0.7",
		Allocatable: v1.ResourceList{v1.ResourceCPU: resource.MustParse("4"), v1.ResourceMemory: resource.MustParse("8Gi")},
		HostProcess: true, Hostname: "node-host"}
}

func env(t *testing.T, objs Objects, pod *v1.Pod) []string {
	t.Helper()
	out, err := Env(context.Background(), envInput(pod), objs, &expansion.Budget{})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestEnvFromThenEnvWithExpansionAsUpstream(t *testing.T) {
	objs := newObjects(&v1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "cm"}, Data: map[string]string{"K": "from-cm", "OTHER": "o"}})
	c := v1.Container{Name: "c",
		EnvFrom: []v1.EnvFromSource{{Prefix: "P_", ConfigMapRef: &v1.ConfigMapEnvSource{LocalObjectReference: v1.LocalObjectReference{Name: "cm"}}}},
		Env: []v1.EnvVar{
			{Name: "P_K", Value: "overridden"},
			{Name: "REF", Value: "$(P_OTHER)-$(UNDEFINED)-$$(P_K)"},
			{Name: "OPT", ValueFrom: &v1.EnvVarSource{ConfigMapKeyRef: &v1.ConfigMapKeySelector{
				LocalObjectReference: v1.LocalObjectReference{Name: "cm"}, Key: "missing", Optional: ptr.To(true)}}},
			{Name: "EMPTY"},
		}}
	got := env(t, objs, envPod(c))
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
	objs := newObjects(
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
		_, err := Env(context.Background(), envInput(pod), objs, &expansion.Budget{})
		var ce ConfigError
		if !errors.As(err, &ce) || err.Error() != tc.want {
			t.Errorf("got %v, want config error %q", err, tc.want)
		}
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
		if got, err := FieldValue(pod, path, "10.0.0.7", "10.0.0.7"); err != nil || got != want {
			t.Errorf("FieldValue(%s) = %q, %v; want %q", path, got, err, want)
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
		if got, err := ResourceValue(pod, c, ref, alloc); err != nil || got != tc.want {
			t.Errorf("ResourceValue(%s/%s) = %q, %v; want %q", tc.res, tc.divisor, got, err, tc.want)
		}
	}
}

func TestResourcesBecomeCgroupValues(t *testing.T) {
	c := &v1.Container{Resources: v1.ResourceRequirements{
		Limits:   v1.ResourceList{v1.ResourceCPU: resource.MustParse("500m"), v1.ResourceMemory: resource.MustParse("20Mi")},
		Requests: v1.ResourceList{v1.ResourceCPU: resource.MustParse("250m")},
	}}
	want := runtime.Resources{MemoryLimitBytes: 20 << 20, CPUQuotaMicros: 50000, CPUPeriodMicros: 100000, CPUShares: 256}
	if got := Resources(c); got != want {
		t.Errorf("got %+v, want %+v", got, want)
	}
	if got := Resources(&v1.Container{}); got != (runtime.Resources{CPUShares: 2}) {
		t.Errorf("best effort: got %+v, want shares 2 only", got)
	}
}

func TestContainerUserFromSecurityContexts(t *testing.T) {
	pod := envPod(v1.Container{Name: "c", SecurityContext: &v1.SecurityContext{RunAsNonRoot: ptr.To(true)}})
	if u, err := User(pod, &pod.Spec.Containers[0]); u != nil || err != nil {
		t.Errorf("no user set: %+v, %v", u, err)
	}
	pod.Spec.SecurityContext = &v1.PodSecurityContext{RunAsUser: ptr.To[int64](1000), RunAsGroup: ptr.To[int64](2000), SupplementalGroups: []int64{3000}, FSGroup: ptr.To[int64](4000)}
	u, err := User(pod, &pod.Spec.Containers[0])
	if err != nil || u.UID != 1000 || u.GID != 2000 || !slices.Equal(u.Groups, []uint32{3000, 4000}) || u.UIDUnset || u.GIDUnset {
		t.Errorf("got %+v, %v", u, err)
	}
	// fsGroup alone: the user and group stay the image's (unset).
	pod.Spec.SecurityContext = &v1.PodSecurityContext{FSGroup: ptr.To[int64](4000)}
	u, err = User(pod, &pod.Spec.Containers[0])
	if err != nil || !u.UIDUnset || !u.GIDUnset || !slices.Equal(u.Groups, []uint32{4000}) {
		t.Errorf("fsGroup only: got %+v, %v; want user and group unset", u, err)
	}
}

// An env whose references multiply ($(A) x100, then $(B) x100, …) asked the
// agent for gigabytes and took it out of memory: it is a config error now,
// found before the values are built; so are many copies of one big value and
// a command built the same way.
func TestEnvAndCommandExpansionBounded(t *testing.T) {
	objs := newObjects()
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
		_, err := Env(context.Background(), envInput(pod), objs, &expansion.Budget{})
		var ce ConfigError
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
	hostEnv := func(pod *v1.Pod, host bool) []string {
		in := envInput(pod)
		in.HostProcess = host
		out, err := Env(context.Background(), in, newObjects(), &expansion.Budget{})
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	out := hostEnv(envPod(v1.Container{Name: "c"}), true)
	if !has(out, "PATH=/usr/local/sbin:") || !has(out, "HOSTNAME=node-host") {
		t.Errorf("host process env %v, want PATH and HOSTNAME", out)
	}
	out = hostEnv(envPod(v1.Container{Name: "c"}), false)
	if has(out, "PATH=") || has(out, "HOSTNAME=") {
		t.Errorf("image runtime env %v, want neither PATH nor HOSTNAME", out)
	}
	for _, host := range []bool{true, false} {
		out = hostEnv(envPod(v1.Container{Name: "c", Env: []v1.EnvVar{{Name: "PATH", Value: "/opt/bin"}}}), host)
		if !has(out, "PATH=/opt/bin") || has(out, "PATH=/usr") {
			t.Errorf("env %v, want the pod's PATH", out)
		}
	}
}
