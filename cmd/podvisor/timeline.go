package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/pflag"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/podvisor/podvisor/internal/agent/timeline"
	"github.com/podvisor/podvisor/internal/cli/datadir"
)

const timelineUsage = `Usage: podvisor timeline [-n NAMESPACE] POD [-o table|json|trace] [-w]

Shows every step of a pod's lifecycle as its node's agent recorded it, to the
millisecond: container states with reasons and exit codes, phase and
condition changes, and the events the agent emitted (pulls, starts, kills,
probe failures, back-offs). It asks the pod's node through the API server's
node proxy. -o trace writes Chrome's trace event format, which
https://ui.perfetto.dev opens. -w follows new entries.
`

type timelineOptions struct {
	namespace, output, kubeconfig, dataDir string
	watch                                  bool
}

// timelineFlags defines timeline's flags into o.
func timelineFlags(o *timelineOptions) *pflag.FlagSet {
	fs := pflag.NewFlagSet("timeline", pflag.ContinueOnError)
	fs.Usage = func() { fmt.Fprint(os.Stderr, timelineUsage); fs.PrintDefaults() }
	fs.StringVarP(&o.namespace, "namespace", "n", "default", "the pod's namespace")
	fs.StringVarP(&o.output, "output", "o", "table", "table, json or trace")
	fs.BoolVarP(&o.watch, "watch", "w", false, "follow new entries (table only)")
	fs.StringVar(&o.kubeconfig, "kubeconfig", "", "kubeconfig (default: $KUBECONFIG, else the data dir's admin kubeconfig)")
	fs.StringVar(&o.dataDir, "data-dir", "", "podvisor's data dir (default: $PODVISOR_DATA_DIR, else "+datadir.Default()+")")
	return fs
}

func runTimeline(args []string) error {
	var o timelineOptions
	fs := timelineFlags(&o)
	if err := parsePFlags(fs, args); err != nil {
		return err
	}
	ns, out, follow, kubeconfig, dataDir := &o.namespace, &o.output, &o.watch, &o.kubeconfig, &o.dataDir
	if fs.NArg() != 1 {
		fs.Usage()
		return fmt.Errorf("timeline: one pod name, got %d arguments", fs.NArg())
	}
	if *out != "table" && *out != "json" && *out != "trace" {
		return fmt.Errorf("timeline: unknown output %q: table, json or trace", *out)
	}
	if *follow && *out != "table" {
		return fmt.Errorf("timeline: -w follows the table only")
	}
	path := *kubeconfig
	if path == "" {
		path = os.Getenv("KUBECONFIG")
	}
	if path == "" {
		dir := *dataDir
		if dir == "" {
			dir = os.Getenv("PODVISOR_DATA_DIR")
		}
		if dir == "" {
			dir = datadir.Default()
		}
		path = datadir.AdminKubeconfig(dir)
	}
	rc, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		return fmt.Errorf("timeline: kubeconfig %s: %w", path, err)
	}
	client, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return err
	}
	ctx := context.Background()
	name := fs.Arg(0)
	pod, err := client.CoreV1().Pods(*ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("timeline: %w", err)
	}
	if pod.Spec.NodeName == "" {
		return fmt.Errorf("timeline: pod %s/%s is not on a node yet", *ns, name)
	}
	fetch := func(format string) ([]byte, error) {
		req := client.CoreV1().RESTClient().Get().AbsPath("/api/v1/nodes", pod.Spec.NodeName, "proxy", "timeline", *ns, name)
		if format != "" {
			req = req.Param("format", format)
		}
		b, err := req.DoRaw(ctx)
		if err != nil {
			return nil, fmt.Errorf("timeline of %s/%s from node %s: %w", *ns, name, pod.Spec.NodeName, err)
		}
		return b, nil
	}
	switch *out {
	case "trace", "json":
		format := ""
		if *out == "trace" {
			format = "trace"
		}
		b, err := fetch(format)
		if err != nil {
			return err
		}
		_, err = os.Stdout.Write(append(b, '\n'))
		return err
	}
	shown := 0
	w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "TIME\t+MS\tCONTAINER\tKIND\tSTATE\tREASON\tMESSAGE")
	for {
		b, err := fetch("")
		if err != nil {
			return err
		}
		var tl timeline.Timeline
		if err := json.Unmarshal(b, &tl); err != nil {
			return fmt.Errorf("timeline: %w", err)
		}
		if shown == 0 && tl.Dropped > 0 {
			fmt.Fprintf(w, "(%d older entries not kept)\n", tl.Dropped)
		}
		// Entries dropped since the last fetch shift the list.
		start := max(0, shown-tl.Dropped)
		if start > len(tl.Entries) {
			start = len(tl.Entries)
		}
		printEntries(w, tl, tl.Entries[start:])
		w.Flush()
		shown = tl.Dropped + len(tl.Entries)
		if !*follow {
			printLanes(os.Stdout, tl, 72)
			return nil
		}
		time.Sleep(500 * time.Millisecond)
	}
}

func printEntries(w io.Writer, tl timeline.Timeline, entries []timeline.Entry) {
	if len(tl.Entries) == 0 {
		return
	}
	origin := tl.Entries[0].Time
	for _, e := range entries {
		container := e.Container
		if container == "" {
			container = "-"
		}
		state := e.State
		if e.Name != "" {
			state = e.Name + "=" + e.State
		}
		reason := e.Reason
		if e.ExitCode != nil {
			reason = strings.TrimSpace(fmt.Sprintf("%s exit %d", reason, *e.ExitCode))
		}
		fmt.Fprintf(w, "%s\t%d\t%s\t%s\t%s\t%s\t%s\n", e.Time.Local().Format("15:04:05.000"), e.Time.Sub(origin).Milliseconds(),
			container, e.Kind, state, reason, oneLine(e.Message))
	}
}

// laneChars draws a segment's class in a terminal.
var laneChars = map[string]byte{"waiting": '~', "running": '=', "terminated-ok": '_', "terminated-err": 'x',
	"phase-Pending": '~', "phase-Running": '=', "phase-Succeeded": '_', "phase-Failed": 'x'}

// printLanes draws one line per lane, cols columns wide: its states as
// characters ('~' waiting, '=' running, '_' terminated with 0, 'x' with an
// error), and '|' where something else happened (events, hooks, signals,
// probes, readiness).
func printLanes(out io.Writer, tl timeline.Timeline, cols int) {
	lanes := timeline.Lanes(tl)
	if len(lanes) == 0 {
		return
	}
	origin, end := tl.Entries[0].Time, tl.Entries[len(tl.Entries)-1].Time
	span := max(end.Sub(origin), time.Millisecond)
	col := func(at time.Time) int { return min(cols-1, int(int64(cols)*int64(at.Sub(origin))/int64(span))) }
	fmt.Fprintf(out, "\nLANES  +0 ms … +%d ms, %v per column; ~ waiting  = running  _ done (0)  x failed  | event, hook, signal, probe\n",
		span.Milliseconds(), (span / time.Duration(cols)).Round(time.Millisecond))
	width := len("pod")
	for _, l := range lanes {
		width = max(width, len(l.Container))
	}
	for _, l := range lanes {
		row := []byte(strings.Repeat(" ", cols))
		for _, seg := range l.Segments {
			ch, ok := laneChars[seg.Class()]
			if !ok {
				ch = '?'
			}
			for c := col(seg.Start); c <= col(seg.End); c++ {
				row[c] = ch
			}
		}
		for _, m := range l.Marks {
			row[col(m.Time)] = '|'
		}
		name := l.Container
		if name == "" {
			name = "pod"
		}
		fmt.Fprintf(out, "%-*s  %s\n", width, name, row)
	}
}

func oneLine(s string) string {
	s = strings.ReplaceAll(s, "\n", " ")
	if len(s) > 120 {
		s = s[:117] + "..."
	}
	return s
}
