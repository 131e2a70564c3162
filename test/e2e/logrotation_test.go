package e2e

import (
	"bufio"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
)

// Container log rotation as the kubelet's: with containerLogMaxSize 4Mi and
// containerLogMaxFiles 3, a container that writes about 22 MB keeps at most
// three files of about the max size (the current log, the newest rotated
// one plain, an older one gzipped), named <n>.log.YYYYMMDD-HHMMSS[.gz];
// kubectl logs --tail reads the current file, as upstream, and a follower
// (kubectl logs -f) goes on across the rotations. A 10 MB line in another
// container is logged and rotated without harm to the agent, and a third
// writes 40 MB faster than the rotation looks.
//
// The writer writes one chunk of ~4.5 MB each time the test tells it (a file
// in a shared host directory) and says when it is done; the test asks for
// the next once the chunk was rotated: the sizes on disk do not depend on
// how fast the agent or the machine is. (A rotation may still fall inside a
// chunk: its rest then starts the next file.)
func TestContainerLogRotation(t *testing.T) {
	const (
		maxSize = 4 << 20
		chunks  = 5
		lines   = 4300 // of ~1 KB: a chunk is past maxSize
	)
	p := NewPodvisor(t, "--config", kubeletConfig(t,
		"containerLogMaxSize: 4Mi\ncontainerLogMaxFiles: 3\ncontainerLogMonitorInterval: 3s\n"))
	p.Start()
	ns := p.Namespace("logrot")
	sig := t.TempDir()
	writer := sh("w", fmt.Sprintf(`l=$(head -c 1000 /dev/zero | tr '\0' x); n=0; echo start
while [ $n -lt %d ]; do
  while [ ! -e %s/go$n ]; do sleep 0.1; done
  i=0; while [ $i -lt %d ]; do echo "c$n-$i $l"; i=$((i+1)); done
  touch %s/done$n; n=$((n+1))
done
while [ ! -e %s/go$n ]; do sleep 0.1; done
echo last-line-of-the-log; exec sleep 3600`, chunks, sig, lines, sig, sig))
	big := sh("big", fmt.Sprintf(`head -c 10485760 /dev/zero | tr '\0' y; echo
while [ ! -e %s/big-go ]; do sleep 0.1; done
echo after-the-big-line; exec sleep 3600`, sig))
	// The flood: 40 MB as fast as the pipe takes it, ten times the max size
	// between two looks of the rotation.
	flood := sh("flood", fmt.Sprintf(`l=$(head -c 1000 /dev/zero | tr '\0' z)
while [ ! -e %s/flood-go ]; do sleep 0.1; done
yes "$l" | head -n 40000; touch %s/flood-done
while [ ! -e %s/flood-end ]; do sleep 0.1; done
echo end-of-the-flood; exec sleep 3600`, sig, sig, sig))
	pod := p.pod(ns, "chatty", v1.RestartPolicyNever, writer, big, flood)
	shareHostDirs(pod, sig)
	created := p.create(t, pod)
	p.waitPod(t, ns, "chatty", 2*time.Minute, "Running", func(pod *v1.Pod) bool { return pod.Status.Phase == v1.PodRunning })
	logDir := filepath.Join(p.DataDir, "agent", "pods", fmt.Sprintf("%s_%s_%s", ns, created.Name, created.UID), "w")

	// The follower starts before the first chunk.
	p.waitLogs(t, ns, "chatty", "w", 2*time.Minute, "start")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	followed := make(chan []string, 1)
	connected := make(chan struct{})
	go func() {
		stream, err := p.Admin.CoreV1().Pods(ns).GetLogs("chatty", &v1.PodLogOptions{Container: "w", Follow: true}).Stream(ctx)
		if err != nil {
			t.Errorf("kubectl logs -f: %v", err)
			close(connected)
			followed <- nil
			return
		}
		close(connected)
		defer stream.Close()
		var got []string // the first line of each chunk, and the last line
		sc := bufio.NewScanner(stream)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			line := sc.Text()
			if line == "last-line-of-the-log" || strings.Contains(line, "-0 ") {
				got = append(got, strings.Fields(line)[0])
			}
			if line == "last-line-of-the-log" {
				break
			}
		}
		followed <- got
	}()

	select {
	case <-connected:
	case <-time.After(2 * time.Minute):
		t.Fatal("kubectl logs -f did not connect within 2m")
	}

	rotatedName := regexp.MustCompile(`^0\.log\.(\d{8}-\d{6})(\.gz)?$`)
	// rotations returns the distinct rotation times seen so far, and checks
	// the files against the policy.
	seen := map[string]bool{}
	check := func() string {
		es, err := os.ReadDir(logDir)
		if err != nil {
			return err.Error()
		}
		var names []string
		for _, e := range es {
			names = append(names, e.Name())
			if e.Name() == "0.log" {
				continue
			}
			m := rotatedName.FindStringSubmatch(e.Name())
			if m == nil {
				if !strings.HasSuffix(e.Name(), ".tmp") { // a compression under way
					t.Errorf("unexpected file %s in %s", e.Name(), logDir)
				}
				continue
			}
			seen[m[1]] = true
			if fi, err := e.Info(); err == nil && m[2] == "" && fi.Size() > maxSize+maxSize/4 {
				t.Errorf("rotated file %s has %d bytes, want about %d at most", e.Name(), fi.Size(), maxSize)
			}
		}
		if n := len(names) - countSuffix(names, ".tmp"); n > 3 {
			t.Errorf("%d log files %v, want at most containerLogMaxFiles (3)", n, names)
		}
		return fmt.Sprint(names)
	}
	for n := range chunks {
		if err := os.WriteFile(filepath.Join(sig, "go"+strconv.Itoa(n)), nil, 0o644); err != nil {
			t.Fatal(err)
		}
		waitUntil(t, 2*time.Minute, fmt.Sprintf("chunk %d written and rotated", n), func() (bool, string) {
			files := check()
			_, err := os.Stat(filepath.Join(sig, "done"+strconv.Itoa(n)))
			fi, err2 := os.Stat(filepath.Join(logDir, "0.log"))
			return err == nil && err2 == nil && fi.Size() < maxSize && len(seen) >= n+1, files
		})
	}
	// The last line after the last rotation: alone in the current log.
	if err := os.WriteFile(filepath.Join(sig, "go"+strconv.Itoa(chunks)), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	p.waitLogs(t, ns, "chatty", "w", 2*time.Minute, "last-line-of-the-log")
	final := check()
	if len(seen) != chunks || t.Failed() {
		t.Fatalf("%d rotations (%v), want %d; files %s", len(seen), seen, chunks, final)
	}

	// What is kept: the current log, the last chunk plain, the one before gzipped.
	var plain, gz string
	es, _ := os.ReadDir(logDir)
	for _, e := range es {
		switch m := rotatedName.FindStringSubmatch(e.Name()); {
		case m == nil:
		case m[2] == "":
			plain = filepath.Join(logDir, e.Name())
		default:
			gz = filepath.Join(logDir, e.Name())
		}
	}
	if plain == "" || gz == "" {
		t.Fatalf("files %s: want one plain and one gzipped rotated file", final)
	}
	criLine := regexp.MustCompile(`^\S+ (stdout|stderr) [FP] c\d-\d+ x+$`)
	b, err := os.ReadFile(plain)
	if err != nil {
		t.Fatal(err)
	}
	if first, _, _ := strings.Cut(string(b), "\n"); !criLine.MatchString(first) {
		t.Errorf("the plain rotated file %s starts with %.80q, want a CRI log line of the writer", plain, first)
	}
	current, err := os.ReadFile(filepath.Join(logDir, "0.log"))
	if err != nil {
		t.Fatal(err)
	}
	if end := fmt.Sprintf(" c%d-%d ", chunks-1, lines-1); !strings.Contains(string(b), end) && !strings.Contains(string(current), end) {
		t.Errorf("the end of the last chunk is neither in %s nor in the current log", plain)
	}
	if first, _, _ := strings.Cut(gunzipFile(t, gz), "\n"); !criLine.MatchString(first) {
		t.Errorf("the gzipped file %s starts with %.80q, want a CRI log line of the writer", gz, first)
	}

	// kubectl logs reads the current file only, as upstream: --tail 1 is the
	// last line, and without --tail it shows as many lines as that file has.
	out, stderr, code := p.kubectl(t, "", nil, "-n", ns, "logs", "chatty", "-c", "w", "--tail", "1")
	if code != 0 || out != "last-line-of-the-log\n" {
		t.Errorf("kubectl logs --tail 1: %q (exit %d, %s), want the last line", out, code, stderr)
	}
	out, stderr, code = p.kubectl(t, "", nil, "-n", ns, "logs", "chatty", "-c", "w", "--since", "1h")
	if want := strings.Count(string(current), " F "); code != 0 || !strings.HasSuffix(out, "\nlast-line-of-the-log\n") && out != "last-line-of-the-log\n" || strings.Count(out, "\n") != want {
		t.Errorf("kubectl logs --since 1h: %d lines ending %q (exit %d, %s), want the current file's %d lines",
			strings.Count(out, "\n"), out[max(0, len(out)-40):], code, stderr, want)
	}

	// The follower went through every rotation, in order.
	select {
	case got := <-followed:
		want := []string{}
		for n := range chunks {
			want = append(want, fmt.Sprintf("c%d-0", n))
		}
		want = append(want, "last-line-of-the-log")
		if !slices.Equal(got, want) {
			t.Errorf("kubectl logs -f saw chunk starts %v, want %v", got, want)
		}
	case <-time.After(2 * time.Minute):
		t.Error("kubectl logs -f did not reach the last line within 2m")
	}

	// The 10 MB line: logged and rotated away, then a line after it is
	// read; the agent still serving.
	bigDir := filepath.Join(filepath.Dir(logDir), "big")
	waitUntil(t, 2*time.Minute, "the 10 MB line rotated", func() (bool, string) {
		fi, err := os.Stat(filepath.Join(bigDir, "0.log"))
		rotated, _ := filepath.Glob(filepath.Join(bigDir, "0.log.*"))
		return err == nil && fi.Size() < maxSize && len(rotated) > 0, fmt.Sprint(rotated, err)
	})
	if err := os.WriteFile(filepath.Join(sig, "big-go"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	p.waitLogs(t, ns, "chatty", "big", 2*time.Minute, "after-the-big-line")
	out, stderr, code = p.kubectl(t, "", nil, "-n", ns, "logs", "chatty", "-c", "big", "--tail", "1")
	if code != 0 || out != "after-the-big-line\n" {
		t.Errorf("kubectl logs --tail 1 of the big line's container: %q (exit %d, %s)", out, code, stderr)
	}

	// A container that writes faster than rotation looks: the current log
	// grows past the max size between two looks (as upstream's), but the
	// policy's file count holds throughout, the log is rotated once the
	// flood ends, and its last line is read.
	floodDir := filepath.Join(filepath.Dir(logDir), "flood")
	if err := os.WriteFile(filepath.Join(sig, "flood-go"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	looks := 0
	waitUntil(t, 2*time.Minute, "the flood written", func() (bool, string) {
		es, _ := os.ReadDir(floodDir)
		var names []string
		for _, e := range es {
			names = append(names, e.Name())
		}
		if n := len(names) - countSuffix(names, ".tmp"); n > 3 {
			t.Errorf("flood: %d log files %v, want at most containerLogMaxFiles (3)", n, names)
		}
		looks++
		_, err := os.Stat(filepath.Join(sig, "flood-done"))
		return err == nil, fmt.Sprint(names)
	})
	waitUntil(t, 2*time.Minute, "the flood's log rotated", func() (bool, string) {
		fi, err := os.Stat(filepath.Join(floodDir, "0.log"))
		rotated, _ := filepath.Glob(filepath.Join(floodDir, "0.log.*"))
		return err == nil && fi.Size() < maxSize && len(rotated) > 0 && len(rotated) <= 2, fmt.Sprint(rotated, err)
	})
	// A line after the last rotation: read from the current log, as
	// kubectl logs reads only that.
	if err := os.WriteFile(filepath.Join(sig, "flood-end"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	p.waitLogs(t, ns, "chatty", "flood", 2*time.Minute, "end-of-the-flood")
	out, stderr, code = p.kubectl(t, "", nil, "-n", ns, "logs", "chatty", "-c", "flood", "--tail", "1")
	if code != 0 || out != "end-of-the-flood\n" {
		t.Errorf("kubectl logs --tail 1 of the flood: %q (exit %d, %s)", out, code, stderr)
	}
	t.Logf("flood: %d looks at its files while it wrote", looks)
	select {
	case <-p.exited:
		t.Errorf("podvisor exited:\n%s", p.Stderr())
	default:
	}
}

func countSuffix(names []string, suffix string) int {
	n := 0
	for _, s := range names {
		if strings.HasSuffix(s, suffix) {
			n++
		}
	}
	return n
}

func gunzipFile(t *testing.T, path string) string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	b, err := io.ReadAll(zr)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return string(b)
}
