package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/miekg/dns"
)

// dnsQuery asks SERVER (host:port) one question and prints the exact
// answer, one line per record, after a line "rcode RCODE":
//
//	A NAME IP | AAAA NAME IP | CNAME NAME TARGET | SRV NAME PRIO WEIGHT PORT TARGET |
//	TXT NAME TEXT | PTR NAME TARGET | SOA NAME (authority section)
func dnsQuery(args []string) {
	if len(args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: testserver dns SERVER NAME TYPE")
		os.Exit(2)
	}
	qtype, ok := dns.StringToType[strings.ToUpper(args[2])]
	if !ok {
		fmt.Fprintf(os.Stderr, "testserver dns: unknown type %q\n", args[2])
		os.Exit(2)
	}
	m := new(dns.Msg)
	m.SetQuestion(dns.Fqdn(args[1]), qtype)
	c := &dns.Client{Timeout: 3 * time.Second}
	r, _, err := c.Exchange(m, args[0])
	if err != nil {
		fmt.Fprintln(os.Stderr, "testserver dns:", err)
		os.Exit(1)
	}
	fmt.Println("rcode", dns.RcodeToString[r.Rcode])
	for _, rr := range r.Answer {
		fmt.Println(rrLine(rr))
	}
	for _, rr := range r.Ns {
		if soa, ok := rr.(*dns.SOA); ok {
			fmt.Println("SOA", soa.Hdr.Name)
		}
	}
}

func rrLine(rr dns.RR) string {
	n := rr.Header().Name
	switch r := rr.(type) {
	case *dns.A:
		return fmt.Sprintf("A %s %s", n, r.A)
	case *dns.AAAA:
		return fmt.Sprintf("AAAA %s %s", n, r.AAAA)
	case *dns.CNAME:
		return fmt.Sprintf("CNAME %s %s", n, r.Target)
	case *dns.SRV:
		return fmt.Sprintf("SRV %s %d %d %d %s", n, r.Priority, r.Weight, r.Port, r.Target)
	case *dns.TXT:
		return fmt.Sprintf("TXT %s %s", n, strings.Join(r.Txt, " "))
	case *dns.PTR:
		return fmt.Sprintf("PTR %s %s", n, r.Ptr)
	}
	return rr.String()
}

// dnsLookup resolves NAME as a program in the pod does, through the search
// path and options of /etc/resolv.conf (Go's resolver), and prints the
// addresses sorted, one a line. SERVER "-" asks resolv.conf's name servers;
// else every query goes to SERVER (host:port), for a DNS on another port.
func dnsLookup(args []string) {
	if len(args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: testserver dns-lookup SERVER|- NAME")
		os.Exit(2)
	}
	r := &net.Resolver{PreferGo: true}
	if args[0] != "-" {
		server := args[0]
		r.Dial = func(ctx context.Context, network, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, network, server)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	addrs, err := r.LookupHost(ctx, args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, "testserver dns-lookup:", err)
		os.Exit(1)
	}
	sort.Strings(addrs)
	for _, a := range addrs {
		fmt.Println(a)
	}
}
