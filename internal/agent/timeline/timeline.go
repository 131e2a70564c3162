// Package timeline records, per pod, every step of its lifecycle the agent
// takes or sees, to the millisecond: the container states, phase and
// conditions it reports, the events it emits (image pulls, creations,
// starts, kills, probe failures, back-offs), and what the pod worker tells
// it directly. The API keeps only a pod's last two container states and
// events at one-second resolution that expire; the timeline keeps the whole
// story, in memory within bounds, and on disk so that it survives an agent
// restart, until the pod is gone from the API.
package timeline

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
)

// Kinds of entries.
const (
	KindPhase     = "Phase"     // the pod's phase changed
	KindCondition = "Condition" // a pod condition changed status
	KindContainer = "Container" // a container's state changed (waiting/running/terminated)
	KindReady     = "Ready"     // a container became ready or unready (readiness probe)
	KindStarted   = "Started"   // a container's startup probe passed (or it was restarted)
	KindEvent     = "Event"     // an event the agent emitted for the pod
	KindDeletion  = "Deletion"  // the pod's object was marked for deletion
	KindHook      = "Hook"      // a postStart or preStop hook began or ended
	KindProbe     = "Probe"     // a probe's result changed (with how long the previous one lasted)
	KindSignal    = "Signal"    // the stop signal sent, or SIGKILL at the end of the grace period
)

// Entry is one step.
type Entry struct {
	Time time.Time `json:"time"`
	Kind string    `json:"kind"`
	// Container names the container the entry is about; empty for the pod.
	Container string `json:"container,omitempty"`
	// Name is the condition's type, for a Condition entry.
	Name string `json:"name,omitempty"`
	// State is the new state, e.g. "Running", "True", "terminated".
	State string `json:"state,omitempty"`
	// Reason is a CamelCase reason (a waiting or terminated reason, an
	// event's reason).
	Reason  string `json:"reason,omitempty"`
	Message string `json:"message,omitempty"`
	// ExitCode of a terminated container.
	ExitCode *int32 `json:"exitCode,omitempty"`
}

// Timeline is what is known of one pod.
type Timeline struct {
	Namespace string    `json:"namespace"`
	Name      string    `json:"name"`
	UID       types.UID `json:"uid"`
	Entries   []Entry   `json:"entries"`
	// Dropped counts the oldest entries no longer kept (the per-pod and
	// node bounds).
	Dropped int `json:"dropped,omitempty"`
}

// Config bounds and places a Recorder.
type Config struct {
	// Dir keeps one file per pod, so that timelines survive a restart;
	// empty: memory only.
	Dir string
	// PerPod is how many entries a pod keeps (the newest). Default 1000.
	PerPod int
	// NodeCap is how many entries all pods keep together; past it, the pod
	// with the most loses its oldest half. Default 50000.
	NodeCap int
	Clock   clock.PassiveClock
	Log     *slog.Logger
}

// Recorder keeps the timelines of a node's pods. Its methods are safe for
// concurrent use.
type Recorder struct {
	cfg Config

	mu     sync.Mutex
	pods   map[types.UID]*podLog
	total  int
	loaded []types.UID // the pods of the files found at New

	writes  chan diskWrite // to the writer; nil without Dir, or once closed
	written chan struct{}  // closed when the writer is done
}

type podLog struct {
	Timeline
	lines int // lines in its file, header included
}

// insert adds e in time order: after every entry not later than it (an
// entry may carry an earlier time than the last one, e.g. a kill recorded
// once the runtime reported it).
func (p *podLog) insert(e Entry) {
	i := len(p.Entries)
	for i > 0 && p.Entries[i-1].Time.After(e.Time) {
		i--
	}
	p.Entries = slices.Insert(p.Entries, i, e)
}

// New loads the timelines kept in cfg.Dir.
func New(cfg Config) (*Recorder, error) {
	if cfg.PerPod <= 0 {
		cfg.PerPod = 1000
	}
	if cfg.NodeCap <= 0 {
		cfg.NodeCap = 50000
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	r := &Recorder{cfg: cfg, pods: map[types.UID]*podLog{}}
	if cfg.Dir == "" {
		return r, nil
	}
	if err := os.MkdirAll(cfg.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("timeline: %w", err)
	}
	files, err := filepath.Glob(filepath.Join(cfg.Dir, "*.jsonl"))
	if err != nil {
		return nil, fmt.Errorf("timeline: %w", err)
	}
	for _, f := range files {
		p, err := readFile(f)
		if err != nil {
			cfg.Log.Warn("timeline file unreadable, dropped", "file", f, "err", err)
			os.Remove(f)
			continue
		}
		r.pods[p.UID] = p
		r.loaded = append(r.loaded, p.UID)
		r.trimLocked(p)
		r.total += len(p.Entries)
	}
	r.capLocked()
	r.writes, r.written = make(chan diskWrite, writeQueue), make(chan struct{})
	go r.writer(r.writes)
	return r, nil
}

// header is the first line of a pod's file.
type header struct {
	Namespace string    `json:"namespace"`
	Name      string    `json:"name"`
	UID       types.UID `json:"uid"`
}

func readFile(path string) (*podLog, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), 1<<20)
	if !sc.Scan() {
		return nil, errors.New("empty")
	}
	var h header
	if err := json.Unmarshal(sc.Bytes(), &h); err != nil || h.UID == "" {
		return nil, fmt.Errorf("header: %v", err)
	}
	p := &podLog{Timeline: Timeline{Namespace: h.Namespace, Name: h.Name, UID: h.UID}, lines: 1}
	for sc.Scan() {
		var e Entry
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			break // a torn last line (a crash while writing): the rest is lost
		}
		p.insert(e) // the file is in the order entries came
		p.lines++
	}
	return p, nil
}

// Pod names a pod for Record.
type Pod struct {
	Namespace, Name string
	UID             types.UID
}

// Record appends entries to the pod's timeline; an entry without a time
// gets now.
func (r *Recorder) Record(pod Pod, entries ...Entry) {
	if len(entries) == 0 {
		return
	}
	now := r.cfg.Clock.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	p, ok := r.pods[pod.UID]
	if !ok {
		p = &podLog{Timeline: Timeline{Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID}}
		r.pods[pod.UID] = p
	}
	for i := range entries {
		if entries[i].Time.IsZero() {
			entries[i].Time = now
		}
	}
	for _, e := range entries {
		p.insert(e)
	}
	r.total += len(entries)
	r.persistLocked(p, entries)
	r.trimLocked(p)
	r.capLocked()
}

// trimLocked keeps the newest PerPod entries of p.
func (r *Recorder) trimLocked(p *podLog) {
	if over := len(p.Entries) - r.cfg.PerPod; over > 0 {
		r.dropLocked(p, over)
	}
}

func (r *Recorder) dropLocked(p *podLog, n int) {
	p.Entries = append([]Entry(nil), p.Entries[n:]...)
	p.Dropped += n
	r.total -= n
}

// capLocked keeps all pods within NodeCap.
func (r *Recorder) capLocked() {
	for r.total > r.cfg.NodeCap {
		var big *podLog
		for _, p := range r.pods {
			if big == nil || len(p.Entries) > len(big.Entries) {
				big = p
			}
		}
		r.dropLocked(big, max(1, len(big.Entries)/2))
	}
}

// persistLocked hands p's new entries to the writer: appended to its file,
// or the whole file written again when it has none yet, or has grown past
// twice the entries kept. The worker's path does no file I/O; a writer too
// far behind (its queue full) skips the write, and the pod's file is written
// whole next time.
func (r *Recorder) persistLocked(p *podLog, entries []Entry) {
	if r.writes == nil {
		return
	}
	w := diskWrite{uid: p.UID}
	if p.lines == 0 || p.lines > 2*r.cfg.PerPod+1 {
		w.header = &header{Namespace: p.Namespace, Name: p.Name, UID: p.UID}
		w.entries = slices.Clone(p.Entries)
		p.lines = 1 + len(p.Entries)
	} else {
		w.entries = slices.Clone(entries)
		p.lines += len(entries)
	}
	select {
	case r.writes <- w:
	default:
		p.lines = 0
	}
}

// diskWrite is one change of a pod's file: entries to append, or with a
// header the whole file, or its removal.
type diskWrite struct {
	uid     types.UID
	header  *header
	entries []Entry
	remove  bool
}

// writeQueue is how many writes may wait for the writer.
const writeQueue = 4096

// writer applies the writes in order until the queue is closed.
func (r *Recorder) writer(writes <-chan diskWrite) {
	defer close(r.written)
	for w := range writes {
		path := r.path(w.uid)
		var err error
		switch {
		case w.remove:
			if err = os.Remove(path); errors.Is(err, fs.ErrNotExist) {
				err = nil
			}
		case w.header != nil:
			err = writeWhole(path, *w.header, w.entries)
		default:
			err = appendEntries(path, w.entries)
		}
		if err != nil {
			r.cfg.Log.Warn("timeline file not written", "uid", w.uid, "err", err)
		}
	}
}

func encodeLines(b *strings.Builder, entries []Entry) {
	for _, e := range entries {
		line, _ := json.Marshal(e)
		b.Write(line)
		b.WriteByte('\n')
	}
}

func writeWhole(path string, h header, entries []Entry) error {
	var b strings.Builder
	line, _ := json.Marshal(h)
	b.Write(line)
	b.WriteByte('\n')
	encodeLines(&b, entries)
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(b.String()), 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

func appendEntries(path string, entries []Entry) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	var b strings.Builder
	encodeLines(&b, entries)
	_, err = f.WriteString(b.String())
	return errors.Join(err, f.Close())
}

// Close writes what is queued and stops the writer; Record and Forget no
// longer write files after it.
func (r *Recorder) Close() {
	r.mu.Lock()
	w := r.writes
	r.writes = nil
	r.mu.Unlock()
	if w != nil {
		close(w)
		<-r.written
	}
}

func (r *Recorder) path(uid types.UID) string {
	return filepath.Join(r.cfg.Dir, string(uid)+".jsonl")
}

// Get returns the timeline of the pod namespace/name; of several pods of
// that name (a pod deleted and made again), the one recorded last.
func (r *Recorder) Get(namespace, name string) (Timeline, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var found *podLog
	for _, p := range r.pods {
		if p.Namespace != namespace || p.Name != name {
			continue
		}
		if found == nil || last(p).After(last(found)) {
			found = p
		}
	}
	if found == nil {
		return Timeline{}, false
	}
	t := found.Timeline
	t.Entries = append([]Entry(nil), found.Entries...)
	return t, true
}

func last(p *podLog) time.Time {
	if n := len(p.Entries); n > 0 {
		return p.Entries[n-1].Time
	}
	return time.Time{}
}

// Pods lists the timelines kept, by namespace and name.
func (r *Recorder) Pods() []Pod {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]Pod, 0, len(r.pods))
	for _, p := range r.pods {
		out = append(out, Pod{Namespace: p.Namespace, Name: p.Name, UID: p.UID})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Namespace != out[j].Namespace {
			return out[i].Namespace < out[j].Namespace
		}
		return out[i].Name < out[j].Name
	})
	return out
}

// Forget drops the timeline of a pod that is gone from the API.
func (r *Recorder) Forget(uid types.UID) {
	r.mu.Lock()
	defer r.mu.Unlock()
	p, ok := r.pods[uid]
	if !ok {
		return
	}
	r.total -= len(p.Entries)
	delete(r.pods, uid)
	if r.writes != nil {
		r.writes <- diskWrite{uid: uid, remove: true} // never skipped: a file left would come back at the next start
	}
}

// Keep forgets the timelines loaded at New whose pod is not in live: the
// pods deleted while the agent was down.
func (r *Recorder) Keep(live map[types.UID]bool) {
	r.mu.Lock()
	loaded := r.loaded
	r.loaded = nil
	r.mu.Unlock()
	for _, uid := range loaded {
		if !live[uid] {
			r.Forget(uid)
		}
	}
}
