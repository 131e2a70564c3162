package process

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"k8s.io/utils/clock"
)

var criLine = regexp.MustCompile(`^(\S+) (stdout|stderr) (F|P) (.*)$`)

type entry struct{ stream, tag, content string }

// readCRILog parses a CRI log, checking every timestamp.
func readCRILog(t *testing.T, path string) []entry {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []entry
	for _, l := range strings.Split(strings.TrimSuffix(string(b), "\n"), "\n") {
		m := criLine.FindStringSubmatch(l)
		if m == nil {
			t.Fatalf("not a CRI log line: %.80q", l)
		}
		if _, err := time.Parse(time.RFC3339Nano, m[1]); err != nil {
			t.Fatalf("bad timestamp in %.80q: %v", l, err)
		}
		out = append(out, entry{m[2], m[3], m[4]})
	}
	return out
}

func TestCRILogSplitsLongAndPartialLines(t *testing.T) {
	path := filepath.Join(t.TempDir(), "a", "b.log")
	l, err := openCRILog(path, clock.RealClock{})
	if err != nil {
		t.Fatal(err)
	}
	long := strings.Repeat("x", maxLogLine+10)
	l.copyStream("stdout", strings.NewReader("one\ntwo\r\n\n"+long+"\nend"))
	l.Close()
	got := readCRILog(t, path)
	want := []entry{
		{"stdout", "F", "one"},
		{"stdout", "F", "two"},
		{"stdout", "F", ""},
		{"stdout", "P", long[:maxLogLine]},
		{"stdout", "F", long[maxLogLine:]},
		{"stdout", "P", "end"}, // no newline before EOF: partial, as containerd
	}
	if len(got) != len(want) {
		t.Fatalf("got %d entries, want %d: %.200v", len(got), len(want), got)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("entry %d: got %.60v, want %.60v", i, got[i], want[i])
		}
	}
}

func TestContainerOutputGoesToCRILog(t *testing.T) {
	r := newRuntime(t, t.TempDir())
	spec := testSpec(t, "sh", "-c", "echo out; echo err >&2; head -c 20000 /dev/zero | tr '\\0' a; echo")
	id := run(t, r, spec)
	waitExit(t, r, id)
	var stdout, stderr []entry
	for _, e := range readCRILog(t, spec.LogPath) {
		if e.stream == "stdout" {
			stdout = append(stdout, e)
		} else {
			stderr = append(stderr, e)
		}
	}
	wantOut := []entry{
		{"stdout", "F", "out"},
		{"stdout", "P", strings.Repeat("a", maxLogLine)},
		{"stdout", "F", strings.Repeat("a", 20000-maxLogLine)},
	}
	if len(stdout) != len(wantOut) || stdout[0] != wantOut[0] || stdout[1] != wantOut[1] || stdout[2] != wantOut[2] {
		t.Errorf("stdout entries %.200v", stdout)
	}
	if len(stderr) != 1 || stderr[0] != (entry{"stderr", "F", "err"}) {
		t.Errorf("stderr entries %v", stderr)
	}
}
