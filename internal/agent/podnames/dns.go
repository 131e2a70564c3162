package podnames

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"
)

// Resolver is a resolv.conf: name servers, search domains, options.
type Resolver struct {
	Servers  []string
	Searches []string
	Options  []string
}

// ParseResolvConf reads a resolv.conf as the kubelet does: nameserver lines
// add up, the last search line wins (trailing dots dropped, "." ignored),
// options lines merge (a later option of the same name replaces an earlier
// one). A nameserver line without an address is an error.
func ParseResolvConf(data string) (Resolver, error) {
	r := Resolver{Servers: []string{}, Searches: []string{}, Options: []string{}}
	var errs []string
	for _, line := range strings.Split(data, "\n") {
		line = strings.TrimSpace(line)
		if strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		switch f[0] {
		case "nameserver":
			if len(f) < 2 {
				errs = append(errs, "nameserver list is empty ")
				continue
			}
			r.Servers = append(r.Servers, f[1])
		case "search":
			r.Searches = []string{}
			for _, s := range f[1:] {
				if s != "." {
					r.Searches = append(r.Searches, strings.TrimSuffix(s, "."))
				}
			}
		case "options":
			r.Options = mergeOptions(r.Options, f[1:])
		}
	}
	if len(errs) > 0 {
		return r, fmt.Errorf("%s", strings.Join(errs, ", "))
	}
	return r, nil
}

// DNSConfig is the node's side of a pod's DNS (KubeletConfiguration).
type DNSConfig struct {
	ClusterDNS    []string // clusterDNS: the cluster's name servers
	ClusterDomain string   // clusterDomain, e.g. cluster.local
	// Host is the node's resolvConf as parsed; HostUnset: resolvConf is
	// "", so that a Default pod gets the node's own resolver (127.0.0.1
	// or ::1 per node IP) and no search.
	Host      Resolver
	HostUnset bool
	NodeIPs   []string
}

// Event is a warning the pod's DNS settings deserve: upstream's reason and
// message. OnNode: the node gets it too.
type Event struct {
	Reason, Message string
	OnNode          bool
}

// Upstream's limits (k8s.io/kubernetes/pkg/apis/core/validation).
const (
	maxNameservers     = 3
	maxSearchPaths     = 32
	maxSearchListChars = 2048
)

// PodDNS is the resolv.conf of the pod's sandbox, by its dnsPolicy:
//   - ClusterFirst (the default), and ClusterFirstWithHostNet: the cluster's
//     name servers, the search domains "<ns>.svc.<domain>", "svc.<domain>",
//     "<domain>" then the node's, option ndots:5. A hostNetwork pod with
//     ClusterFirst gets Default. Without clusterDNS: Default, with the
//     MissingClusterDNS warning;
//   - Default: the node's resolv.conf;
//   - None: nothing but spec.dnsConfig.
//
// spec.dnsConfig then adds servers and searches and overrides options; the
// result is cut to 3 servers and 32 search domains of at most 2048
// characters, with a DNSConfigForming warning.
func PodDNS(pod *v1.Pod, cfg DNSConfig) (Resolver, []Event) {
	var events []Event
	r := Resolver{
		Servers:  slices.Clone(cfg.Host.Servers),
		Searches: slices.Clone(cfg.Host.Searches),
		Options:  slices.Clone(cfg.Host.Options),
	}
	policy := pod.Spec.DNSPolicy
	if policy == "" {
		policy = v1.DNSClusterFirst
	}
	if policy == v1.DNSClusterFirst && pod.Spec.HostNetwork {
		policy = v1.DNSDefault
	}
	switch policy {
	case v1.DNSNone:
		r = Resolver{}
	case v1.DNSClusterFirst, v1.DNSClusterFirstWithHostNet:
		if len(cfg.ClusterDNS) > 0 {
			r.Servers = slices.Clone(cfg.ClusterDNS)
			if d := cfg.ClusterDomain; d != "" {
				r.Searches = unique(append([]string{pod.Namespace + ".svc." + d, "svc." + d, d}, r.Searches...))
			}
			r.Options = []string{"ndots:5"}
			break
		}
		msg := fmt.Sprintf("kubelet does not have ClusterDNS IP configured and cannot create Pod using %q policy. Falling back to %q policy.", v1.DNSClusterFirst, v1.DNSDefault)
		events = append(events, Event{Reason: "MissingClusterDNS", Message: fmt.Sprintf("pod: %q. %s", pod.Name+"_"+pod.Namespace+"("+string(pod.UID)+")", msg)},
			Event{Reason: "MissingClusterDNS", Message: msg, OnNode: true})
		fallthrough
	default: // Default
		if cfg.HostUnset {
			for _, ip := range cfg.NodeIPs {
				if a, err := netip.ParseAddr(ip); err == nil && a.Is6() && !a.Is4In6() {
					r.Servers = append(r.Servers, "::1")
				} else {
					r.Servers = append(r.Servers, "127.0.0.1")
				}
			}
			if len(r.Servers) == 0 {
				r.Servers = []string{"127.0.0.1"}
			}
			r.Searches = []string{"."}
		}
	}
	if d := pod.Spec.DNSConfig; d != nil {
		r.Servers = unique(append(r.Servers, d.Nameservers...))
		r.Searches = unique(append(r.Searches, d.Searches...))
		var opts []string
		for _, o := range d.Options {
			if o.Value != nil {
				opts = append(opts, o.Name+":"+*o.Value)
			} else {
				opts = append(opts, o.Name)
			}
		}
		r.Options = mergeOptions(r.Options, opts)
	}
	if len(r.Servers) > maxNameservers {
		r.Servers = r.Servers[:maxNameservers]
		events = append(events, Event{Reason: "DNSConfigForming",
			Message: "Nameserver limits were exceeded, some nameservers have been omitted, the applied nameserver line is: " + strings.Join(r.Servers, " ")})
	}
	var cut bool
	r.Searches, cut = fitSearches(r.Searches)
	if cut {
		events = append(events, Event{Reason: "DNSConfigForming",
			Message: "Search Line limits were exceeded, some search paths have been omitted, the applied search line is: " + strings.Join(r.Searches, " ")})
	}
	return r, events
}

// fitSearches keeps the first 32 search domains, drops those longer than a
// DNS subdomain (some resolvers abort on them), then drops domains from the
// end until the line fits in 2048 characters.
func fitSearches(s []string) ([]string, bool) {
	cut := false
	if len(s) > maxSearchPaths {
		s, cut = s[:maxSearchPaths], true
	}
	kept := s[:0:0]
	for _, d := range s {
		if len(d) > validation.DNS1123SubdomainMaxLength {
			cut = true
			continue
		}
		kept = append(kept, d)
	}
	for len(kept) > 0 && len(strings.Join(kept, " ")) > maxSearchListChars {
		kept, cut = kept[:len(kept)-1], true
	}
	return kept, cut
}

// mergeOptions adds options to list; an option of a name already there
// replaces it in place. (Upstream's map makes the order random; here it is
// first-seen.)
func mergeOptions(list, add []string) []string {
	out := slices.Clone(list)
	for _, o := range add {
		name, _, _ := strings.Cut(o, ":")
		i := slices.IndexFunc(out, func(e string) bool { n, _, _ := strings.Cut(e, ":"); return n == name })
		if i >= 0 {
			out[i] = o
		} else {
			out = append(out, o)
		}
	}
	return out
}

func unique(list []string) []string {
	seen := map[string]bool{}
	out := []string{}
	for _, s := range list {
		if !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	return out
}
