package probe

import (
	"fmt"
	"net"
	"strconv"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// resolvePort turns a probe's port (a number or the name of one of the
// container's ports) into a number.
func resolvePort(p intstr.IntOrString, c *v1.Container) (int, error) {
	var port int
	switch p.Type {
	case intstr.Int:
		port = p.IntValue()
	case intstr.String:
		found := false
		for _, cp := range c.Ports {
			if cp.Name == p.StrVal {
				port, found = int(cp.ContainerPort), true
				break
			}
		}
		if !found {
			// A number written as a string still works, as upstream.
			n, err := strconv.Atoi(p.StrVal)
			if err != nil {
				return 0, fmt.Errorf("port %q not found in the ports of container %q", p.StrVal, c.Name)
			}
			port = n
		}
	default:
		return 0, fmt.Errorf("invalid port %v", p)
	}
	if port <= 0 || port > 65535 {
		return 0, fmt.Errorf("invalid port number: %d", port)
	}
	return port, nil
}

func joinHostPort(host string, port int) string {
	return net.JoinHostPort(host, strconv.Itoa(port))
}
