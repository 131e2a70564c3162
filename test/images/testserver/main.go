// Command testserver is the program of the podvisor.test/testserver image:
// like upstream's agnhost, one static binary whose first argument picks what
// a test container does.
//
//	serve [--port 8080] [--healthz-fail-after N]
//	                      HTTP: / and /hostname (the hostname), /healthz (200,
//	                      or 503 after /healthz/fail until /healthz/ok, and
//	                      500 from its request N+1 on when N > 0),
//	                      /echo?msg=M (M), /exit?code=N (answers, then exits N);
//	                      prints a line for every request, with its User-Agent
//	get [--count N] [--interval D] [--token-file F] [--ca-file F] URL
//	                      N requests, each on a new connection; a line
//	                      "STATUS BODY" or "error: …" per request
//	grpc-health [--port 8080]
//	                      gRPC health service, SERVING for the server ("")
//	pause                 waits for SIGTERM or SIGINT, then exits 0
//	hog BYTES             holds BYTES of memory it has written to (so that
//	                      they count as used) until SIGTERM or SIGINT
//	fail N                exits with code N
//	sleep D               sleeps D (a Go duration or seconds), then exits 0
//	stop-signal           waits for any catchable stop signal, prints
//	                      "received SIGNAME" and exits 0
//	entrypoint-tester     prints its argv, uid:gid, working directory and
//	                      environment, then exits 0
//	dns SERVER NAME TYPE  one DNS question to SERVER (host:port); prints the
//	                      rcode and the answer records exactly
//	dns-lookup SERVER|- NAME
//	                      resolves NAME through resolv.conf's search path,
//	                      sending every query to SERVER ("-": resolv.conf's)
//	dns-bench [--duration D] [--concurrency N] SERVER NAME TYPE
//	                      the same question over and over; prints queries
//	                      a second and latency quantiles
//
// Every line it prints goes to stdout, so tests read it from the container log.
package main

import (
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"runtime"
	"sort"
	"strconv"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: testserver serve|get URL|load URL|grpc-health|pause|hog BYTES|fail N|sleep D|stop-signal|entrypoint-tester|dns|dns-lookup|dns-bench")
		os.Exit(2)
	}
	args := os.Args[2:]
	switch os.Args[1] {
	case "serve", "netexec", "serve-hostname":
		serve(args)
	case "grpc-health":
		grpcHealth(args)
	case "get":
		get(args)
	case "load":
		load(args)
	case "pause":
		waitFor(syscall.SIGTERM, syscall.SIGINT)
	case "hog":
		hog(args)
	case "fail":
		os.Exit(fail(args))
	case "sleep":
		sleep(args)
	case "stop-signal":
		waitFor(syscall.SIGTERM, syscall.SIGINT, syscall.SIGQUIT, syscall.SIGHUP,
			syscall.SIGUSR1, syscall.SIGUSR2, syscall.SIGWINCH)
	case "entrypoint-tester":
		entrypointTester()
	case "dns":
		dnsQuery(args)
	case "dns-lookup":
		dnsLookup(args)
	case "dns-bench":
		dnsBench(args)
	default:
		fmt.Fprintf(os.Stderr, "testserver: unknown mode %q\n", os.Args[1])
		os.Exit(2)
	}
}

// waitFor blocks until one of sigs arrives, says which, and exits 0.
func waitFor(sigs ...os.Signal) {
	c := make(chan os.Signal, 1)
	signal.Notify(c, sigs...)
	fmt.Println("waiting for a signal")
	sig := <-c
	fmt.Printf("received %s\n", signalName(sig))
	os.Exit(0)
}

func signalName(sig os.Signal) string {
	if s, ok := sig.(syscall.Signal); ok {
		if name := unix.SignalName(s); name != "" {
			return name
		}
	}
	return sig.String()
}

func hog(args []string) {
	if len(args) != 1 {
		fmt.Fprintln(os.Stderr, "usage: testserver hog BYTES")
		os.Exit(2)
	}
	n, err := strconv.ParseInt(args[0], 10, 64)
	if err != nil || n < 0 {
		fmt.Fprintf(os.Stderr, "testserver hog: %q is not a number of bytes\n", args[0])
		os.Exit(2)
	}
	b := make([]byte, n)
	for i := 0; i < len(b); i += os.Getpagesize() {
		b[i] = 1
	}
	fmt.Printf("holding %d bytes\n", n)
	waitFor(syscall.SIGTERM, syscall.SIGINT)
	runtime.KeepAlive(b)
}

func fail(args []string) int {
	if len(args) != 1 {
		fmt.Fprintln(os.Stderr, "usage: testserver fail N")
		return 2
	}
	code, err := strconv.Atoi(args[0])
	if err != nil {
		fmt.Fprintf(os.Stderr, "testserver fail: %v\n", err)
		return 2
	}
	fmt.Printf("failing with exit code %d\n", code)
	return code
}

func sleep(args []string) {
	if len(args) != 1 {
		fmt.Fprintln(os.Stderr, "usage: testserver sleep DURATION")
		os.Exit(2)
	}
	d, err := time.ParseDuration(args[0])
	if err != nil {
		secs, err2 := strconv.ParseFloat(args[0], 64)
		if err2 != nil {
			fmt.Fprintf(os.Stderr, "testserver sleep: %v\n", err)
			os.Exit(2)
		}
		d = time.Duration(secs * float64(time.Second))
	}
	fmt.Printf("sleeping %s\n", d)
	time.Sleep(d)
}

func entrypointTester() {
	for i, a := range os.Args {
		fmt.Printf("argv[%d]=%s\n", i, a)
	}
	fmt.Printf("uid=%d gid=%d\n", os.Getuid(), os.Getgid())
	wd, _ := os.Getwd()
	fmt.Printf("cwd=%s\n", wd)
	env := os.Environ()
	sort.Strings(env)
	for _, e := range env {
		fmt.Printf("env %s\n", e)
	}
}

func serve(args []string) {
	fs := flag.NewFlagSet("serve", flag.ExitOnError)
	port := fs.Int("port", 8080, "port to listen on")
	failAfter := fs.Int64("healthz-fail-after", 0, "answer /healthz with 500 from this many requests on (0: never)")
	fs.Parse(args)

	var failing atomic.Bool
	var healthzHits atomic.Int64
	hostname, _ := os.Hostname()
	mux := http.NewServeMux()
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, hostname) })
	mux.HandleFunc("/hostname", func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, hostname) })
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) {
		if n := healthzHits.Add(1); *failAfter > 0 && n > *failAfter {
			http.Error(w, "failing after "+strconv.FormatInt(*failAfter, 10)+" requests", http.StatusInternalServerError)
			return
		}
		if failing.Load() {
			http.Error(w, "failing", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprint(w, "ok")
	})
	mux.HandleFunc("/healthz/fail", func(w http.ResponseWriter, r *http.Request) { failing.Store(true) })
	mux.HandleFunc("/healthz/ok", func(w http.ResponseWriter, r *http.Request) { failing.Store(false) })
	mux.HandleFunc("/echo", func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, r.URL.Query().Get("msg")) })
	mux.HandleFunc("/exit", func(w http.ResponseWriter, r *http.Request) {
		code, err := strconv.Atoi(r.URL.Query().Get("code"))
		if err != nil {
			http.Error(w, "code: "+err.Error(), http.StatusBadRequest)
			return
		}
		fmt.Fprintf(w, "exiting with %d", code)
		w.(http.Flusher).Flush()
		fmt.Printf("exiting with %d on request\n", code)
		// Exit after the handler returns, so the client gets its answer.
		go func() { time.Sleep(100 * time.Millisecond); os.Exit(code) }()
	})

	// Tests read from the log which requests came, and from whom.
	logged := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Printf("request %s %s user-agent=%q\n", r.Method, r.URL.RequestURI(), r.UserAgent())
		mux.ServeHTTP(w, r)
	})
	l := listen("serve", *port)
	if err := http.Serve(l, logged); err != nil {
		fmt.Fprintf(os.Stderr, "testserver serve: %v\n", err)
		os.Exit(1)
	}
}

func grpcHealth(args []string) {
	fs := flag.NewFlagSet("grpc-health", flag.ExitOnError)
	port := fs.Int("port", 8080, "port to listen on")
	fs.Parse(args)
	s := grpc.NewServer()
	hs := health.NewServer()
	hs.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	healthpb.RegisterHealthServer(s, hs)
	l := listen("grpc-health", *port)
	if err := s.Serve(l); err != nil {
		fmt.Fprintf(os.Stderr, "testserver grpc-health: %v\n", err)
		os.Exit(1)
	}
}

// listen listens on port of every address and says so once it does, so that
// a test may wait for the line and then connect; SIGTERM or SIGINT end the
// program.
func listen(mode string, port int) net.Listener {
	go waitFor(syscall.SIGTERM, syscall.SIGINT)
	l, err := net.Listen("tcp", fmt.Sprintf(":%d", port))
	if err != nil {
		fmt.Fprintf(os.Stderr, "testserver %s: %v\n", mode, err)
		os.Exit(1)
	}
	fmt.Printf("serving on %s\n", l.Addr())
	return l
}
