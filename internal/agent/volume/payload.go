package volume

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/podvisor/podvisor/internal/agent/containerspec"
	"github.com/podvisor/podvisor/internal/agent/volume/atomicwriter"
)

// payload is the content of an API-data volume (configMap, secret,
// downwardAPI, projected) as upstream's plugins compute it.
func (vm *Manager) payload(ctx context.Context, pod *v1.Pod, v v1.Volume) (map[string]atomicwriter.File, error) {
	switch {
	case v.ConfigMap != nil:
		src := v.ConfigMap
		optional := src.Optional != nil && *src.Optional
		cm, err := vm.cfg.Objects.ConfigMap(ctx, pod.UID, pod.Namespace, src.Name)
		if err != nil {
			if apierrors.IsNotFound(err) && optional {
				return map[string]atomicwriter.File{}, nil
			}
			return nil, err
		}
		return configMapPayload(src.Items, cm, src.DefaultMode, optional)
	case v.Secret != nil:
		src := v.Secret
		optional := src.Optional != nil && *src.Optional
		s, err := vm.cfg.Objects.Secret(ctx, pod.UID, pod.Namespace, src.SecretName)
		if err != nil {
			if apierrors.IsNotFound(err) && optional {
				return map[string]atomicwriter.File{}, nil
			}
			return nil, err
		}
		return secretPayload(src.Items, s, src.DefaultMode, optional)
	case v.DownwardAPI != nil:
		return vm.downwardPayload(pod, v.DownwardAPI.Items, v.DownwardAPI.DefaultMode)
	case v.Projected != nil:
		return vm.projectedPayload(ctx, pod, v.Projected)
	}
	return nil, fmt.Errorf("volume %q has no API data", v.Name)
}

func fileMode(item, def *int32) os.FileMode {
	switch {
	case item != nil:
		return os.FileMode(*item)
	case def != nil:
		return os.FileMode(*def)
	}
	return 0o644
}

func configMapPayload(items []v1.KeyToPath, cm *v1.ConfigMap, defaultMode *int32, optional bool) (map[string]atomicwriter.File, error) {
	out := map[string]atomicwriter.File{}
	if len(items) == 0 {
		for k, d := range cm.Data {
			out[k] = atomicwriter.File{Data: []byte(d), Mode: fileMode(nil, defaultMode)}
		}
		for k, d := range cm.BinaryData {
			out[k] = atomicwriter.File{Data: d, Mode: fileMode(nil, defaultMode)}
		}
		return out, nil
	}
	for _, it := range items {
		var data []byte
		if d, ok := cm.Data[it.Key]; ok {
			data = []byte(d)
		} else if d, ok := cm.BinaryData[it.Key]; ok {
			data = d
		} else if optional {
			continue
		} else {
			return nil, fmt.Errorf("configmap references non-existent config key: %s", it.Key)
		}
		out[it.Path] = atomicwriter.File{Data: data, Mode: fileMode(it.Mode, defaultMode)}
	}
	return out, nil
}

func secretPayload(items []v1.KeyToPath, s *v1.Secret, defaultMode *int32, optional bool) (map[string]atomicwriter.File, error) {
	out := map[string]atomicwriter.File{}
	if len(items) == 0 {
		for k, d := range s.Data {
			out[k] = atomicwriter.File{Data: d, Mode: fileMode(nil, defaultMode)}
		}
		return out, nil
	}
	for _, it := range items {
		d, ok := s.Data[it.Key]
		if !ok {
			if optional {
				continue
			}
			return nil, fmt.Errorf("secret references non-existent secret key: %s", it.Key)
		}
		out[it.Path] = atomicwriter.File{Data: d, Mode: fileMode(it.Mode, defaultMode)}
	}
	return out, nil
}

func (vm *Manager) downwardPayload(pod *v1.Pod, items []v1.DownwardAPIVolumeFile, defaultMode *int32) (map[string]atomicwriter.File, error) {
	out := map[string]atomicwriter.File{}
	var errs []error
	for _, it := range items {
		var val string
		var err error
		switch {
		case it.FieldRef != nil:
			val, err = containerspec.FieldValue(pod, it.FieldRef.FieldPath, vm.cfg.HostIP, "")
		case it.ResourceFieldRef != nil:
			var alloc v1.ResourceList
			if vm.cfg.Allocatable != nil {
				alloc = vm.cfg.Allocatable()
			}
			val, err = containerspec.ResourceValue(pod, nil, it.ResourceFieldRef, alloc)
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		out[filepath.Clean(it.Path)] = atomicwriter.File{Data: []byte(val), Mode: fileMode(it.Mode, defaultMode)}
	}
	return out, errors.Join(errs...)
}

// projectedPayload merges the sources in order: a path given by two
// sources gets the later one's content, as upstream.
func (vm *Manager) projectedPayload(ctx context.Context, pod *v1.Pod, p *v1.ProjectedVolumeSource) (map[string]atomicwriter.File, error) {
	out := map[string]atomicwriter.File{}
	var errs []error
	merge := func(part map[string]atomicwriter.File, err error) {
		if err != nil {
			errs = append(errs, err)
			return
		}
		for k, f := range part {
			out[k] = f
		}
	}
	for _, s := range p.Sources {
		switch {
		case s.ConfigMap != nil:
			optional := s.ConfigMap.Optional != nil && *s.ConfigMap.Optional
			cm, err := vm.cfg.Objects.ConfigMap(ctx, pod.UID, pod.Namespace, s.ConfigMap.Name)
			if err != nil {
				if !apierrors.IsNotFound(err) || !optional {
					errs = append(errs, err)
				}
				continue
			}
			merge(configMapPayload(s.ConfigMap.Items, cm, p.DefaultMode, optional))
		case s.Secret != nil:
			optional := s.Secret.Optional != nil && *s.Secret.Optional
			sec, err := vm.cfg.Objects.Secret(ctx, pod.UID, pod.Namespace, s.Secret.Name)
			if err != nil {
				if !apierrors.IsNotFound(err) || !optional {
					errs = append(errs, err)
				}
				continue
			}
			merge(secretPayload(s.Secret.Items, sec, p.DefaultMode, optional))
		case s.DownwardAPI != nil:
			merge(vm.downwardPayload(pod, s.DownwardAPI.Items, p.DefaultMode))
		case s.ServiceAccountToken != nil:
			merge(vm.tokenPayload(ctx, pod, s.ServiceAccountToken, p.DefaultMode))
		default:
			errs = append(errs, errors.New("projected volume source not supported by podvisor (clusterTrustBundle, podCertificate)"))
		}
	}
	return out, errors.Join(errs...)
}
