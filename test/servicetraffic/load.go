package servicetraffic

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"strconv"
	"strings"
	"time"
)

// LoadCommand is the command, in a client pod of the testserver image,
// that sends GET url at rate requests a second, each on a new connection,
// until its stdin closes.
func LoadCommand(rate int, url string) []string {
	return []string{"/testserver", "load", "--rate", strconv.Itoa(rate), url}
}

// LoadResult is what `testserver load` reported.
type LoadResult struct {
	Rate                           int
	Sent, Answered, Failed         int
	Refused, Reset, Timeout, Other int
	Samples                        []string // the first failures, as printed
	Took                           time.Duration
}

// Cut counts the requests a stopping backend cut: refused or reset
// connections and any error but a timeout, the loss of the race a preStop
// sleep or stop-after-unrouted is there to win.
func (r LoadResult) Cut() int { return r.Refused + r.Reset + r.Other }

func (r LoadResult) String() string {
	return fmt.Sprintf("%d requests at %d/s over %v, %d answered, %d failed (refused %d, reset %d, timed out %d, other %d)",
		r.Sent, r.Rate, r.Took.Round(time.Second), r.Answered, r.Failed, r.Refused, r.Reset, r.Timeout, r.Other)
}

// Load is a running `testserver load`, fed and read through a command such
// as `kubectl exec -i POD -- LoadCommand…`.
type Load struct {
	cmd    *exec.Cmd
	rate   int
	stdin  io.WriteCloser
	lines  chan string
	stderr *bytes.Buffer // read only once the command was reaped
	start  time.Time
}

// StartLoad starts cmd, which runs LoadCommand(rate, …), and waits (a
// minute at most) until the load says it started.
func StartLoad(cmd *exec.Cmd, rate int) (*Load, error) {
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	l := &Load{cmd: cmd, rate: rate, stdin: stdin, lines: make(chan string, 64), stderr: &bytes.Buffer{}}
	cmd.Stderr = l.stderr
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	go func() {
		s := bufio.NewScanner(out)
		for s.Scan() {
			l.lines <- s.Text()
		}
		close(l.lines)
	}()
	select {
	case line := <-l.lines:
		if line != "load started" {
			l.Kill()
			return nil, fmt.Errorf("testserver load: %q; stderr %s", line, l.stderr)
		}
	case <-time.After(time.Minute):
		l.Kill()
		return nil, fmt.Errorf("testserver load did not start within a minute; stderr %s", l.stderr)
	}
	l.start = time.Now()
	return l, nil
}

// Kill ends the command, if still running, and reaps it.
func (l *Load) Kill() {
	if l.cmd.ProcessState == nil {
		_ = l.cmd.Process.Kill()
		_ = l.cmd.Wait()
	}
}

// Stop closes the load's stdin and returns what it reported (waiting a
// minute at most for its summary).
func (l *Load) Stop() (LoadResult, error) {
	_ = l.stdin.Close()
	r := LoadResult{Rate: l.rate}
	deadline := time.After(time.Minute)
	var unparsed []string
	for done := false; !done; {
		select {
		case line, ok := <-l.lines:
			if !ok {
				done = true
				break
			}
			if strings.HasPrefix(line, "failure ") {
				r.Samples = append(r.Samples, line)
			} else if _, err := fmt.Sscanf(line, "sent %d answered %d failed %d refused %d reset %d timeout %d other %d",
				&r.Sent, &r.Answered, &r.Failed, &r.Refused, &r.Reset, &r.Timeout, &r.Other); err != nil {
				unparsed = append(unparsed, line)
			}
		case <-deadline:
			l.Kill()
			return r, fmt.Errorf("testserver load did not end within a minute of its stdin closing; stderr %s", l.stderr)
		}
	}
	r.Took = time.Since(l.start)
	_ = l.cmd.Wait()
	if r.Sent == 0 {
		return r, errors.New("testserver load sent nothing; stdout " + strings.Join(unparsed, "; ") + "; stderr " + l.stderr.String())
	}
	return r, nil
}
