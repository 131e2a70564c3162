package containerspec

import (
	"context"
	"fmt"
	"maps"
	"sort"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/podvisor/podvisor/internal/agent/expansion"
)

// Objects reads the ConfigMaps and Secrets a container's environment refers
// to, in the pod's namespace; a missing one is an error IsNotFound knows.
type Objects interface {
	ConfigMap(ctx context.Context, namespace, name string) (*v1.ConfigMap, error)
	Secret(ctx context.Context, namespace, name string) (*v1.Secret, error)
}

// EnvInput is what a container's environment is made of, beside the objects
// it reads.
type EnvInput struct {
	Pod       *v1.Pod
	Container *v1.Container
	// PodIP and HostIP answer the downward API's status.podIP and
	// status.hostIP; Allocatable stands in for unset limits.
	PodIP, HostIP string
	Allocatable   v1.ResourceList
	// Services are the service-link variables the container sees
	// (ServiceEnv).
	Services map[string]string
	// HostProcess: the container is a host process with no image to supply
	// PATH, and HOSTNAME is the node's, Hostname.
	HostProcess bool
	Hostname    string
}

// Env builds the environment as the kubelet's makeEnvironmentVariables:
// envFrom first, then env in order (a later definition replaces an earlier
// one), each value with $(VAR) expanded against what precedes it and the
// service variables, then the service variables nothing replaced. Every
// value counts against budget: references multiply, and an env the agent
// cannot hold in memory is a config error, not an agent out of memory.
func Env(ctx context.Context, in EnvInput, objs Objects, budget *expansion.Budget) ([]string, error) {
	pod, c, services := in.Pod, in.Container, in.Services
	vars := map[string]string{}
	// scope is what $(VAR) sees: the variables so far over the service variables.
	scope := maps.Clone(services)
	if scope == nil {
		scope = map[string]string{}
	}
	var order []string
	set := func(k, v string) error {
		if err := budget.Charge(len(k) + len(v) + 1); err != nil {
			return ConfigError{fmt.Sprintf("container %q: environment %v", c.Name, err)}
		}
		if _, ok := vars[k]; !ok {
			order = append(order, k)
		}
		vars[k] = v
		scope[k] = v
		return nil
	}
	for _, from := range c.EnvFrom {
		data, err := envFromSource(ctx, pod, from, objs)
		if err != nil {
			return nil, err
		}
		keys := make([]string, 0, len(data))
		for k := range data {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			if err := set(from.Prefix+k, data[k]); err != nil {
				return nil, err
			}
		}
	}
	for _, e := range c.Env {
		if e.Value != "" || e.ValueFrom == nil {
			v, err := expansion.Expand(e.Value, scope)
			if err != nil {
				return nil, ConfigError{fmt.Sprintf("container %q: env %s %v", c.Name, e.Name, err)}
			}
			if err := set(e.Name, v); err != nil {
				return nil, err
			}
			continue
		}
		v, ok, err := envValueFrom(ctx, in, e.ValueFrom, objs)
		if err != nil {
			return nil, err
		}
		if ok {
			if err := set(e.Name, v); err != nil {
				return nil, err
			}
		}
	}
	svcKeys := make([]string, 0, len(services))
	for k := range services {
		svcKeys = append(svcKeys, k)
	}
	sort.Strings(svcKeys)
	// What nothing replaced: the service variables, then, for host
	// processes, PATH and HOSTNAME. A runtime with images leaves those to the
	// image and to itself, as under a kubelet: containerd sets HOSTNAME to
	// the pod's hostname, and a PATH set here would replace the image's.
	var defaults [][2]string
	for _, k := range svcKeys {
		defaults = append(defaults, [2]string{k, services[k]})
	}
	if in.HostProcess {
		defaults = append(defaults, [2]string{"PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}, [2]string{"HOSTNAME", in.Hostname})
	}
	for _, kv := range defaults {
		if _, ok := vars[kv[0]]; !ok {
			if err := set(kv[0], kv[1]); err != nil {
				return nil, err
			}
		}
	}
	out := make([]string, 0, len(order))
	for _, k := range order {
		out = append(out, k+"="+vars[k])
	}
	return out, nil
}

func envFromSource(ctx context.Context, pod *v1.Pod, from v1.EnvFromSource, objs Objects) (map[string]string, error) {
	switch {
	case from.ConfigMapRef != nil:
		optional := from.ConfigMapRef.Optional != nil && *from.ConfigMapRef.Optional
		cm, err := objs.ConfigMap(ctx, pod.Namespace, from.ConfigMapRef.Name)
		if err != nil {
			if apierrors.IsNotFound(err) && optional {
				return nil, nil
			}
			return nil, ConfigError{err.Error()}
		}
		return cm.Data, nil
	case from.SecretRef != nil:
		optional := from.SecretRef.Optional != nil && *from.SecretRef.Optional
		s, err := objs.Secret(ctx, pod.Namespace, from.SecretRef.Name)
		if err != nil {
			if apierrors.IsNotFound(err) && optional {
				return nil, nil
			}
			return nil, ConfigError{err.Error()}
		}
		out := map[string]string{}
		for k, v := range s.Data {
			out[k] = string(v)
		}
		return out, nil
	}
	return nil, nil
}

// envValueFrom resolves one valueFrom; ok is false for an optional value
// that is absent (the variable is then not set at all, as upstream).
func envValueFrom(ctx context.Context, in EnvInput, from *v1.EnvVarSource, objs Objects) (string, bool, error) {
	pod, c := in.Pod, in.Container
	switch {
	case from.FieldRef != nil:
		v, err := FieldValue(pod, from.FieldRef.FieldPath, in.HostIP, in.PodIP)
		return v, err == nil, err
	case from.ResourceFieldRef != nil:
		v, err := ResourceValue(pod, c, from.ResourceFieldRef, in.Allocatable)
		return v, err == nil, err
	case from.ConfigMapKeyRef != nil:
		ref := from.ConfigMapKeyRef
		optional := ref.Optional != nil && *ref.Optional
		cm, err := objs.ConfigMap(ctx, pod.Namespace, ref.Name)
		if err != nil {
			if apierrors.IsNotFound(err) && optional {
				return "", false, nil
			}
			return "", false, ConfigError{err.Error()}
		}
		v, ok := cm.Data[ref.Key]
		if !ok {
			if optional {
				return "", false, nil
			}
			return "", false, ConfigError{fmt.Sprintf("couldn't find key %s in ConfigMap %s/%s", ref.Key, pod.Namespace, ref.Name)}
		}
		return v, true, nil
	case from.SecretKeyRef != nil:
		ref := from.SecretKeyRef
		optional := ref.Optional != nil && *ref.Optional
		s, err := objs.Secret(ctx, pod.Namespace, ref.Name)
		if err != nil {
			if apierrors.IsNotFound(err) && optional {
				return "", false, nil
			}
			return "", false, ConfigError{err.Error()}
		}
		v, ok := s.Data[ref.Key]
		if !ok {
			if optional {
				return "", false, nil
			}
			return "", false, ConfigError{fmt.Sprintf("couldn't find key %s in Secret %s/%s", ref.Key, pod.Namespace, ref.Name)}
		}
		return string(v), true, nil
	}
	return "", false, ConfigError{"env valueFrom with no source"}
}

// ExpandAll expands $(VAR) references in each of list, within budget.
func ExpandAll(list []string, lookup map[string]string, budget *expansion.Budget) ([]string, error) {
	var out []string
	for _, s := range list {
		v, err := budget.Expand(s, lookup)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, nil
}
