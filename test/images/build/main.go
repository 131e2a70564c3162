// Command build writes podvisor's test images as tars, one per image:
//
//	go run ./test/images/build -o DIR [--format docker|oci] [NAME...]
//
// With no NAME it writes every image. Import them with
// `ctr -n k8s.io images import DIR/NAME.tar`.
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/podvisor/podvisor/internal/runtime/imagebuild"
	"github.com/podvisor/podvisor/test/images"
)

func main() {
	dir := flag.String("o", "", "directory to write NAME.tar into (required)")
	format := flag.String("format", "docker", "tar layout: docker (docker save) or oci (OCI image layout)")
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "usage: build -o DIR [--format docker|oci] [NAME...]\nimages: %v\n", images.Names())
		flag.PrintDefaults()
	}
	flag.Parse()
	f := map[string]imagebuild.Format{"docker": imagebuild.Docker, "oci": imagebuild.OCI}[*format]
	if *dir == "" || f == 0 {
		flag.Usage()
		os.Exit(2)
	}
	names := flag.Args()
	if len(names) == 0 {
		names = images.Names()
	}
	if err := os.MkdirAll(*dir, 0o755); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	for _, n := range names {
		p, err := images.WriteTar(*dir, n, f)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		im, _ := images.Image(n)
		id, _ := im.ID()
		fmt.Printf("%s %s %v\n", p, id, im.Names)
	}
}
