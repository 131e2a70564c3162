// Package crictl is `podvisor crictl`: the CRI client for the node's own
// containerd, with the subcommands people use most of upstream crictl
// (sigs.k8s.io/cri-tools) and its table layout. Upstream crictl is a main
// package and no served version builds against Kubernetes v0.36's
// cri-client, so it cannot be embedded. This file turns CRI objects into
// table rows; crictl.go talks to the runtime.
package crictl

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	units "github.com/docker/go-units"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Columns as crictl names them.
var (
	psHeader     = []string{"CONTAINER", "IMAGE", "CREATED", "STATE", "NAME", "ATTEMPT", "POD ID", "POD", "NAMESPACE"}
	podsHeader   = []string{"POD ID", "CREATED", "STATE", "NAME", "NAMESPACE", "ATTEMPT", "RUNTIME"}
	imagesHeader = []string{"IMAGE", "TAG", "IMAGE ID", "SIZE"}
)

// truncatedIDLen is crictl's short ID length.
const truncatedIDLen = 13

// shortID cuts an ID (after an optional prefix such as "sha256:") to
// crictl's length.
func shortID(id, prefix string) string {
	id = strings.TrimPrefix(id, prefix)
	if len(id) > truncatedIDLen {
		id = id[:truncatedIDLen]
	}
	return id
}

// ago is crictl's CREATED column: "2 minutes ago".
func ago(now time.Time, unixNano int64) string {
	return units.HumanDuration(now.Sub(time.Unix(0, unixNano))) + " ago"
}

func containerState(s runtimeapi.ContainerState) string {
	switch s {
	case runtimeapi.ContainerState_CONTAINER_CREATED:
		return "Created"
	case runtimeapi.ContainerState_CONTAINER_RUNNING:
		return "Running"
	case runtimeapi.ContainerState_CONTAINER_EXITED:
		return "Exited"
	}
	return "Unknown"
}

func podState(s runtimeapi.PodSandboxState) string {
	if s == runtimeapi.PodSandboxState_SANDBOX_READY {
		return "Ready"
	}
	return "NotReady"
}

// The labels the kubelet (and podvisor's agent) put on containers.
const (
	podNameLabel      = "io.kubernetes.pod.name"
	podNamespaceLabel = "io.kubernetes.pod.namespace"
)

// psRows are `crictl ps`'s rows; the image is the image reference, or its
// short ID when the runtime gives a digest.
func psRows(cs []*runtimeapi.Container, now time.Time, noTrunc bool) [][]string {
	var rows [][]string
	for _, c := range cs {
		id, pod, image := c.GetId(), c.GetPodSandboxId(), c.GetImage().GetImage()
		if !noTrunc {
			id, pod = shortID(id, ""), shortID(pod, "")
			if strings.HasPrefix(image, "sha256:") {
				image = shortID(image, "sha256:")
			}
		}
		rows = append(rows, []string{id, image, ago(now, c.GetCreatedAt()), containerState(c.GetState()),
			c.GetMetadata().GetName(), strconv.FormatUint(uint64(c.GetMetadata().GetAttempt()), 10),
			pod, c.GetLabels()[podNameLabel], c.GetLabels()[podNamespaceLabel]})
	}
	return rows
}

// podsRows are `crictl pods`'s rows.
func podsRows(ps []*runtimeapi.PodSandbox, now time.Time, noTrunc bool) [][]string {
	var rows [][]string
	for _, p := range ps {
		id := p.GetId()
		if !noTrunc {
			id = shortID(id, "")
		}
		handler := p.GetRuntimeHandler()
		if handler == "" {
			handler = "(default)"
		}
		rows = append(rows, []string{id, ago(now, p.GetCreatedAt()), podState(p.GetState()), p.GetMetadata().GetName(),
			p.GetMetadata().GetNamespace(), strconv.FormatUint(uint64(p.GetMetadata().GetAttempt()), 10), handler})
	}
	return rows
}

// imagesRows are `crictl images`'s rows: one per tag, "<none>" for an
// untagged image (named by its repo digest's repository).
func imagesRows(imgs []*runtimeapi.Image, noTrunc bool) [][]string {
	var rows [][]string
	for _, img := range imgs {
		id := img.GetId()
		if !noTrunc {
			id = shortID(id, "sha256:")
		}
		size := units.HumanSizeWithPrecision(float64(img.GetSize()), 3)
		if len(img.GetRepoTags()) == 0 {
			repo := "<none>"
			if ds := img.GetRepoDigests(); len(ds) > 0 {
				repo, _, _ = strings.Cut(ds[0], "@")
			}
			rows = append(rows, []string{repo, "<none>", id, size})
			continue
		}
		for _, tag := range img.GetRepoTags() {
			i := strings.LastIndex(tag, ":")
			if i < 0 || strings.Contains(tag[i:], "/") {
				rows = append(rows, []string{tag, "<none>", id, size})
				continue
			}
			rows = append(rows, []string{tag[:i], tag[i+1:], id, size})
		}
	}
	return rows
}

// writeTable prints rows in crictl's table layout (tab-separated cells
// padded to at least 20 characters plus 3 spaces).
func writeTable(w io.Writer, header []string, rows [][]string) error {
	tw := tabwriter.NewWriter(w, 20, 1, 3, ' ', 0)
	if header != nil {
		fmt.Fprintln(tw, strings.Join(header, "\t"))
	}
	for _, r := range rows {
		fmt.Fprintln(tw, strings.Join(r, "\t"))
	}
	return tw.Flush()
}
