package timeline

import "time"

// Lane is the pod's (Container "") or one container's row of a timeline:
// the states it went through, as segments, and its other entries, as marks.
type Lane struct {
	Container string
	Segments  []Segment
	Marks     []Entry
}

// Segment is one state held from Start to End.
type Segment struct {
	Start, End time.Time
	Entry      Entry // the entry that began it: a Container or Phase entry
}

// Class names the segment's kind: "waiting", "running", "terminated-ok",
// "terminated-err" for a container, "phase-<Phase>" for the pod.
func (s Segment) Class() string {
	e := s.Entry
	switch {
	case e.Kind == KindPhase:
		return "phase-" + e.State
	case e.State == "terminated" && e.ExitCode != nil && *e.ExitCode == 0:
		return "terminated-ok"
	case e.State == "terminated":
		return "terminated-err"
	}
	return e.State
}

// Lanes splits t into the pod's lane and one per container, in the order the
// containers first appear; the last segment of each lane ends at the last
// entry.
func Lanes(t Timeline) []Lane {
	if len(t.Entries) == 0 {
		return nil
	}
	end := t.Entries[len(t.Entries)-1].Time
	lanes := []Lane{{}}
	index := map[string]int{"": 0}
	for _, e := range t.Entries {
		i, ok := index[e.Container]
		if !ok {
			i = len(lanes)
			index[e.Container] = i
			lanes = append(lanes, Lane{Container: e.Container})
		}
		l := &lanes[i]
		if e.Kind != KindContainer && e.Kind != KindPhase {
			l.Marks = append(l.Marks, e)
			continue
		}
		if n := len(l.Segments); n > 0 {
			l.Segments[n-1].End = e.Time
		}
		l.Segments = append(l.Segments, Segment{Start: e.Time, End: end, Entry: e})
	}
	return lanes
}
