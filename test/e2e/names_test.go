package e2e

import (
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	"github.com/podvisor/podvisor/internal/agent/podnames"
	"github.com/podvisor/podvisor/test/images"
)

// What a container on containerd sees of names, as on a kubelet's node:
// its hostname (spec.hostname, the FQDN with setHostnameAsFQDN), the
// kubelet's managed /etc/hosts (its own IP and names, hostAliases), and the
// resolv.conf of its dnsPolicy — read from inside the container.
func TestContainerdPodNamesAndDNS(t *testing.T) {
	t.Parallel()
	p := NewContainerdPodvisor(t, "--config", kubeletConfig(t, "clusterDNS: [10.43.0.10]\n"))
	p.Start()
	ns := p.Namespace("names")
	show := []string{"sh", "-c", "echo HOSTNAME $(hostname); echo IP $(hostname -i); cat /etc/hosts; echo RESOLV; cat /etc/resolv.conf"}
	newPod := func(name string, mod func(*v1.Pod)) {
		pod := p.imagePod(ns, name, images.BusyboxImage, v1.RestartPolicyNever, show, nil)
		mod(pod)
		p.create(t, pod)
	}
	newPod("named", func(pod *v1.Pod) {
		pod.Spec.Hostname, pod.Spec.Subdomain, pod.Spec.SetHostnameAsFQDN = "db-0", "db", ptr.To(true)
		pod.Spec.HostAliases = []v1.HostAlias{{IP: "192.0.2.1", Hostnames: []string{"foo.local", "bar.local"}}}
	})
	newPod("default", func(pod *v1.Pod) { pod.Spec.DNSPolicy = v1.DNSDefault })
	newPod("none", func(pod *v1.Pod) {
		pod.Spec.DNSPolicy = v1.DNSNone
		pod.Spec.DNSConfig = &v1.PodDNSConfig{Nameservers: []string{"192.0.2.53"}, Searches: []string{"x.example"},
			Options: []v1.PodDNSConfigOption{{Name: "ndots", Value: ptr.To("2")}}}
	})

	// out runs to completion and returns the pod, its log and its
	// resolv.conf's lines by keyword.
	out := func(name string) (*v1.Pod, string, map[string]string) {
		pod := p.waitPod(t, ns, name, 90*time.Second, "succeeded", func(pod *v1.Pod) bool { return pod.Status.Phase == v1.PodSucceeded })
		log := p.waitLogs(t, ns, name, "c", 10*time.Second, "RESOLV")
		resolv := map[string]string{}
		_, after, _ := strings.Cut(log, "RESOLV\n")
		for _, line := range strings.Split(after, "\n") {
			if k, v, ok := strings.Cut(strings.TrimSpace(line), " "); ok {
				resolv[k] = strings.TrimSpace(strings.Join([]string{resolv[k], v}, " "))
			}
		}
		return pod, log, resolv
	}

	pod, log, resolv := out("named")
	fqdn := "db-0.db." + ns + ".svc.cluster.local"
	for _, want := range []string{
		"HOSTNAME " + fqdn + "\n",
		"IP " + pod.Status.PodIP + "\n",
		"# Kubernetes-managed hosts file.\n127.0.0.1\tlocalhost\n",
		pod.Status.PodIP + "\t" + fqdn + "\tdb-0\n",
		"# Entries added by HostAliases.\n192.0.2.1\tfoo.local\tbar.local\n",
	} {
		if !strings.Contains(log, want) {
			t.Errorf("named: no %q in\n%s", want, log)
		}
	}
	if resolv["nameserver"] != "10.43.0.10" || resolv["options"] != "ndots:5" ||
		!strings.HasPrefix(resolv["search"], ns+".svc.cluster.local svc.cluster.local cluster.local") {
		t.Errorf("named (ClusterFirst): resolv.conf %q", resolv)
	}

	_, _, resolv = out("default")
	data, err := os.ReadFile("/etc/resolv.conf")
	if err != nil {
		t.Fatal(err)
	}
	host, err := podnames.ParseResolvConf(string(data))
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Fields(resolv["nameserver"]); !slices.Equal(got, host.Servers) {
		t.Errorf("default: name servers %q, want the node's %q", got, host.Servers)
	}

	_, _, resolv = out("none")
	if resolv["nameserver"] != "192.0.2.53" || resolv["search"] != "x.example" || resolv["options"] != "ndots:2" {
		t.Errorf("none: resolv.conf %q", resolv)
	}
}
