package podworker

import (
	"context"
	"fmt"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/podvisor/podvisor/internal/agent/containerspec"
)

// serviceEnv is the Docker-links style environment of the services a
// container sees, as upstream's getServiceEnvVarMap: the `kubernetes`
// service of the default namespace always, the services of the pod's own
// namespace when enableServiceLinks (default true) says so. Services without
// a cluster IP (headless) give nothing.
func (m *Manager) serviceEnv(ctx context.Context, pod *v1.Pod) (map[string]string, error) {
	if m.cfg.Client == nil {
		return nil, nil // no API (tests): no services
	}
	links := pod.Spec.EnableServiceLinks == nil || *pod.Spec.EnableServiceLinks
	byName := map[string]*v1.Service{}
	if links {
		list, err := m.cfg.Client.CoreV1().Services(pod.Namespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			return nil, fmt.Errorf("list services: %w", err)
		}
		for i := range list.Items {
			byName[list.Items[i].Name] = &list.Items[i]
		}
	}
	// A namespace's own service named kubernetes wins over the master's, as upstream.
	if _, own := byName["kubernetes"]; !own {
		master, err := m.cfg.Client.CoreV1().Services(metav1.NamespaceDefault).Get(ctx, "kubernetes", metav1.GetOptions{})
		if err == nil {
			byName["kubernetes"] = master
		}
	}
	return containerspec.ServiceEnv(byName), nil
}
