package crictl

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"go.opentelemetry.io/otel/trace/noop"
	internalapi "k8s.io/cri-api/pkg/apis"
	criclient "k8s.io/cri-client/pkg"

	"github.com/podvisor/podvisor/internal/runtime/containerd"
)

// Usage lists what podvisor crictl does.
const Usage = `Usage: podvisor crictl [--data-dir DIR] [-r ENDPOINT] COMMAND [flags] [ARGS]

The CRI client for this node's containerd (the socket of DATA_DIR's
containerd, or -r / $CONTAINER_RUNTIME_ENDPOINT), with upstream crictl's
most used commands and table layout. It talks to the runtime only, so it
works while the API server is down.

Commands:
  ps [-a] [-q] [--name RE] [--pod ID] [--no-trunc] [-o table|json]   containers (running; -a all)
  pods [-q] [--name RE] [--no-trunc] [-o table|json]                 pod sandboxes
  images [-q] [--name RE] [--no-trunc] [-o table|json]              images
  inspect ID...     a container's status and runtime info (JSON)
  inspectp ID...    a pod sandbox's status and runtime info (JSON)
  inspecti IMAGE... an image's status (JSON)
  logs [-f] [--tail N] [-t] ID                                      a container's log
  stop [-t SECONDS] ID...   stop containers
  rm [-f] ID...             remove containers (-f: stop running ones first)
  rmp [-f] ID...            remove pod sandboxes (-f: stop ready ones first)
  info                      the runtime's status and configuration (JSON)
  version                   the runtime's name and versions
IDs may be given as their unique prefixes, as 'ps' and 'pods' show them.
`

// Env is upstream crictl's variable for the runtime endpoint.
const Env = "CONTAINER_RUNTIME_ENDPOINT"

type cli struct {
	dataDir  string
	endpoint string
	timeout  time.Duration
	out      io.Writer
	rs       internalapi.RuntimeService
	is       internalapi.ImageManagerService
}

// Run runs one crictl command.
func Run(ctx context.Context, args []string, defaultDataDir string, stdout io.Writer) error {
	c := &cli{out: stdout}
	global := c.flags("crictl")
	if err := global.Parse(args); err != nil {
		return err
	}
	args = global.Args()
	if len(args) == 0 {
		return errors.New(Usage)
	}
	cmd, args := args[0], args[1:]
	if cmd == "help" || cmd == "-h" {
		fmt.Fprint(stdout, Usage)
		return nil
	}
	if c.dataDir == "" {
		c.dataDir = defaultDataDir
	}
	run, ok := map[string]func(context.Context, []string) error{
		"ps": c.ps, "pods": c.pods, "images": c.images, "img": c.images,
		"inspect": c.inspect, "inspectp": c.inspectp, "inspecti": c.inspecti,
		"logs": c.logs, "stop": c.stop, "rm": c.rm, "rmp": c.rmp, "info": c.info, "version": c.version,
	}[cmd]
	if !ok {
		return fmt.Errorf("crictl: unknown command %q\n\n%s", cmd, Usage)
	}
	return run(ctx, args)
}

// flags are the global flags, accepted before and after the command.
func (c *cli) flags(name string) *flag.FlagSet {
	fs := flag.NewFlagSet("podvisor crictl "+name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	if c.timeout == 0 {
		c.timeout = 10 * time.Second
	}
	fs.StringVar(&c.dataDir, "data-dir", c.dataDir, "data directory of the podvisor whose containerd to use")
	fs.StringVar(&c.endpoint, "runtime-endpoint", c.endpoint, "CRI endpoint (unix:///…) instead of the data dir's containerd")
	fs.StringVar(&c.endpoint, "r", c.endpoint, "short for --runtime-endpoint")
	fs.DurationVar(&c.timeout, "timeout", c.timeout, "timeout of each call to the runtime")
	return fs
}

// parse parses a command's flags wherever they stand among its arguments.
func parse(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, fmt.Errorf("%s: %v", fs.Name(), err)
		}
		if fs.NArg() == 0 {
			return pos, nil
		}
		pos = append(pos, fs.Arg(0))
		args = fs.Args()[1:]
	}
}

// connect dials the runtime: the data dir's containerd unless told
// otherwise.
func (c *cli) connect(ctx context.Context) error {
	ep := c.endpoint
	if ep == "" {
		ep = os.Getenv(Env)
	}
	if ep == "" {
		p, err := containerd.PathsFor(c.dataDir)
		if err != nil {
			return err
		}
		if _, err := os.Stat(p.Socket); err != nil {
			return fmt.Errorf("no containerd socket at %s: is podvisor (up or agent) running on data dir %s with the containerd runtime? (-r ENDPOINT for another CRI runtime)", p.Socket, c.dataDir)
		}
		ep = p.Endpoint()
	}
	var err error
	if c.rs, err = criclient.NewRemoteRuntimeService(ctx, ep, c.timeout, noop.NewTracerProvider(), false); err != nil {
		return fmt.Errorf("runtime %s: %w", ep, err)
	}
	if c.is, err = criclient.NewRemoteImageService(ctx, ep, c.timeout, noop.NewTracerProvider(), false); err != nil {
		return fmt.Errorf("runtime %s: %w", ep, err)
	}
	return nil
}

// ids parses a command that takes IDs and no flags of its own.
func (c *cli) ids(name string, args []string, fs *flag.FlagSet) ([]string, error) {
	if fs == nil {
		fs = c.flags(name)
	}
	ids, err := parse(fs, args)
	if err != nil {
		return nil, err
	}
	if len(ids) == 0 {
		return nil, fmt.Errorf("%s: give an ID (see 'podvisor crictl ps -a' and 'pods')", name)
	}
	return ids, nil
}
