package main

import (
	"flag"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/miekg/dns"
)

// dnsBench asks SERVER the same question from --concurrency clients, each
// one query at a time over UDP, for --duration, and prints one line:
// "queries N errors E seconds S qps Q p50 P50 p99 P99 max MAX" (latencies
// of the answered queries, in microseconds). A query is an error when it
// gets no answer within --timeout or an rcode other than --rcode.
func dnsBench(args []string) {
	fs := flag.NewFlagSet("dns-bench", flag.ExitOnError)
	duration := fs.Duration("duration", 10*time.Second, "how long to query")
	concurrency := fs.Int("concurrency", 4, "clients querying at once")
	timeout := fs.Duration("timeout", 2*time.Second, "per query")
	wantRcode := fs.String("rcode", "NOERROR", "the answer's expected rcode")
	_ = fs.Parse(args)
	if fs.NArg() != 3 || *concurrency <= 0 {
		fmt.Fprintln(os.Stderr, "usage: testserver dns-bench [--duration D] [--concurrency N] SERVER NAME TYPE")
		os.Exit(2)
	}
	qtype, ok := dns.StringToType[strings.ToUpper(fs.Arg(2))]
	rcode, rok := dns.StringToRcode[strings.ToUpper(*wantRcode)]
	if !ok || !rok {
		fmt.Fprintf(os.Stderr, "testserver dns-bench: unknown type %q or rcode %q\n", fs.Arg(2), *wantRcode)
		os.Exit(2)
	}
	var (
		mu        sync.Mutex
		latencies []time.Duration
		errs      int
		firstErr  error
		wg        sync.WaitGroup
	)
	start := time.Now()
	end := start.Add(*duration)
	for range *concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := &dns.Client{Timeout: *timeout}
			var mine []time.Duration
			var bad int
			var badErr error
			for time.Now().Before(end) {
				m := new(dns.Msg)
				m.SetQuestion(dns.Fqdn(fs.Arg(1)), qtype)
				r, rtt, err := c.Exchange(m, fs.Arg(0))
				if err == nil && r.Rcode != rcode {
					err = fmt.Errorf("rcode %s", dns.RcodeToString[r.Rcode])
				}
				if err != nil {
					bad++
					if badErr == nil {
						badErr = err
					}
					continue
				}
				mine = append(mine, rtt)
			}
			mu.Lock()
			latencies = append(latencies, mine...)
			errs += bad
			if firstErr == nil {
				firstErr = badErr
			}
			mu.Unlock()
		}()
	}
	wg.Wait()
	took := time.Since(start)
	slices.Sort(latencies)
	q := func(p float64) int64 {
		if len(latencies) == 0 {
			return 0
		}
		return latencies[int(p*float64(len(latencies)-1))].Microseconds()
	}
	fmt.Printf("queries %d errors %d seconds %.2f qps %.0f p50 %d p99 %d max %d\n", len(latencies)+errs, errs,
		took.Seconds(), float64(len(latencies))/took.Seconds(), q(0.5), q(0.99), q(1))
	if firstErr != nil {
		fmt.Println("first error:", firstErr)
	}
}
