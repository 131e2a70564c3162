package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/podvisor/podvisor/internal/cli/datadir"
	"github.com/podvisor/podvisor/internal/cluster/pki"
)

const certificateUsage = `Usage: podvisor certificate rotate [--data-dir DIR]

Re-issues the control plane's leaf certificates (the API server's serving and
client certificates, the components', the node's) with new keys, valid for a
year; the CA is kept, so kubeconfigs and joined nodes keep trusting the
cluster. podvisor must be stopped; its next start uses them. podvisor also
renews each of them at start once it is within 120 days of expiry.
`

// certificateFlags defines certificate rotate's flags.
func certificateFlags(dataDir *string) *flag.FlagSet {
	fs := flag.NewFlagSet("podvisor certificate rotate", flag.ContinueOnError)
	fs.Usage = func() { fmt.Fprint(os.Stderr, certificateUsage); fs.PrintDefaults() }
	fs.StringVar(dataDir, "data-dir", datadir.Default(), "data directory of the stopped podvisor")
	return fs
}

func runCertificate(args []string) error {
	if len(args) == 0 || args[0] != "rotate" {
		fmt.Fprint(os.Stderr, certificateUsage)
		os.Exit(2)
	}
	dir := new(string)
	fs := certificateFlags(dir)
	if err := parseFlags(fs, args[1:]); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("certificate rotate takes no arguments, got %q", fs.Args())
	}
	abs, err := filepath.Abs(*dir)
	if err != nil {
		return err
	}
	files, err := pki.RotateCertificates(abs)
	for _, f := range files {
		fmt.Println("re-issued", f)
	}
	return err
}
