package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"

	"github.com/onsi/ginkgo/v2/types"
)

// resultsDir is the part of Sonobuoy's results layout that a
// certification run's e2e plugin fills: plugins/e2e/results/global with
// e2e.log (the e2e binary's output) and junit_NN.xml (one per lane here).
type resultsDir struct {
	dir string
	log *os.File
}

func newResultsDir(out string) (*resultsDir, error) {
	dir := filepath.Join(out, "plugins", "e2e", "results", "global")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	log, err := os.Create(filepath.Join(dir, "e2e.log"))
	if err != nil {
		return nil, err
	}
	return &resultsDir{dir: dir, log: log}, nil
}

func (r *resultsDir) junit(n int) string {
	return filepath.Join(r.dir, fmt.Sprintf("junit_%02d.xml", n))
}

func (r *resultsDir) close() { r.log.Close() }

// selection says which specs of the binary a run selected: its label
// filter, -focus and the skip of selection.go; exclusions are counted
// apart, with their reasons.
type selection struct {
	labels     string
	focus      string
	exclusions []exclusion
}

// outcome is one spec's result over the lanes of a run.
type outcome struct {
	sig, text string
	state     types.SpecState
	message   string // the failure's, or a run-time skip's reason
	excluded  *exclusion
}

// sigCount is the outcome of one SIG's selected specs. notRun are those an
// interrupted run (^C, the lane's timeout) cut short or never reached.
type sigCount struct {
	selected, passed, failed, skipped, excluded, notRun int
}

// outcomes merges the lanes' JSON reports: each report lists every spec of
// the binary, those its lane did not run as skipped without a message. A
// selected spec counts once: as run in the lane that ran it, as excluded
// where an exclusion skipped it, else as not run (a run cut short). Specs
// the selection leaves out are not counted. Failures of suite set-up nodes
// come back apart: they fail every spec of a lane.
func outcomes(reports []string, sel selection) (specs []outcome, setup []string, err error) {
	filter, err := types.ParseLabelFilter(sel.labels)
	if err != nil {
		return nil, nil, err
	}
	focus := regexp.MustCompile(sel.focus)
	skip := regexp.MustCompile(selectSkip)
	byKey := map[string]int{}
	for _, path := range reports {
		b, err := os.ReadFile(path)
		if os.IsNotExist(err) {
			continue // a lane that did not run (interrupted before it)
		}
		if err != nil {
			return nil, nil, err
		}
		var rs []types.Report
		if err := json.Unmarshal(b, &rs); err != nil {
			return nil, nil, fmt.Errorf("%s: %w", path, err)
		}
		for _, r := range rs {
			for _, s := range r.SpecReports {
				if s.LeafNodeType != types.NodeTypeIt {
					if s.State.Is(types.SpecStateFailureStates) {
						setup = append(setup, fmt.Sprintf("%s (%s): %s", s.LeafNodeType, filepath.Base(path), firstLine(s.Failure.Message)))
					}
					continue
				}
				text := s.FullText()
				o := outcome{sig: sigOf(text), text: text, state: s.State, message: s.Failure.Message}
				notRun := s.State == types.SpecStateSkipped && s.Failure.Message == ""
				if notRun {
					if !filter(s.Labels()) || skip.MatchString(text) || !focus.MatchString(text) {
						continue
					}
					for i, e := range sel.exclusions {
						if e.re.MatchString(text) {
							o.excluded = &sel.exclusions[i]
							break
						}
					}
					// Without an exclusion: selected, but not run by this
					// lane (another lane's, or cut short); a lane that
					// ran it replaces this below.
				}
				key := s.LeafNodeLocation.String() + " " + text
				if i, ok := byKey[key]; ok {
					if !notRun {
						specs[i] = o
					}
					continue
				}
				byKey[key] = len(specs)
				specs = append(specs, o)
			}
		}
	}
	return specs, setup, nil
}

// sigOf is the SIG a spec's text names first ("[sig-network] DNS …").
var sigRE = regexp.MustCompile(`\[sig-[a-z-]+\]`)

func sigOf(text string) string {
	if m := sigRE.FindString(text); m != "" {
		return strings.Trim(m, "[]")
	}
	return "(no SIG)"
}

// summarize reads the lanes' JSON reports and writes counts per SIG, the
// failed specs and the excluded ones with their reasons to w (and, as
// Markdown, to md).
func summarize(reports []string, sel selection, w io.Writer, md io.Writer) (failed int, err error) {
	specs, setup, err := outcomes(reports, sel)
	if err != nil {
		return 0, err
	}
	sigs := map[string]*sigCount{}
	var total sigCount
	var fails, excluded []string
	for _, o := range specs {
		c := sigs[o.sig]
		if c == nil {
			c = &sigCount{}
			sigs[o.sig] = c
		}
		c.selected++
		total.selected++
		interrupted := o.state.Is(types.SpecStateInterrupted|types.SpecStateAborted) ||
			(o.state == types.SpecStateSkipped && o.message == "")
		switch {
		case o.excluded != nil:
			c.excluded++
			total.excluded++
			excluded = append(excluded, fmt.Sprintf("%s: %s", o.text, o.excluded.reason))
		case interrupted:
			c.notRun++
			total.notRun++
		case o.state == types.SpecStatePassed:
			c.passed++
			total.passed++
		case o.state.Is(types.SpecStateFailureStates):
			c.failed++
			total.failed++
			fails = append(fails, fmt.Sprintf("%s: %s", o.text, firstLine(o.message)))
		default:
			// Skipped at run time (e2eskipper), with the reason.
			c.skipped++
			total.skipped++
		}
	}
	names := make([]string, 0, len(sigs))
	for n := range sigs {
		names = append(names, n)
	}
	sort.Strings(names)
	fmt.Fprintf(w, "\n%-22s %8s %6s %6s %7s %8s %7s\n", "SIG", "selected", "passed", "failed", "skipped", "excluded", "not run")
	fmt.Fprintf(md, "| SIG | selected | passed | failed | skipped | excluded | not run |\n| --- | ---: | ---: | ---: | ---: | ---: | ---: |\n")
	row := func(name string, c sigCount) {
		fmt.Fprintf(w, "%-22s %8d %6d %6d %7d %8d %7d\n", name, c.selected, c.passed, c.failed, c.skipped, c.excluded, c.notRun)
		fmt.Fprintf(md, "| %s | %d | %d | %d | %d | %d | %d |\n", name, c.selected, c.passed, c.failed, c.skipped, c.excluded, c.notRun)
	}
	for _, n := range names {
		row(n, *sigs[n])
	}
	row("total", total)
	sort.Strings(fails)
	fails = append(setup, fails...)
	if len(fails) > 0 {
		fmt.Fprintf(w, "\nfailed:\n")
		fmt.Fprintf(md, "\nFailed:\n\n")
		for _, f := range fails {
			fmt.Fprintf(w, "  %s\n", f)
			fmt.Fprintf(md, "- %s\n", f)
		}
	}
	if len(excluded) > 0 {
		sort.Strings(excluded)
		fmt.Fprintf(md, "\nExcluded:\n\n")
		for _, e := range excluded {
			fmt.Fprintf(md, "- %s\n", e)
		}
	}
	return total.failed + len(setup), nil
}

func firstLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	if len(s) > 200 {
		s = s[:200] + "…"
	}
	return s
}
