package clusterdns

import (
	"bufio"
	"os"
	"strings"
)

// resolvedUpstream is where systemd-resolved writes the name servers it
// forwards to.
const resolvedUpstream = "/run/systemd/resolve/resolv.conf"

// UpstreamResolvConf is the file whose name servers get names outside the
// cluster: the node's resolv.conf, or, when that points at systemd-resolved's
// stub only (127.0.0.53), resolved's own upstream file — CoreDNS's loop
// check and caching then see the real servers, as k3s does.
func UpstreamResolvConf(resolvConf string, exists func(string) bool) string {
	if resolvConf == "" {
		resolvConf = "/etc/resolv.conf"
	}
	f, err := os.Open(resolvConf)
	if err != nil {
		return resolvConf
	}
	defer f.Close()
	servers := nameservers(f)
	if len(servers) > 0 && allStub(servers) && exists(resolvedUpstream) {
		return resolvedUpstream
	}
	return resolvConf
}

func nameservers(f *os.File) []string {
	var out []string
	s := bufio.NewScanner(f)
	for s.Scan() {
		fields := strings.Fields(s.Text())
		if len(fields) >= 2 && fields[0] == "nameserver" {
			out = append(out, fields[1])
		}
	}
	return out
}

func allStub(servers []string) bool {
	for _, s := range servers {
		if s != "127.0.0.53" {
			return false
		}
	}
	return true
}
