package crictl

// ps, pods and images: the runtime's lists, printed as crictl prints them.

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

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
