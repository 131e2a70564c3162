package podworker

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
	out := map[string]string{}
	for _, s := range byName {
		for k, v := range serviceVars(s) {
			out[k] = v
		}
	}
	return out, nil
}

// serviceVars are one service's variables.
func serviceVars(s *v1.Service) map[string]string {
	ip := s.Spec.ClusterIP
	if ip == "" || ip == v1.ClusterIPNone || len(s.Spec.Ports) == 0 {
		return nil
	}
	prefix := envName(s.Name)
	out := map[string]string{
		prefix + "_SERVICE_HOST": ip,
		prefix + "_SERVICE_PORT": strconv.Itoa(int(s.Spec.Ports[0].Port)),
	}
	for i, p := range s.Spec.Ports {
		if p.Name != "" {
			out[prefix+"_SERVICE_PORT_"+envName(p.Name)] = strconv.Itoa(int(p.Port))
		}
		proto := strings.ToLower(string(p.Protocol))
		if proto == "" {
			proto = "tcp"
		}
		url := proto + "://" + net.JoinHostPort(ip, strconv.Itoa(int(p.Port)))
		if i == 0 {
			out[prefix+"_PORT"] = url // Docker special-cases the first port
		}
		pp := fmt.Sprintf("%s_PORT_%d_%s", prefix, p.Port, strings.ToUpper(proto))
		out[pp] = url
		out[pp+"_PROTO"] = proto
		out[pp+"_PORT"] = strconv.Itoa(int(p.Port))
		out[pp+"_ADDR"] = ip
	}
	return out
}

func envName(s string) string { return strings.ToUpper(strings.ReplaceAll(s, "-", "_")) }
