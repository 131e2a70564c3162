package timeline

import (
	"fmt"
	"strconv"
	"strings"
	"sync"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
)

// StatusWriter is what the pod workers write statuses to.
type StatusWriter interface {
	Set(pod *v1.Pod, status v1.PodStatus, deleteAfter bool)
	Forget(uid types.UID)
}

// Statuses passes every status on to Next and records what changed in it
// since the last one: phase, conditions, container states, readiness.
type Statuses struct {
	Next StatusWriter
	Rec  *Recorder

	mu      sync.Mutex
	last    map[types.UID]v1.PodStatus
	deleted map[types.UID]bool
}

// Set records the changes and passes the status on.
func (s *Statuses) Set(pod *v1.Pod, status v1.PodStatus, deleteAfter bool) {
	s.mu.Lock()
	if s.last == nil {
		s.last, s.deleted = map[types.UID]v1.PodStatus{}, map[types.UID]bool{}
	}
	prev, seen := s.last[pod.UID]
	s.last[pod.UID] = *status.DeepCopy()
	var entries []Entry
	if pod.DeletionTimestamp != nil && !s.deleted[pod.UID] {
		s.deleted[pod.UID] = true
		grace := "?"
		if pod.DeletionGracePeriodSeconds != nil {
			grace = strconv.FormatInt(*pod.DeletionGracePeriodSeconds, 10) + " s"
		}
		entries = append(entries, Entry{Kind: KindDeletion, Message: "deletion requested, grace " + grace})
	}
	s.mu.Unlock()
	if !seen {
		prev = v1.PodStatus{}
	}
	entries = append(entries, Diff(prev, status)...)
	s.Rec.Record(Pod{Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID}, entries...)
	s.Next.Set(pod, status, deleteAfter)
}

// Forget: the pod is gone from the API, and its timeline with it.
func (s *Statuses) Forget(uid types.UID) {
	s.mu.Lock()
	delete(s.last, uid)
	delete(s.deleted, uid)
	s.mu.Unlock()
	s.Rec.Forget(uid)
	s.Next.Forget(uid)
}

// Diff lists what changed from prev to next.
func Diff(prev, next v1.PodStatus) []Entry {
	var out []Entry
	if next.Phase != prev.Phase && next.Phase != "" {
		out = append(out, Entry{Kind: KindPhase, State: string(next.Phase), Reason: next.Reason, Message: next.Message})
	}
	before := map[v1.PodConditionType]v1.ConditionStatus{}
	for _, c := range prev.Conditions {
		before[c.Type] = c.Status
	}
	for _, c := range next.Conditions {
		if before[c.Type] != c.Status {
			out = append(out, Entry{Kind: KindCondition, Name: string(c.Type), State: string(c.Status), Reason: c.Reason, Message: c.Message})
		}
	}
	out = append(out, diffContainers(prev.InitContainerStatuses, next.InitContainerStatuses)...)
	out = append(out, diffContainers(prev.ContainerStatuses, next.ContainerStatuses)...)
	out = append(out, diffContainers(prev.EphemeralContainerStatuses, next.EphemeralContainerStatuses)...)
	return out
}

func diffContainers(prev, next []v1.ContainerStatus) []Entry {
	before := map[string]v1.ContainerStatus{}
	for _, c := range prev {
		before[c.Name] = c
	}
	var out []Entry
	for _, c := range next {
		old, had := before[c.Name]
		if e, changed := stateEntry(old.State, c.State, had && old.ContainerID == c.ContainerID && old.RestartCount == c.RestartCount); changed {
			e.Container = c.Name
			out = append(out, e)
		}
		if c.Ready != old.Ready && (had || c.Ready) {
			out = append(out, Entry{Kind: KindReady, Container: c.Name, State: strconv.FormatBool(c.Ready)})
		}
		started := c.Started != nil && *c.Started
		if wasStarted := old.Started != nil && *old.Started; started != wasStarted && (had || started) {
			out = append(out, Entry{Kind: KindStarted, Container: c.Name, State: strconv.FormatBool(started)})
		}
	}
	return out
}

// stateEntry is the entry for a container whose state went from old to s,
// if that is a change. sameInstance: old is of the same container instance.
func stateEntry(old, s v1.ContainerState, sameInstance bool) (Entry, bool) {
	e := Entry{Kind: KindContainer}
	switch {
	case s.Waiting != nil:
		e.State, e.Reason, e.Message = "waiting", s.Waiting.Reason, s.Waiting.Message
		return e, old.Waiting == nil || old.Waiting.Reason != s.Waiting.Reason || !sameInstance && old.Waiting.Message != s.Waiting.Message
	case s.Running != nil:
		e.State = "running"
		return e, old.Running == nil || !sameInstance
	case s.Terminated != nil:
		t := s.Terminated
		e.State, e.Reason, e.Message = "terminated", t.Reason, t.Message
		code := t.ExitCode
		e.ExitCode = &code
		if t.Signal != 0 {
			e.Message = fmt.Sprintf("%s (signal %d)", e.Message, t.Signal)
		}
		return e, old.Terminated == nil || !sameInstance
	}
	return e, false
}

// Events passes events on to Next and records those about pods.
type Events struct {
	Next record.EventRecorder
	Rec  *Recorder
}

var _ record.EventRecorder = Events{}

func (e Events) record(object runtime.Object, eventtype, reason, message string) {
	entry := Entry{Kind: KindEvent, State: eventtype, Reason: reason, Message: message}
	switch o := object.(type) {
	case *v1.Pod:
		e.Rec.Record(Pod{Namespace: o.Namespace, Name: o.Name, UID: o.UID}, entry)
	case *v1.ObjectReference:
		// A container's event (probes): the reference's field path names it.
		if o.Kind != "Pod" {
			return
		}
		entry.Container = containerOfFieldPath(o.FieldPath)
		e.Rec.Record(Pod{Namespace: o.Namespace, Name: o.Name, UID: o.UID}, entry)
	}
}

// containerOfFieldPath is c of "spec.containers{c}" (and of init and
// ephemeral containers); empty for any other path.
func containerOfFieldPath(path string) string {
	for _, prefix := range []string{"spec.containers{", "spec.initContainers{", "spec.ephemeralContainers{"} {
		if rest, ok := strings.CutPrefix(path, prefix); ok {
			return strings.TrimSuffix(rest, "}")
		}
	}
	return ""
}

func (e Events) Event(object runtime.Object, eventtype, reason, message string) {
	e.record(object, eventtype, reason, message)
	e.Next.Event(object, eventtype, reason, message)
}

func (e Events) Eventf(object runtime.Object, eventtype, reason, messageFmt string, args ...any) {
	e.record(object, eventtype, reason, fmt.Sprintf(messageFmt, args...))
	e.Next.Eventf(object, eventtype, reason, messageFmt, args...)
}

func (e Events) AnnotatedEventf(object runtime.Object, annotations map[string]string, eventtype, reason, messageFmt string, args ...any) {
	e.record(object, eventtype, reason, fmt.Sprintf(messageFmt, args...))
	e.Next.AnnotatedEventf(object, annotations, eventtype, reason, messageFmt, args...)
}
