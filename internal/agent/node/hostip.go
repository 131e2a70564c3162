package node

import (
	"bufio"
	"net"
	"os"
	"strings"
)

// HostIP returns the IPv4 address of the interface that holds the default
// route, as the kubelet picks its InternalIP; nil when there is none.
// It reads /proc/net/route rather than dialling anything.
func HostIP() net.IP {
	f, err := os.Open("/proc/net/route")
	if err != nil {
		return nil
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	s.Scan() // header
	for s.Scan() {
		fields := strings.Fields(s.Text())
		if len(fields) < 2 || fields[1] != "00000000" {
			continue
		}
		iface, err := net.InterfaceByName(fields[0])
		if err != nil {
			continue
		}
		addrs, _ := iface.Addrs()
		for _, a := range addrs {
			if ipn, ok := a.(*net.IPNet); ok && ipn.IP.To4() != nil && !ipn.IP.IsLoopback() {
				return ipn.IP.To4()
			}
		}
	}
	return nil
}
