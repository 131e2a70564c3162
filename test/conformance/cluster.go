package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/podvisor/podvisor/test/netlab"
)

// cluster is -nodes N: a `podvisor server` in this network namespace,
// serving on the bridge of a lab of N machines (test/netlab), and a
// `podvisor agent` joined to it in each machine, as test/e2e's multi-node
// tests run them. Each node has its machine's address, a data dir, a
// containerd, a pod network, a service proxy and a cluster DNS of its own,
// and its API on the kubelet's port 10250 (free in its fresh namespace).
type cluster struct {
	bin, work, logDir string
	lab               *netlab.Lab
	server            *daemon
	agents            []*clusterAgent
}

// clusterAgent is one node: an agent in a machine of the lab.
type clusterAgent struct {
	name, dataDir string
	machine       int
	*daemon
}

func (c *cluster) serverDir() string  { return filepath.Join(c.work, "server") }
func (c *cluster) kubeconfig() string { return filepath.Join(c.serverDir(), "admin.kubeconfig") }

// criEndpoint is the first node's: the framework's --container-runtime-endpoint
// names one runtime.
func (c *cluster) criEndpoint() string { return criEndpoint(c.agents[0].dataDir) }

func (c *cluster) String() string {
	var nodes []string
	for _, a := range c.agents {
		nodes = append(nodes, fmt.Sprintf("%s at %s:%d", a.name, c.lab.Hosts[a.machine].Addr, kubeletPort))
	}
	return fmt.Sprintf("podvisor server at %s; nodes %s", c.lab.Gateway, strings.Join(nodes, ", "))
}

// start starts the server, joins an agent in every machine with a token
// of the server's, each with registries (registries.yaml) and the runner's
// kubelet configuration, and routes each node's pod /24 to its machine in
// this namespace: the API server (webhooks, aggregated APIs, the proxy
// subresources) and the e2e binary reach pods from here.
func (c *cluster) start(clusterCIDR string, registries []byte) error {
	if err := os.MkdirAll(c.serverDir(), 0o700); err != nil {
		return err
	}
	ports := make([]int, 4)
	for i := range ports {
		port, err := pickPort(ports[:i])
		if err != nil {
			return err
		}
		ports[i] = port
	}
	server := exec.Command(c.bin, "server", "--data-dir", c.serverDir(),
		"--bind-address", "0.0.0.0", "--advertise-address", c.lab.Gateway.String(),
		"--api-port", strconv.Itoa(ports[0]), "--etcd-client-port", strconv.Itoa(ports[1]),
		"--etcd-peer-port", strconv.Itoa(ports[2]), "--metrics-server-port", strconv.Itoa(ports[3]),
		"--cluster-cidr", clusterCIDR)
	var err error
	c.server, err = startDaemon("podvisor server", server, filepath.Join(c.logDir, "podvisor-server.stderr"),
		"podvisor server is ready: export KUBECONFIG="+c.kubeconfig())
	if err != nil {
		return err
	}
	join, err := c.joinArgs()
	if err != nil {
		return err
	}
	cfg, err := writeKubeletConfig(c.work)
	if err != nil {
		return err
	}
	errs := make([]error, len(c.lab.Hosts))
	var wg sync.WaitGroup
	for i := range c.lab.Hosts {
		a := &clusterAgent{name: fmt.Sprintf("conformance-%d", i+1), dataDir: filepath.Join(c.work, fmt.Sprintf("node-%d", i+1)), machine: i}
		c.agents = append(c.agents, a)
		if err := os.MkdirAll(a.dataDir, 0o700); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(a.dataDir, "registries.yaml"), registries, 0o600); err != nil {
			return err
		}
		// The agents route and do not masquerade the server's pod network.
		args := append([]string{"agent"}, join...)
		cmd := c.lab.Command(i, c.bin, append(args, "--node-name", a.name, "--data-dir", a.dataDir,
			"--config", cfg, "--cluster-cidr", clusterCIDR)...)
		wg.Go(func() {
			a.daemon, errs[i] = startDaemon("agent "+a.name, cmd, filepath.Join(c.logDir, "podvisor-"+a.name+".stderr"),
				"podvisor agent is ready: node "+a.name)
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	return c.routePodNetworks()
}

// joinArgs are the flags of the agent command `podvisor token create
// --print-join-command` prints: --server, --token, --ca-cert-hash.
func (c *cluster) joinArgs() ([]string, error) {
	out, err := exec.Command(c.bin, "token", "create", "--data-dir", c.serverDir(), "--print-join-command").Output()
	if err != nil {
		return nil, fmt.Errorf("podvisor token create: %w", err)
	}
	f := strings.Fields(string(out))
	if len(f) < 3 || f[0] != "podvisor" || f[1] != "agent" {
		return nil, fmt.Errorf("podvisor token create printed %q, want a `podvisor agent …` command", out)
	}
	return f[2:], nil
}

// routePodNetworks routes each node's pod CIDR to its machine, once the
// controller manager has given it one.
func (c *cluster) routePodNetworks() error {
	cfg, err := clientcmd.BuildConfigFromFlags("", c.kubeconfig())
	if err != nil {
		return err
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for _, a := range c.agents {
		var cidr string
		for cidr == "" {
			n, err := client.CoreV1().Nodes().Get(ctx, a.name, metav1.GetOptions{})
			if err == nil {
				cidr = n.Spec.PodCIDR
			}
			if cidr != "" {
				break
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("node %s has no pod CIDR after 2m (%v)", a.name, err)
			case <-time.After(time.Second):
			}
		}
		p, err := netip.ParsePrefix(cidr)
		if err != nil {
			return fmt.Errorf("node %s's pod CIDR %q: %w", a.name, cidr, err)
		}
		via := c.lab.Hosts[a.machine].Addr.String()
		if out, err := exec.Command("ip", "route", "replace", p.String(), "via", via).CombinedOutput(); err != nil {
			return fmt.Errorf("ip route replace %s via %s: %v: %s", p, via, err, out)
		}
	}
	return nil
}

// importImages imports the tars into every node's containerd.
func (c *cluster) importImages(tars []string, log io.Writer) error {
	for _, a := range c.agents {
		if err := importImages(c.bin, a.dataDir, tars, log); err != nil {
			return fmt.Errorf("node %s: %w", a.name, err)
		}
	}
	return nil
}

// stop deletes every pod through the API, so that the agents stop them as
// kubelets would; then each agent's leftover sandboxes go through its CRI,
// the agent gets SIGTERM and `podvisor reset` in its machine removes what
// it left (pod networks included); then the server stops. The lab's
// namespaces, and the routes through its bridge, go with the lab.
func (c *cluster) stop(logf func(string, ...any)) {
	if c.server != nil && c.server.running() {
		deletePods(c.kubeconfig(), logf)
	}
	for _, a := range c.agents {
		// An agent that failed to start was stopped by startDaemon, and
		// may have left its containerd all the same.
		if a.daemon != nil {
			if a.running() {
				purgeSandboxes(criEndpoint(a.dataDir), logf)
			}
			a.terminate(logf)
		}
		c.keepLog(a.dataDir, "podvisor-"+a.name+".log", logf)
		if out, err := c.lab.Command(a.machine, c.bin, "reset", "--data-dir", a.dataDir).CombinedOutput(); err != nil {
			logf("node %s: podvisor reset: %v\n%s", a.name, err, out)
		}
		removeContainerd(a.dataDir)
	}
	if c.server != nil {
		c.server.terminate(logf)
	}
	c.keepLog(c.serverDir(), "podvisor-server.log", logf)
}

// keepLog copies the podvisor.log of dataDir (its components' logs) into
// the results as name: the data dir goes with the work directory.
func (c *cluster) keepLog(dataDir, name string, logf func(string, ...any)) {
	b, err := os.ReadFile(filepath.Join(dataDir, "podvisor.log"))
	if err == nil {
		err = os.WriteFile(filepath.Join(c.logDir, name), b, 0o644)
	}
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		logf("keeping %s: %v", name, err)
	}
}
