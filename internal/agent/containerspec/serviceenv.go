package containerspec

import (
	"fmt"
	"net"
	"strconv"
	"strings"

	v1 "k8s.io/api/core/v1"
)

// ServiceEnv is the Docker-links style environment of the services a
// container sees, by name (the caller picks them as upstream's
// getServiceEnvVarMap: the namespace's own when enableServiceLinks, and the
// master's `kubernetes`). Services without a cluster IP (headless) give
// nothing.
func ServiceEnv(byName map[string]*v1.Service) map[string]string {
	out := map[string]string{}
	for _, s := range byName {
		for k, v := range serviceVars(s) {
			out[k] = v
		}
	}
	return out
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
