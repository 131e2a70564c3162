package logs

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
)

var t0 = time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)

// at is the timestamp of the i-th entry of a test log: one second apart.
func at(i int) time.Time { return t0.Add(time.Duration(i) * time.Second) }

// logOf builds a CRI log from "stream tag content" specs, entry i at at(i).
// A spec starting with "!" is written raw (a malformed line).
func logOf(specs ...string) string {
	var b strings.Builder
	for i, s := range specs {
		if raw, ok := strings.CutPrefix(s, "!"); ok {
			b.WriteString(raw + "\n")
			continue
		}
		fmt.Fprintf(&b, "%s %s\n", at(i).Format(time.RFC3339Nano), s)
	}
	return b.String()
}

func writeLog(t *testing.T, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "0.log")
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func read(t *testing.T, path string, opts Options) string {
	t.Helper()
	var out bytes.Buffer
	if err := ReadLogs(context.Background(), path, opts, &out); err != nil {
		t.Fatalf("ReadLogs: %v", err)
	}
	return out.String()
}

func TestReadLogs(t *testing.T) {
	five := logOf("stdout F one", "stderr F two", "stdout F three", "stdout F four", "stderr F five")
	split := logOf("stdout F one", "stdout P tw", "stdout P o-", "stdout F two", "stdout F three")
	ts := func(i int) string { return at(i).Format(TimestampFormat) }
	cases := []struct {
		name string
		log  string
		opts Options
		want string
	}{
		{"everything, stdout and stderr in file order", five, Options{}, "one\ntwo\nthree\nfour\nfive\n"},
		{"empty file", "", Options{}, ""},
		{"only the selected stream", five, Options{Stream: Stderr}, "two\nfive\n"},

		{"tail 2 is the last two lines", five, Options{TailLines: ptr.To[int64](2)}, "four\nfive\n"},
		{"tail 0 is nothing", five, Options{TailLines: ptr.To[int64](0)}, ""},
		{"tail -1 is everything", five, Options{TailLines: ptr.To[int64](-1)}, "one\ntwo\nthree\nfour\nfive\n"},
		{"tail beyond the log is everything", five, Options{TailLines: ptr.To[int64](50)}, "one\ntwo\nthree\nfour\nfive\n"},
		{"tail counts lines of the selected stream", five, Options{TailLines: ptr.To[int64](2), Stream: Stdout}, "three\nfour\n"},
		{"tail counts joined lines, not fragments", split, Options{TailLines: ptr.To[int64](2)}, "two-two\nthree\n"},
		{"tail counts a partial line at the end as a line", logOf("stdout F a", "stdout F b", "stdout P c"),
			Options{TailLines: ptr.To[int64](2)}, "b\nc"},
		{"tail does not count malformed lines", logOf("stdout F a", "stdout F b", "!garbage", "!"),
			Options{TailLines: ptr.To[int64](1)}, "b\n"},

		{"sinceTime drops older lines", five, Options{SinceTime: at(3)}, "four\nfive\n"},
		{"sinceSeconds counts back from the clock", five,
			Options{SinceSeconds: ptr.To[int64](2), Clock: clocktesting.NewFakeClock(at(4))}, "three\nfour\nfive\n"},
		{"the later of sinceTime and sinceSeconds wins", five,
			Options{SinceTime: at(4), SinceSeconds: ptr.To[int64](3), Clock: clocktesting.NewFakeClock(at(4))}, "five\n"},
		{"since and tail together", five, Options{SinceTime: at(2), TailLines: ptr.To[int64](4)}, "three\nfour\nfive\n"},
		{"a line is kept or dropped by its first fragment", split, Options{SinceTime: at(2)}, "three\n"},

		{"limitBytes cuts the last line", five, Options{LimitBytes: ptr.To[int64](6)}, "one\ntw"},
		{"limitBytes on a line end", five, Options{LimitBytes: ptr.To[int64](8)}, "one\ntwo\n"},
		{"limitBytes counts timestamps", five, Options{LimitBytes: ptr.To[int64](38), Timestamps: true},
			ts(0) + " one\n" + ts(1)[:3]},

		{"timestamps prefix each line", logOf("stdout F one", "stderr F two"), Options{Timestamps: true},
			ts(0) + " one\n" + ts(1) + " two\n"},
		{"timestamps prefix a joined line once", split, Options{Timestamps: true, TailLines: ptr.To[int64](2)},
			ts(1) + " two-two\n" + ts(4) + " three\n"},

		{"partial lines are joined", split, Options{}, "one\ntwo-two\nthree\n"},
		{"a partial line at the end has no newline", logOf("stdout F a", "stdout P b"), Options{}, "a\nb"},
		{"partial lines join per stream", logOf("stdout P a", "stderr P x", "stdout F b", "stderr F y"),
			Options{Stream: Stderr, Timestamps: true}, ts(1) + " xy\n"},
		{"empty content, with or without the space", logOf("stdout F", "stdout F ", "stdout F end"), Options{}, "\n\nend\n"},
		{"content keeps its spaces", logOf("stdout F  a  b "), Options{}, " a  b \n"},
		{"tags after ':' are ignored", logOf("stdout F:x one"), Options{}, "one\n"},

		{"malformed lines are skipped", logOf("stdout F a", "!not a log line", "!2025-13-99T00:00:00Z stdout F bad time",
			"stdout X bad tag", "stdin F bad stream", "!", "!2025-03-01T12:00:00Z", "stdout F b"), Options{}, "a\nb\n"},
		{"a last line without newline is read", strings.TrimSuffix(five, "\n"), Options{TailLines: ptr.To[int64](1)}, "five\n"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := read(t, writeLog(t, tc.log), tc.opts); got != tc.want {
				t.Errorf("got %q\nwant %q", got, tc.want)
			}
		})
	}
}

// TestReadLogsLongLines checks lines longer than the read buffers, and tail
// across many backward-scan chunks, against a forward reading.
func TestReadLogsLongLines(t *testing.T) {
	var specs, want []string
	for i := range 3000 {
		content := fmt.Sprintf("line %d %s", i, strings.Repeat("x", i%97))
		if i%1000 == 7 {
			content = strings.Repeat("long", 40<<10) // 160 KiB, beyond any buffer
		}
		specs = append(specs, "stdout F "+content)
		want = append(want, content+"\n")
	}
	path := writeLog(t, logOf(specs...))
	if got := read(t, path, Options{}); got != strings.Join(want, "") {
		t.Fatalf("full read differs (len %d, want %d)", len(got), len(strings.Join(want, "")))
	}
	for _, n := range []int{1, 2, 993, 994, 1500, 2999, 3000} {
		got := read(t, path, Options{TailLines: ptr.To(int64(n))})
		if got != strings.Join(want[len(want)-n:], "") {
			t.Errorf("tail %d differs (len %d)", n, len(got))
		}
	}
}

func TestFromPodLogOptions(t *testing.T) {
	since := metav1.NewTime(at(3))
	got := FromPodLogOptions(&v1.PodLogOptions{Follow: true, Timestamps: true, TailLines: ptr.To[int64](3),
		SinceTime: &since, LimitBytes: ptr.To[int64](9), Stream: ptr.To(v1.LogStreamStderr)})
	if !got.Follow || !got.Timestamps || *got.TailLines != 3 || !got.SinceTime.Equal(at(3)) || *got.LimitBytes != 9 || got.Stream != Stderr {
		t.Errorf("got %+v", got)
	}
	if got := FromPodLogOptions(&v1.PodLogOptions{Stream: ptr.To(v1.LogStreamAll)}); got.Stream != "" {
		t.Errorf("All: stream %q, want both", got.Stream)
	}
}

func TestWriter(t *testing.T) {
	var buf bytes.Buffer
	w := NewWriter(&buf, Stderr, clocktesting.NewFakePassiveClock(at(0)))
	fmt.Fprint(w, "a\nb\n")
	fmt.Fprint(w, "par")
	fmt.Fprint(w, "tial\n\n")
	stamp := at(0).Format(time.RFC3339Nano)
	want := fmt.Sprintf("%[1]s stderr F a\n%[1]s stderr F b\n%[1]s stderr P par\n%[1]s stderr F tial\n%[1]s stderr F \n", stamp)
	if buf.String() != want {
		t.Fatalf("wrote %q\nwant  %q", buf.String(), want)
	}
	if got := read(t, writeLog(t, buf.String()), Options{}); got != "a\nb\npartial\n\n" {
		t.Errorf("read back %q", got)
	}
}
