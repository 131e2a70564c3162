package podworker

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/podvisor/podvisor/internal/runtime"
)

// buildSpec turns a container of the pod into what the runtime needs. Every
// way it can fail is a configError that the user sees on the container.
func (w *worker) buildSpec(ctx context.Context, pod *v1.Pod, c *v1.Container, attempt int32) (runtime.ContainerSpec, error) {
	if len(c.Command) == 0 {
		return runtime.ContainerSpec{}, configError{fmt.Sprintf(
			"container %q has no command: the process runtime runs host processes and has no image to supply an entrypoint; set command", c.Name)}
	}
	if c.Stdin || c.TTY {
		return runtime.ContainerSpec{}, configError{fmt.Sprintf("container %q: stdin and tty are not supported by the process runtime", c.Name)}
	}
	env, err := w.m.containerEnv(ctx, pod, c)
	if err != nil {
		return runtime.ContainerSpec{}, err
	}
	lookup := map[string]string{}
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		lookup[k] = v
	}
	var cmd []string
	for _, s := range append(append([]string{}, c.Command...), c.Args...) {
		cmd = append(cmd, expand(s, lookup))
	}
	dir := w.podDir()
	if err := os.MkdirAll(filepath.Join(dir, c.Name), 0o755); err != nil {
		return runtime.ContainerSpec{}, err
	}
	tmp := c.TerminationMessagePath
	if tmp == "" {
		tmp = v1.TerminationMessagePathDefault
	}
	return runtime.ContainerSpec{
		PodUID: string(pod.UID), PodNamespace: pod.Namespace, PodName: pod.Name,
		Name: c.Name, Attempt: attempt, Command: cmd, Env: env,
		WorkingDir: c.WorkingDir, LogPath: w.logPath(c.Name, attempt),
		TerminationMessagePath: tmp,
	}, nil
}

// containerEnv builds the environment as the kubelet does: envFrom first,
// then env in order, each value with $(VAR) expanded against what precedes it.
func (m *Manager) containerEnv(ctx context.Context, pod *v1.Pod, c *v1.Container) ([]string, error) {
	vars := map[string]string{}
	var order []string
	set := func(k, v string) {
		if _, ok := vars[k]; !ok {
			order = append(order, k)
		}
		vars[k] = v
	}
	for _, from := range c.EnvFrom {
		data, err := m.envFromSource(ctx, pod.Namespace, from)
		if err != nil {
			return nil, err
		}
		keys := make([]string, 0, len(data))
		for k := range data {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			set(from.Prefix+k, data[k])
		}
	}
	for _, e := range c.Env {
		if e.ValueFrom == nil {
			set(e.Name, expand(e.Value, vars))
			continue
		}
		v, ok, err := m.envValueFrom(ctx, pod, c, e.ValueFrom)
		if err != nil {
			return nil, err
		}
		if ok {
			set(e.Name, v)
		}
	}
	if _, ok := vars["PATH"]; !ok {
		set("PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
	}
	if _, ok := vars["HOSTNAME"]; !ok {
		host, _ := os.Hostname()
		set("HOSTNAME", host)
	}
	out := make([]string, 0, len(order))
	for _, k := range order {
		out = append(out, k+"="+vars[k])
	}
	return out, nil
}

func (m *Manager) envFromSource(ctx context.Context, ns string, from v1.EnvFromSource) (map[string]string, error) {
	switch {
	case from.ConfigMapRef != nil:
		optional := from.ConfigMapRef.Optional != nil && *from.ConfigMapRef.Optional
		cm, err := m.cfg.Client.CoreV1().ConfigMaps(ns).Get(ctx, from.ConfigMapRef.Name, metav1.GetOptions{})
		if err != nil {
			if apierrors.IsNotFound(err) && optional {
				return nil, nil
			}
			return nil, configError{err.Error()}
		}
		return cm.Data, nil
	case from.SecretRef != nil:
		optional := from.SecretRef.Optional != nil && *from.SecretRef.Optional
		s, err := m.cfg.Client.CoreV1().Secrets(ns).Get(ctx, from.SecretRef.Name, metav1.GetOptions{})
		if err != nil {
			if apierrors.IsNotFound(err) && optional {
				return nil, nil
			}
			return nil, configError{err.Error()}
		}
		out := map[string]string{}
		for k, v := range s.Data {
			out[k] = string(v)
		}
		return out, nil
	}
	return nil, nil
}

// envValueFrom resolves one valueFrom; ok is false for an optional value that is absent.
func (m *Manager) envValueFrom(ctx context.Context, pod *v1.Pod, c *v1.Container, from *v1.EnvVarSource) (string, bool, error) {
	switch {
	case from.FieldRef != nil:
		v, err := m.fieldValue(pod, from.FieldRef.FieldPath)
		return v, err == nil, err
	case from.ResourceFieldRef != nil:
		v, err := resourceValue(pod, c, from.ResourceFieldRef)
		return v, err == nil, err
	case from.ConfigMapKeyRef != nil:
		ref := from.ConfigMapKeyRef
		optional := ref.Optional != nil && *ref.Optional
		cm, err := m.cfg.Client.CoreV1().ConfigMaps(pod.Namespace).Get(ctx, ref.Name, metav1.GetOptions{})
		if err != nil {
			if apierrors.IsNotFound(err) && optional {
				return "", false, nil
			}
			return "", false, configError{err.Error()}
		}
		v, ok := cm.Data[ref.Key]
		if !ok {
			if b, okb := cm.BinaryData[ref.Key]; okb {
				return string(b), true, nil
			}
			if optional {
				return "", false, nil
			}
			return "", false, configError{fmt.Sprintf("couldn't find key %s in ConfigMap %s/%s", ref.Key, pod.Namespace, ref.Name)}
		}
		return v, true, nil
	case from.SecretKeyRef != nil:
		ref := from.SecretKeyRef
		optional := ref.Optional != nil && *ref.Optional
		s, err := m.cfg.Client.CoreV1().Secrets(pod.Namespace).Get(ctx, ref.Name, metav1.GetOptions{})
		if err != nil {
			if apierrors.IsNotFound(err) && optional {
				return "", false, nil
			}
			return "", false, configError{err.Error()}
		}
		v, ok := s.Data[ref.Key]
		if !ok {
			if optional {
				return "", false, nil
			}
			return "", false, configError{fmt.Sprintf("couldn't find key %s in Secret %s/%s", ref.Key, pod.Namespace, ref.Name)}
		}
		return string(v), true, nil
	}
	return "", false, configError{"env valueFrom with no source"}
}

func (m *Manager) fieldValue(pod *v1.Pod, path string) (string, error) {
	switch path {
	case "metadata.name":
		return pod.Name, nil
	case "metadata.namespace":
		return pod.Namespace, nil
	case "metadata.uid":
		return string(pod.UID), nil
	case "spec.nodeName":
		return pod.Spec.NodeName, nil
	case "spec.serviceAccountName":
		return pod.Spec.ServiceAccountName, nil
	case "status.hostIP", "status.podIP":
		return m.cfg.HostIP, nil
	case "status.hostIPs", "status.podIPs":
		return m.cfg.HostIP, nil
	}
	for _, prefix := range []string{"metadata.labels", "metadata.annotations"} {
		if rest, ok := strings.CutPrefix(path, prefix+"['"); ok && strings.HasSuffix(rest, "']") {
			key := strings.TrimSuffix(rest, "']")
			if prefix == "metadata.labels" {
				return pod.Labels[key], nil
			}
			return pod.Annotations[key], nil
		}
	}
	return "", configError{fmt.Sprintf("unsupported fieldRef fieldPath %q", path)}
}

func resourceValue(pod *v1.Pod, c *v1.Container, ref *v1.ResourceFieldSelector) (string, error) {
	target := c
	if ref.ContainerName != "" {
		t, ok := findContainer(pod, ref.ContainerName)
		if !ok {
			return "", configError{fmt.Sprintf("resourceFieldRef: no container %q", ref.ContainerName)}
		}
		target = t
	}
	divisor := ref.Divisor
	var q = target.Resources.Limits
	name := ref.Resource
	if rest, ok := strings.CutPrefix(name, "requests."); ok {
		q, name = target.Resources.Requests, rest
	} else {
		name = strings.TrimPrefix(name, "limits.")
	}
	v, ok := q[v1.ResourceName(name)]
	if !ok {
		// Unset limits default to the node's allocatable, as upstream.
		return "", configError{fmt.Sprintf("resourceFieldRef %q: not set on container %q (defaulting to node allocatable is not supported yet)", ref.Resource, target.Name)}
	}
	if divisor.IsZero() {
		if name == "cpu" {
			return fmt.Sprint((v.MilliValue() + 999) / 1000), nil
		}
		return fmt.Sprint(v.Value()), nil
	}
	if name == "cpu" {
		return fmt.Sprint((v.MilliValue() + divisor.MilliValue() - 1) / divisor.MilliValue()), nil
	}
	return fmt.Sprint((v.Value() + divisor.Value() - 1) / divisor.Value()), nil
}

// expand replaces $(VAR) with its value when VAR is defined, turns $$ into $,
// and leaves anything else as written, as the kubelet's expansion does.
func expand(s string, vars map[string]string) string {
	if !strings.Contains(s, "$") {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '$' || i+1 >= len(s) {
			b.WriteByte(s[i])
			continue
		}
		switch s[i+1] {
		case '$':
			b.WriteByte('$')
			i++
		case '(':
			end := strings.IndexByte(s[i+2:], ')')
			if end < 0 {
				b.WriteString(s[i:])
				return b.String()
			}
			name := s[i+2 : i+2+end]
			if v, ok := vars[name]; ok {
				b.WriteString(v)
			} else {
				b.WriteString(s[i : i+3+end])
			}
			i += 2 + end
		default:
			b.WriteByte('$')
		}
	}
	return b.String()
}
