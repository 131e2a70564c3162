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

// HostnameAndDomain is the pod's hostname (spec.hostnameOverride, else
// spec.hostname, else its name, cut to 63 characters without a trailing '-'
// or '.') and its domain ("<subdomain>.<namespace>.svc.<clusterDomain>"
// with spec.subdomain, else empty; none with hostnameOverride, which names
// the pod whole, as upstream's HostnameOverride (Beta, on by default in
// 1.36)). A hostname or subdomain that is not a DNS label, or an override
// that is not a DNS subdomain, is an error (the API validates them; a pod
// from elsewhere may not be).
func HostnameAndDomain(pod *v1.Pod, clusterDomain string) (hostname, domain string, err error) {
	if o := pod.Spec.HostnameOverride; o != nil {
		if msgs := validation.IsDNS1123Subdomain(*o); len(msgs) != 0 {
			return "", "", fmt.Errorf("pod HostnameOverride %q is not a valid DNS subdomain: %s", *o, strings.Join(msgs, ";"))
		}
		hostname, err = truncateHostname(pod.Name, *o)
		return hostname, "", err
	}
	hostname = pod.Name
	if h := pod.Spec.Hostname; h != "" {
		if msgs := validation.IsDNS1123Label(h); len(msgs) != 0 {
			return "", "", fmt.Errorf("pod Hostname %q is not a valid DNS label: %s", h, strings.Join(msgs, ";"))
		}
		hostname = h
	}
	if hostname, err = truncateHostname(pod.Name, hostname); err != nil {
		return "", "", err
	}
	if s := pod.Spec.Subdomain; s != "" {
		if msgs := validation.IsDNS1123Label(s); len(msgs) != 0 {
			return "", "", fmt.Errorf("pod Subdomain %q is not a valid DNS label: %s", s, strings.Join(msgs, ";"))
		}
		domain = fmt.Sprintf("%s.%s.svc.%s", s, pod.Namespace, clusterDomain)
	}
	return hostname, domain, nil
}

// truncateHostname cuts hostname to the 63 characters a label holds,
// without a trailing '-' or '.'.
func truncateHostname(podName, hostname string) (string, error) {
	if len(hostname) <= 63 {
		return hostname, nil
	}
	cut := strings.TrimRight(hostname[:63], "-.")
	if cut == "" {
		return "", fmt.Errorf("hostname for pod %q was invalid: %q", podName, hostname)
	}
	return cut, nil
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
