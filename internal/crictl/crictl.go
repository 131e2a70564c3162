package crictl

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"strings"
	"time"

	"go.opentelemetry.io/otel/trace/noop"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	internalapi "k8s.io/cri-api/pkg/apis"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	criclient "k8s.io/cri-client/pkg"

	"github.com/podvisor/podvisor/internal/containerd"
	"github.com/podvisor/podvisor/internal/logs"
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

type listFlags struct {
	all, quiet, noTrunc bool
	name, pod, output   string
}

func (c *cli) listFlagSet(name string, lf *listFlags) *flag.FlagSet {
	fs := c.flags(name)
	fs.BoolVar(&lf.all, "a", false, "all containers, not only running ones")
	fs.BoolVar(&lf.all, "all", false, "all containers, not only running ones")
	fs.BoolVar(&lf.quiet, "q", false, "IDs only")
	fs.BoolVar(&lf.quiet, "quiet", false, "IDs only")
	fs.BoolVar(&lf.noTrunc, "no-trunc", false, "whole IDs")
	fs.StringVar(&lf.name, "name", "", "names matching this regular expression")
	fs.StringVar(&lf.pod, "pod", "", "containers of this pod sandbox")
	fs.StringVar(&lf.output, "o", "table", "table or json")
	fs.StringVar(&lf.output, "output", "table", "table or json")
	return fs
}

// listing is how ps, pods and images print their lists.
type listing[T any] struct {
	id, name func(T) string
	created  func(T) int64 // nil: the runtime's order
	json     func([]T) proto.Message
	header   []string
	rows     func([]T, time.Time, bool) [][]string
}

// print filters by --name, orders newest first, and prints IDs (-q), JSON
// (-o json) or the table.
func (l listing[T]) print(c *cli, lf listFlags, items []T) error {
	re, err := regexp.Compile(lf.name)
	if err != nil {
		return fmt.Errorf("--name: %v", err)
	}
	var keep []T
	for _, it := range items {
		if re.MatchString(l.name(it)) {
			keep = append(keep, it)
		}
	}
	if l.created != nil {
		slices.SortStableFunc(keep, func(a, b T) int { return cmp.Compare(l.created(b), l.created(a)) })
	}
	switch {
	case lf.quiet:
		for _, it := range keep {
			fmt.Fprintln(c.out, l.id(it))
		}
		return nil
	case lf.output == "json":
		return c.json(l.json(keep))
	case lf.output != "table":
		return fmt.Errorf("-o %q: want table or json", lf.output)
	}
	return writeTable(c.out, l.header, l.rows(keep, time.Now(), lf.noTrunc))
}

var (
	containersListing = listing[*runtimeapi.Container]{
		id:      (*runtimeapi.Container).GetId,
		name:    func(x *runtimeapi.Container) string { return x.GetMetadata().GetName() },
		created: (*runtimeapi.Container).GetCreatedAt,
		json: func(xs []*runtimeapi.Container) proto.Message {
			return &runtimeapi.ListContainersResponse{Containers: xs}
		},
		header: psHeader, rows: psRows,
	}
	podsListing = listing[*runtimeapi.PodSandbox]{
		id:      (*runtimeapi.PodSandbox).GetId,
		name:    func(x *runtimeapi.PodSandbox) string { return x.GetMetadata().GetName() },
		created: (*runtimeapi.PodSandbox).GetCreatedAt,
		json:    func(xs []*runtimeapi.PodSandbox) proto.Message { return &runtimeapi.ListPodSandboxResponse{Items: xs} },
		header:  podsHeader, rows: podsRows,
	}
	imagesListing = listing[*runtimeapi.Image]{
		id: (*runtimeapi.Image).GetId,
		name: func(x *runtimeapi.Image) string {
			return strings.Join(append(x.GetRepoTags(), x.GetRepoDigests()...), " ")
		},
		json:   func(xs []*runtimeapi.Image) proto.Message { return &runtimeapi.ListImagesResponse{Images: xs} },
		header: imagesHeader,
		rows:   func(xs []*runtimeapi.Image, _ time.Time, noTrunc bool) [][]string { return imagesRows(xs, noTrunc) },
	}
)

func (c *cli) ps(ctx context.Context, args []string) error {
	var lf listFlags
	if _, err := parse(c.listFlagSet("ps", &lf), args); err != nil {
		return err
	}
	if err := c.connect(ctx); err != nil {
		return err
	}
	filter := &runtimeapi.ContainerFilter{PodSandboxId: lf.pod}
	if !lf.all {
		filter.State = &runtimeapi.ContainerStateValue{State: runtimeapi.ContainerState_CONTAINER_RUNNING}
	}
	cs, err := c.rs.ListContainers(ctx, filter)
	if err != nil {
		return err
	}
	return containersListing.print(c, lf, cs)
}

func (c *cli) pods(ctx context.Context, args []string) error {
	var lf listFlags
	if _, err := parse(c.listFlagSet("pods", &lf), args); err != nil {
		return err
	}
	if err := c.connect(ctx); err != nil {
		return err
	}
	ps, err := c.rs.ListPodSandbox(ctx, nil)
	if err != nil {
		return err
	}
	return podsListing.print(c, lf, ps)
}

func (c *cli) images(ctx context.Context, args []string) error {
	var lf listFlags
	if _, err := parse(c.listFlagSet("images", &lf), args); err != nil {
		return err
	}
	if err := c.connect(ctx); err != nil {
		return err
	}
	imgs, err := c.is.ListImages(ctx, nil)
	if err != nil {
		return err
	}
	return imagesListing.print(c, lf, imgs)
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

func (c *cli) inspect(ctx context.Context, args []string) error {
	ids, err := c.ids("inspect", args, nil)
	if err != nil {
		return err
	}
	if err := c.connect(ctx); err != nil {
		return err
	}
	for _, id := range ids {
		r, err := c.rs.ContainerStatus(ctx, id, true)
		if err != nil {
			return fmt.Errorf("container %s: %w", id, err)
		}
		if err := c.statusJSON(r.GetStatus(), r.GetInfo()); err != nil {
			return err
		}
	}
	return nil
}

func (c *cli) inspectp(ctx context.Context, args []string) error {
	ids, err := c.ids("inspectp", args, nil)
	if err != nil {
		return err
	}
	if err := c.connect(ctx); err != nil {
		return err
	}
	for _, id := range ids {
		r, err := c.rs.PodSandboxStatus(ctx, id, true)
		if err != nil {
			return fmt.Errorf("pod sandbox %s: %w", id, err)
		}
		if err := c.statusJSON(r.GetStatus(), r.GetInfo()); err != nil {
			return err
		}
	}
	return nil
}

func (c *cli) inspecti(ctx context.Context, args []string) error {
	ids, err := c.ids("inspecti", args, nil)
	if err != nil {
		return err
	}
	if err := c.connect(ctx); err != nil {
		return err
	}
	for _, id := range ids {
		r, err := c.is.ImageStatus(ctx, &runtimeapi.ImageSpec{Image: id}, true)
		if err != nil {
			return fmt.Errorf("image %s: %w", id, err)
		}
		if r.GetImage() == nil {
			return fmt.Errorf("no image %s", id)
		}
		if err := c.statusJSON(r.GetImage(), r.GetInfo()); err != nil {
			return err
		}
	}
	return nil
}

func (c *cli) info(ctx context.Context, args []string) error {
	if _, err := parse(c.flags("info"), args); err != nil {
		return err
	}
	if err := c.connect(ctx); err != nil {
		return err
	}
	r, err := c.rs.Status(ctx, true)
	if err != nil {
		return err
	}
	return c.statusJSON(r.GetStatus(), r.GetInfo())
}

func (c *cli) version(ctx context.Context, args []string) error {
	if _, err := parse(c.flags("version"), args); err != nil {
		return err
	}
	if err := c.connect(ctx); err != nil {
		return err
	}
	v, err := c.rs.Version(ctx, "v1")
	if err != nil {
		return err
	}
	fmt.Fprintf(c.out, "Version:  %s\nRuntimeName:  %s\nRuntimeVersion:  %s\nRuntimeApiVersion:  %s\n",
		v.GetVersion(), v.GetRuntimeName(), v.GetRuntimeVersion(), v.GetRuntimeApiVersion())
	return nil
}

func (c *cli) logs(ctx context.Context, args []string) error {
	fs := c.flags("logs")
	follow := fs.Bool("f", false, "follow the log")
	fs.BoolVar(follow, "follow", false, "follow the log")
	tail := fs.Int64("tail", -1, "the last N lines only")
	stamps := fs.Bool("t", false, "show timestamps")
	fs.BoolVar(stamps, "timestamps", false, "show timestamps")
	ids, err := c.ids("logs", args, fs)
	if err != nil {
		return err
	}
	if len(ids) != 1 {
		return fmt.Errorf("logs: give one container ID")
	}
	if err := c.connect(ctx); err != nil {
		return err
	}
	r, err := c.rs.ContainerStatus(ctx, ids[0], false)
	if err != nil {
		return fmt.Errorf("container %s: %w", ids[0], err)
	}
	path := r.GetStatus().GetLogPath()
	if path == "" {
		return fmt.Errorf("container %s has no log path", ids[0])
	}
	id := r.GetStatus().GetId()
	opts := logs.Options{Follow: *follow, Timestamps: *stamps, Exited: func() bool {
		s, err := c.rs.ContainerStatus(ctx, id, false)
		return err != nil || s.GetStatus().GetState() == runtimeapi.ContainerState_CONTAINER_EXITED
	}}
	if *tail >= 0 {
		opts.TailLines = tail
	}
	return logs.ReadLogs(ctx, path, opts, c.out)
}

func (c *cli) stop(ctx context.Context, args []string) error {
	fs := c.flags("stop")
	grace := fs.Int64("t", 0, "seconds to wait before the container is killed")
	fs.Int64Var(grace, "timeout", 0, "seconds to wait before the container is killed")
	ids, err := c.ids("stop", args, fs)
	if err != nil {
		return err
	}
	if err := c.connect(ctx); err != nil {
		return err
	}
	for _, id := range ids {
		if err := c.rs.StopContainer(ctx, id, *grace); err != nil {
			return fmt.Errorf("stopping container %s: %w", id, err)
		}
		fmt.Fprintln(c.out, id)
	}
	return nil
}

func (c *cli) rm(ctx context.Context, args []string) error {
	fs := c.flags("rm")
	force := fs.Bool("f", false, "stop a running container first")
	fs.BoolVar(force, "force", false, "stop a running container first")
	ids, err := c.ids("rm", args, fs)
	if err != nil {
		return err
	}
	if err := c.connect(ctx); err != nil {
		return err
	}
	for _, id := range ids {
		s, err := c.rs.ContainerStatus(ctx, id, false)
		if err != nil {
			return fmt.Errorf("container %s: %w", id, err)
		}
		if s.GetStatus().GetState() == runtimeapi.ContainerState_CONTAINER_RUNNING {
			if !*force {
				return fmt.Errorf("container %s is running: stop it first, or rm -f", id)
			}
			if err := c.rs.StopContainer(ctx, id, 0); err != nil {
				return fmt.Errorf("stopping container %s: %w", id, err)
			}
		}
		if err := c.rs.RemoveContainer(ctx, id); err != nil {
			return fmt.Errorf("removing container %s: %w", id, err)
		}
		fmt.Fprintln(c.out, id)
	}
	return nil
}

func (c *cli) rmp(ctx context.Context, args []string) error {
	fs := c.flags("rmp")
	force := fs.Bool("f", false, "stop a ready pod sandbox first")
	fs.BoolVar(force, "force", false, "stop a ready pod sandbox first")
	ids, err := c.ids("rmp", args, fs)
	if err != nil {
		return err
	}
	if err := c.connect(ctx); err != nil {
		return err
	}
	for _, id := range ids {
		s, err := c.rs.PodSandboxStatus(ctx, id, false)
		if err != nil {
			return fmt.Errorf("pod sandbox %s: %w", id, err)
		}
		if s.GetStatus().GetState() == runtimeapi.PodSandboxState_SANDBOX_READY {
			if !*force {
				return fmt.Errorf("pod sandbox %s is ready: stop it first, or rmp -f", id)
			}
			if err := c.rs.StopPodSandbox(ctx, id); err != nil {
				return fmt.Errorf("stopping pod sandbox %s: %w", id, err)
			}
			fmt.Fprintf(c.out, "Stopped sandbox %s\n", id)
		}
		if err := c.rs.RemovePodSandbox(ctx, id); err != nil {
			return fmt.Errorf("removing pod sandbox %s: %w", id, err)
		}
		fmt.Fprintf(c.out, "Removed sandbox %s\n", id)
	}
	return nil
}

// statusJSON prints {"status": …, "info": {…}} as crictl's inspect does:
// the runtime's verbose info values are JSON documents themselves.
func (c *cli) statusJSON(status proto.Message, info map[string]string) error {
	b, err := protojson.Marshal(status)
	if err != nil {
		return err
	}
	out := map[string]any{"status": json.RawMessage(b)}
	if len(info) > 0 {
		m := map[string]any{}
		for k, v := range info {
			var parsed any
			if json.Unmarshal([]byte(v), &parsed) == nil {
				m[k] = parsed
			} else {
				m[k] = v
			}
		}
		out["info"] = m
	}
	return c.writeJSON(out)
}

func (c *cli) json(m proto.Message) error {
	b, err := protojson.Marshal(m)
	if err != nil {
		return err
	}
	return c.writeJSON(json.RawMessage(b))
}

func (c *cli) writeJSON(v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	_, err = fmt.Fprintln(c.out, string(b))
	return err
}
