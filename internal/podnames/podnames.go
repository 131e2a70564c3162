// Package podnames is what a pod is called and how it resolves names, as
// the kubelet gives it to a container runtime: the hostname and domain
// (spec.hostname, spec.subdomain, setHostnameAsFQDN), the resolv.conf of
// its sandbox (dnsPolicy, dnsConfig, the node's clusterDNS, clusterDomain
// and resolvConf) and its managed /etc/hosts (the pod's own names and
// hostAliases). Pure functions: the caller reads files and records events.
//
// Upstream: https://kubernetes.io/docs/concepts/services-networking/dns-pod-service/
// and https://kubernetes.io/docs/tasks/network/customize-hosts-file-for-pods/
package podnames

import (
	"fmt"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"
)

// HostnameAndDomain is the pod's hostname (spec.hostname, else its name,
// cut to 63 characters without a trailing '-' or '.') and its domain
// ("<subdomain>.<namespace>.svc.<clusterDomain>" with spec.subdomain, else
// empty). A hostname or subdomain that is not a DNS label is an error
// (the API validates them; a pod from elsewhere may not be).
func HostnameAndDomain(pod *v1.Pod, clusterDomain string) (hostname, domain string, err error) {
	hostname = pod.Name
	if h := pod.Spec.Hostname; h != "" {
		if msgs := validation.IsDNS1123Label(h); len(msgs) != 0 {
			return "", "", fmt.Errorf("pod Hostname %q is not a valid DNS label: %s", h, strings.Join(msgs, ";"))
		}
		hostname = h
	}
	if len(hostname) > 63 {
		hostname = strings.TrimRight(hostname[:63], "-.")
		if hostname == "" {
			return "", "", fmt.Errorf("hostname for pod %q was invalid: %q", pod.Name, pod.Name)
		}
	}
	if s := pod.Spec.Subdomain; s != "" {
		if msgs := validation.IsDNS1123Label(s); len(msgs) != 0 {
			return "", "", fmt.Errorf("pod Subdomain %q is not a valid DNS label: %s", s, strings.Join(msgs, ";"))
		}
		domain = fmt.Sprintf("%s.%s.svc.%s", s, pod.Namespace, clusterDomain)
	}
	return hostname, domain, nil
}

// KernelHostname is the hostname the pod's UTS namespace gets: the FQDN
// with setHostnameAsFQDN and a domain, else the short name. The kernel
// holds at most 64 characters.
func KernelHostname(hostname, domain string, asFQDN *bool) (string, error) {
	if domain == "" || asFQDN == nil || !*asFQDN {
		return hostname, nil
	}
	fqdn := hostname + "." + domain
	if len(fqdn) > 64 {
		return "", fmt.Errorf("failed to construct FQDN from pod hostname and cluster domain, FQDN %s is too long (64 characters is the max, %d characters requested)", fqdn, len(fqdn))
	}
	return fqdn, nil
}
