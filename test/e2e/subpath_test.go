package e2e

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// subPath into the four atomic-writer volumes, as upstream's conformance
// specs "Subpath Atomic writer volumes should support subpaths with
// configmap / secret / downward / projected pod": the subPath names a file
// of the volume's current payload (through the ..data symlink) and is
// mounted as a file; one naming a directory of the payload is mounted as a
// directory. An init container mounts each whole volume first, as the specs
// do. On the containerd runtime each container has its own root, and the
// file is mounted where the init container had the volume's directory, as
// the specs mount both at /test-volume; host processes share the host's
// paths, so there they differ.
func TestSubPathIntoAtomicWriterVolumes(t *testing.T) {
	t.Parallel()
	p := Shared(t)
	ns := p.Namespace("subpath-atomic")
	ctx := context.Background()
	if _, err := p.Admin.CoreV1().ConfigMaps(ns).Create(ctx, &v1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "my-configmap"},
		Data: map[string]string{"configmap-key": "configmap-value"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Admin.CoreV1().Secrets(ns).Create(ctx, &v1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "my-secret"},
		Data: map[string][]byte{"secret-key": []byte("secret-value")}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	cm := v1.LocalObjectReference{Name: "my-configmap"}
	kinds := []struct {
		name, subPath, want string
		source              v1.VolumeSource
	}{
		{"configmap", "configmap-key", "configmap-value", v1.VolumeSource{ConfigMap: &v1.ConfigMapVolumeSource{LocalObjectReference: cm}}},
		{"secret", "secret-key", "secret-value", v1.VolumeSource{Secret: &v1.SecretVolumeSource{SecretName: "my-secret"}}},
		{"downward", "downward/podname", "subpath", v1.VolumeSource{DownwardAPI: &v1.DownwardAPIVolumeSource{Items: []v1.DownwardAPIVolumeFile{
			{Path: "downward/podname", FieldRef: &v1.ObjectFieldSelector{FieldPath: "metadata.name"}}}}}},
		{"projected", "projected/configmap-key", "configmap-value", v1.VolumeSource{Projected: &v1.ProjectedVolumeSource{Sources: []v1.VolumeProjection{
			{ConfigMap: &v1.ConfigMapProjection{LocalObjectReference: cm, Items: []v1.KeyToPath{{Key: "configmap-key", Path: "projected/configmap-key"}}}}}}}},
	}
	base := t.TempDir()
	whole := sh("whole", "")
	sub := sh("sub", "")
	var wholeScript, subScript []string
	var volumes []v1.Volume
	for _, k := range kinds {
		volumes = append(volumes, v1.Volume{Name: k.name, VolumeSource: k.source})
		dir := filepath.Join(base, k.name)
		file := dir // the containerd runtime: a root of its own per container
		if p.Runtime != "containerd" {
			file = dir + "-file"
		}
		whole.VolumeMounts = append(whole.VolumeMounts, v1.VolumeMount{Name: k.name, MountPath: dir})
		wholeScript = append(wholeScript, fmt.Sprintf(`echo "%s=$(cat '%s/%s')"`, k.name, dir, k.subPath))
		sub.VolumeMounts = append(sub.VolumeMounts, v1.VolumeMount{Name: k.name, MountPath: file, SubPath: k.subPath})
		subScript = append(subScript, fmt.Sprintf(`test -f '%[2]s' && echo "%[1]s=$(cat '%[2]s')"`, k.name, file))
	}
	// A subPath naming a directory of the payload is a directory.
	subDir := filepath.Join(base, "projected-dir")
	sub.VolumeMounts = append(sub.VolumeMounts, v1.VolumeMount{Name: "projected", MountPath: subDir, SubPath: "projected"})
	subScript = append(subScript, fmt.Sprintf(`test -d '%[1]s' && echo "projected-dir=$(cat '%[1]s/configmap-key')"`, subDir))
	whole.Command[2] = strings.Join(wholeScript, "; ")
	sub.Command[2] = strings.Join(subScript, " && ")
	pod := p.pod(ns, "subpath", v1.RestartPolicyNever, sub)
	pod.Spec.InitContainers = []v1.Container{whole}
	pod.Spec.Volumes = volumes
	p.create(t, pod)
	got := p.waitPod(t, ns, "subpath", 3*time.Minute, "Succeeded", func(pod *v1.Pod) bool {
		return pod.Status.Phase == v1.PodSucceeded || pod.Status.Phase == v1.PodFailed
	})
	if got.Status.Phase != v1.PodSucceeded {
		t.Fatalf("pod %s", describe(got))
	}
	for _, c := range []string{"whole", "sub"} {
		out, err := p.logs(ns, "subpath", c)
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range kinds {
			if w := k.name + "=" + k.want; !strings.Contains(out, w) {
				t.Errorf("%s: log lacks %q:\n%s", c, w, out)
			}
		}
		if w := "projected-dir=configmap-value"; c == "sub" && !strings.Contains(out, w) {
			t.Errorf("%s: log lacks %q:\n%s", c, w, out)
		}
	}
}
