package main

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// load sends GET URL at --rate requests a second, each on a new connection
// (so that a Service's proxy picks a backend for each), until its stdin
// ends (a test closes `kubectl exec -i`'s stdin) or --duration passes. It
// says "load started" once the first request is sent, then at the end
// prints one summary line, "sent N answered M failed F refused R reset S
// timeout T other O" (the failures by kind: a refused connection and a
// reset one are what a backend that stopped while still routed gives; a
// timeout, a packet that found nobody), and the first --samples failures
// as "failure AT-SINCE-START ERROR". Requests that were sent but had not
// been answered when the load stopped are waited for (up to --timeout) and
// counted.
func load(args []string) {
	fs := flag.NewFlagSet("load", flag.ExitOnError)
	rate := fs.Int("rate", 100, "requests a second")
	duration := fs.Duration("duration", 10*time.Minute, "stop after this long even if stdin stays open")
	timeout := fs.Duration("timeout", 5*time.Second, "per request")
	samples := fs.Int("samples", 20, "failures to print")
	_ = fs.Parse(args)
	if fs.NArg() != 1 || *rate <= 0 {
		fmt.Fprintln(os.Stderr, "usage: testserver load [--rate N] [--duration D] [--timeout D] URL")
		os.Exit(2)
	}
	url := fs.Arg(0)
	stop := make(chan struct{})
	go func() {
		_, _ = io.Copy(io.Discard, bufio.NewReader(os.Stdin))
		close(stop)
	}()
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: *timeout}
	var (
		sent, answered atomic.Int64
		byKind         [4]atomic.Int64 // refused, reset, timeout, other
		mu             sync.Mutex
		failures       []string
		wg             sync.WaitGroup
	)
	start := time.Now()
	tick := time.NewTicker(time.Second / time.Duration(*rate))
	defer tick.Stop()
	end := time.After(*duration)
	fmt.Println("load started")
loop:
	for {
		select {
		case <-stop:
			break loop
		case <-end:
			break loop
		case <-tick.C:
		}
		sent.Add(1)
		wg.Add(1)
		go func(at time.Duration) {
			defer wg.Done()
			resp, err := client.Get(url)
			if err == nil {
				_, err = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if err == nil && resp.StatusCode != http.StatusOK {
					err = fmt.Errorf("status %d", resp.StatusCode)
				}
			}
			if err == nil {
				answered.Add(1)
				return
			}
			byKind[failureKind(err)].Add(1)
			mu.Lock()
			failures = append(failures, fmt.Sprintf("failure %v %v", at.Round(time.Millisecond), err))
			mu.Unlock()
		}(time.Since(start))
	}
	wg.Wait()
	fmt.Printf("sent %d answered %d failed %d refused %d reset %d timeout %d other %d\n", sent.Load(), answered.Load(),
		sent.Load()-answered.Load(), byKind[0].Load(), byKind[1].Load(), byKind[2].Load(), byKind[3].Load())
	for i, f := range failures {
		if i == *samples {
			break
		}
		fmt.Println(f)
	}
}

// failureKind sorts a failed request: 0 refused, 1 reset (or closed before
// an answer), 2 timed out, 3 anything else.
func failureKind(err error) int {
	var ne net.Error
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return 0
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return 1
	case errors.As(err, &ne) && ne.Timeout():
		return 2
	}
	return 3
}
