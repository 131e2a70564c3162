package timeline

import (
	"encoding/json"
	"strconv"
	"time"
)

// Trace is t in Chrome's trace event format (JSON), which Perfetto
// (ui.perfetto.dev) and chrome://tracing open: one track for the pod and one
// per container, a slice per container state (waiting, running,
// terminated) and an instant mark per other entry. Times are microseconds
// since the first entry.
func Trace(t Timeline) ([]byte, error) {
	type event struct {
		Name string            `json:"name"`
		Ph   string            `json:"ph"`
		Ts   int64             `json:"ts"`
		Dur  int64             `json:"dur,omitempty"`
		Pid  int               `json:"pid"`
		Tid  int               `json:"tid"`
		S    string            `json:"s,omitempty"`
		Args map[string]string `json:"args,omitempty"`
	}
	out := struct {
		TraceEvents     []event `json:"traceEvents"`
		DisplayTimeUnit string  `json:"displayTimeUnit"`
	}{TraceEvents: []event{}, DisplayTimeUnit: "ms"}
	if len(t.Entries) == 0 {
		return json.Marshal(out)
	}
	origin := t.Entries[0].Time
	us := func(at time.Time) int64 { return at.Sub(origin).Microseconds() }
	tids := map[string]int{"": 0}
	name := func(tid int, n string) {
		out.TraceEvents = append(out.TraceEvents, event{Name: "thread_name", Ph: "M", Pid: 1, Tid: tid, Args: map[string]string{"name": n}})
	}
	out.TraceEvents = append(out.TraceEvents, event{Name: "process_name", Ph: "M", Pid: 1, Args: map[string]string{"name": t.Namespace + "/" + t.Name}})
	name(0, "pod")
	tid := func(container string) int {
		id, ok := tids[container]
		if !ok {
			id = len(tids)
			tids[container] = id
			name(id, container)
		}
		return id
	}
	for _, lane := range Lanes(t) {
		track := tid(lane.Container)
		for _, seg := range lane.Segments {
			label := seg.Entry.State
			if seg.Entry.Reason != "" {
				label += " (" + seg.Entry.Reason + ")"
			}
			out.TraceEvents = append(out.TraceEvents, event{Name: label, Ph: "X", Ts: us(seg.Start),
				Dur: max(1, us(seg.End)-us(seg.Start)), Pid: 1, Tid: track, Args: traceArgs(seg.Entry)})
		}
		for _, e := range lane.Marks {
			label := e.Kind
			if e.Reason != "" {
				label += " " + e.Reason
			} else if e.State != "" {
				label += " " + e.Name + " " + e.State
			}
			out.TraceEvents = append(out.TraceEvents, event{Name: label, Ph: "i", S: "t", Ts: us(e.Time), Pid: 1, Tid: track, Args: traceArgs(e)})
		}
	}
	return json.Marshal(out)
}

func traceArgs(e Entry) map[string]string {
	args := map[string]string{"kind": e.Kind}
	for k, v := range map[string]string{"state": e.State, "reason": e.Reason, "message": e.Message, "condition": e.Name} {
		if v != "" {
			args[k] = v
		}
	}
	if e.ExitCode != nil {
		args["exitCode"] = strconv.Itoa(int(*e.ExitCode))
	}
	return args
}
