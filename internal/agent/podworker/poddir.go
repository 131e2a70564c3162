package podworker

import (
	"path/filepath"

	v1 "k8s.io/api/core/v1"
)

// PodDir is the pod's directory (logs, volumes), for measuring its usage.
func (m *Manager) PodDir(pod *v1.Pod) string {
	return filepath.Join(m.cfg.PodsDir, podDirName(pod))
}
