package podnames

import (
	"bytes"
	"fmt"
	"strings"

	v1 "k8s.io/api/core/v1"
)

// EtcHosts is where a container sees the managed hosts file.
const EtcHosts = "/etc/hosts"

// HostsFile is the /etc/hosts of a pod with its own network: localhost
// entries, the pod's IPs with its FQDN (when it has a domain) and
// hostname, then the hostAliases — the kubelet's file, to the byte.
func HostsFile(podIPs []string, hostname, domain string, aliases []v1.HostAlias) []byte {
	var b bytes.Buffer
	b.WriteString("# Kubernetes-managed hosts file.\n")
	b.WriteString("127.0.0.1\tlocalhost\n")
	b.WriteString("::1\tlocalhost ip6-localhost ip6-loopback\n")
	b.WriteString("fe00::0\tip6-localnet\n")
	b.WriteString("fe00::0\tip6-mcastprefix\n")
	b.WriteString("fe00::1\tip6-allnodes\n")
	b.WriteString("fe00::2\tip6-allrouters\n")
	for _, ip := range podIPs {
		if domain != "" {
			fmt.Fprintf(&b, "%s\t%s.%s\t%s\n", ip, hostname, domain, hostname)
		} else {
			fmt.Fprintf(&b, "%s\t%s\n", ip, hostname)
		}
	}
	b.Write(aliasEntries(aliases))
	return b.Bytes()
}

// HostNetworkHostsFile is the /etc/hosts of a hostNetwork pod: the node's,
// then the hostAliases.
func HostNetworkHostsFile(node []byte, aliases []v1.HostAlias) []byte {
	var b bytes.Buffer
	b.WriteString("# Kubernetes-managed hosts file (host network).\n")
	b.Write(node)
	b.Write(aliasEntries(aliases))
	return b.Bytes()
}

func aliasEntries(aliases []v1.HostAlias) []byte {
	if len(aliases) == 0 {
		return nil
	}
	var b bytes.Buffer
	b.WriteString("\n# Entries added by HostAliases.\n")
	for _, a := range aliases {
		fmt.Fprintf(&b, "%s\t%s\n", a.IP, strings.Join(a.Hostnames, "\t"))
	}
	return b.Bytes()
}

// MountsOwnEtcHosts: the container mounts a volume at /etc/hosts itself,
// so it gets no managed file.
func MountsOwnEtcHosts(c *v1.Container) bool {
	for _, m := range c.VolumeMounts {
		if m.MountPath == EtcHosts {
			return true
		}
	}
	return false
}
