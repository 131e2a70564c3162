package main

import (
	"crypto/tls"
	"crypto/x509"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"
)

// get requests URL --count times, each on a new connection (so that a
// Service's proxy picks a backend for each), and prints one line per request:
// "STATUS BODY" (the body on one line) or "error: …". It exits 0 when every
// request got an answer, 1 otherwise. A pod's service account token and CA
// (--token-file, --ca-file) let it ask the API server.
func get(args []string) {
	fs := flag.NewFlagSet("get", flag.ExitOnError)
	count := fs.Int("count", 1, "requests to make")
	interval := fs.Duration("interval", 0, "pause between requests")
	timeout := fs.Duration("timeout", 2*time.Second, "per request")
	tokenFile := fs.String("token-file", "", "send this file's content as a bearer token")
	caFile := fs.String("ca-file", "", "trust this CA for https")
	_ = fs.Parse(args)
	if fs.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "usage: testserver get [--count N] [--interval D] [--token-file F] [--ca-file F] URL")
		os.Exit(2)
	}
	tr := &http.Transport{DisableKeepAlives: true, TLSClientConfig: &tls.Config{}}
	if *caFile != "" {
		pem, err := os.ReadFile(*caFile)
		if err != nil {
			fmt.Fprintln(os.Stderr, "testserver get:", err)
			os.Exit(2)
		}
		tr.TLSClientConfig.RootCAs = x509.NewCertPool()
		tr.TLSClientConfig.RootCAs.AppendCertsFromPEM(pem)
	}
	var token string
	if *tokenFile != "" {
		b, err := os.ReadFile(*tokenFile)
		if err != nil {
			fmt.Fprintln(os.Stderr, "testserver get:", err)
			os.Exit(2)
		}
		token = strings.TrimSpace(string(b))
	}
	client := &http.Client{Transport: tr, Timeout: *timeout}
	failed := false
	for i := range *count {
		if i > 0 {
			time.Sleep(*interval)
		}
		line, err := getOnce(client, fs.Arg(0), token)
		if err != nil {
			failed = true
			line = "error: " + err.Error()
		}
		fmt.Println(line)
	}
	if failed {
		os.Exit(1)
	}
}

func getOnce(c *http.Client, url, token string) (string, error) {
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		return "", err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := c.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if err != nil {
		return "", err
	}
	// One line per request: the body with its white space collapsed.
	return fmt.Sprintf("%d %s", resp.StatusCode, strings.Join(strings.Fields(string(body)), " ")), nil
}
