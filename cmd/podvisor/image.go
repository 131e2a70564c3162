package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"text/tabwriter"

	"github.com/docker/go-units"

	"github.com/podvisor/podvisor/internal/cli/datadir"
	"github.com/podvisor/podvisor/internal/runtime/containerd"
)

const imageUsage = `Usage:
  podvisor image import [flags] FILE...   import images from docker-archive (docker save) or
                                          OCI-layout tars, plain, .gz or .zst, into the
                                          containerd of a running podvisor
  podvisor image ls [flags]               list its images

Files in DATA_DIR/images (.tar, .tar.gz, .tgz, .tar.zst, .tzst) are imported at every start.
`

// imageFlags defines image VERB's flags.
func imageFlags(verb string, dataDir *string) *flag.FlagSet {
	fs := flag.NewFlagSet("podvisor image "+verb, flag.ContinueOnError)
	fs.StringVar(dataDir, "data-dir", datadir.Default(), "data directory of the running podvisor")
	return fs
}

func runImage(args []string) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprint(os.Stderr, imageUsage)
		if len(args) == 0 {
			os.Exit(2)
		}
		return nil
	}
	verb := args[0]
	if verb != "import" && verb != "ls" {
		fmt.Fprintf(os.Stderr, "podvisor image: unknown command %q\n\n%s", verb, imageUsage)
		os.Exit(2)
	}
	dir := new(string)
	fs := imageFlags(verb, dir)
	if err := parseFlags(fs, args[1:]); err != nil {
		return err
	}
	if verb == "import" && fs.NArg() == 0 {
		return fmt.Errorf("image import: no FILE given")
	}
	if verb == "ls" && fs.NArg() > 0 {
		return fmt.Errorf("image ls takes no arguments, got %q", fs.Args())
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	c, err := containerd.Connect(ctx, *dir)
	if err != nil {
		return err
	}
	defer c.Close()
	if verb == "ls" {
		imgs, err := c.List(ctx)
		if err != nil {
			return err
		}
		printImages(imgs)
		return nil
	}
	var failed int
	for _, f := range fs.Args() {
		imgs, err := c.ImportFile(ctx, f)
		for _, img := range imgs {
			fmt.Printf("imported %s %s\n", img.Name, img.Digest)
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "podvisor: image import: %v\n", err)
			failed++
		}
	}
	if failed > 0 {
		return fmt.Errorf("image import: %d of %d files failed", failed, fs.NArg())
	}
	return nil
}

func printImages(imgs []containerd.Image) {
	tw := tabwriter.NewWriter(os.Stdout, 0, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "IMAGE\tDIGEST\tSIZE\tPINNED")
	for _, img := range imgs {
		pinned := ""
		if img.Pinned {
			pinned = "yes"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", img.Name, shortDigest(img.Digest), units.HumanSize(float64(img.Size)), pinned)
	}
	tw.Flush()
}

func shortDigest(d string) string {
	if len(d) > 7+12 {
		return d[:7+12]
	}
	return d
}
