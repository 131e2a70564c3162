package clusterdns

import (
	"fmt"
	"strconv"
	"sync"

	"github.com/coredns/caddy"
	"github.com/coredns/coredns/core/dnsserver"
	"k8s.io/klog/v2"
)

// Server is one running CoreDNS instance. Apply starts it or replaces its
// configuration; a configuration that does not parse or set up leaves the
// running one serving (caddy's restart discards a failed new instance).
type Server struct {
	mu      sync.Mutex
	inst    *caddy.Instance
	current string
}

// Apply serves corefile. It returns whether anything changed.
func (s *Server) Apply(corefile string) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.inst != nil && corefile == s.current {
		return false, nil
	}
	in := caddy.CaddyfileInput{Contents: []byte(corefile), Filepath: "Corefile", ServerTypeName: "dns"}
	// CoreDNS's kubernetes plugin, set up by Start and Restart, takes over
	// klog for the whole process (every component's lines then read
	// "[INFO] plugin/kubernetes: …"): give klog back its own output, the log
	// file podvisor set, once it has.
	defer klog.ClearLogger()
	if s.inst == nil {
		inst, err := caddy.Start(in)
		if err != nil {
			return false, fmt.Errorf("CoreDNS: %w", err)
		}
		s.inst, s.current = inst, corefile
		return true, nil
	}
	inst, err := s.inst.Restart(in)
	if err != nil {
		return false, fmt.Errorf("CoreDNS: %w (still serving the previous configuration)", err)
	}
	s.inst, s.current = inst, corefile
	return true, nil
}

// ApplyOr serves corefile, or, when it fails and nothing serves yet (a bad
// user fragment already there when the node starts), serves fallback (the
// configuration without the user's fragments): there is then no last good
// configuration to keep, and the cluster's names must still answer. The
// error is corefile's; fellBack says fallback serves.
func (s *Server) ApplyOr(corefile, fallback string) (changed, fellBack bool, err error) {
	changed, err = s.Apply(corefile)
	if err == nil || s.Serving() {
		return changed, false, err
	}
	if _, ferr := s.Apply(fallback); ferr != nil {
		return false, false, fmt.Errorf("%w; without the customizations too: %v", err, ferr)
	}
	return true, true, fmt.Errorf("%w (serving without the customizations)", err)
}

// Serving reports whether a configuration serves.
func (s *Server) Serving() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.inst != nil
}

// Stop stops serving.
func (s *Server) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.inst != nil {
		_ = s.inst.Stop()
		s.inst = nil
	}
}

func init() {
	// stdout is podvisor's: its first line is the ready line users and
	// scripts wait for. CoreDNS announces its listeners there unless quiet;
	// podvisor logs them itself.
	dnsserver.Quiet = true
	caddy.Quiet = true
}

// SetDefaultPort makes server blocks that name no port listen on port:
// the users' *.server fragments then land on the node's DNS port as they do
// on :53 in k3s. CoreDNS keeps this in a process-wide variable; a podvisor
// process runs one DNS.
func SetDefaultPort(port int) {
	dnsserver.Port = strconv.Itoa(port)
}
