package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"

	"github.com/onsi/ginkgo/v2/types"
)

// areaCount is the outcome of the specs of one area: the top-level
// Describe, such as "[sig-node] Probing container".
type areaCount struct {
	passed, failed, skipped int
	failures                []string
}

// summarize reads ginkgo's JSON report and writes per-area counts and the
// failed specs to w (and, as Markdown, to md). Specs the selection left out
// are in the report too, as skipped without a message: they are not counted.
func summarize(reportPath string, w io.Writer, md io.Writer) (failed int, err error) {
	b, err := os.ReadFile(reportPath)
	if err != nil {
		return 0, err
	}
	var reports []types.Report
	if err := json.Unmarshal(b, &reports); err != nil {
		return 0, fmt.Errorf("%s: %w", reportPath, err)
	}
	areas := map[string]*areaCount{}
	var total areaCount
	for _, r := range reports {
		for _, s := range r.SpecReports {
			if s.LeafNodeType != types.NodeTypeIt {
				// Suite set-up nodes: a failure there fails every spec.
				if s.State.Is(types.SpecStateFailureStates) {
					total.failures = append(total.failures, fmt.Sprintf("%s: %s", s.LeafNodeType, firstLine(s.Failure.Message)))
					total.failed++
				}
				continue
			}
			area := "(top level)"
			if len(s.ContainerHierarchyTexts) > 0 {
				area = s.ContainerHierarchyTexts[0]
			}
			a := areas[area]
			if a == nil {
				a = &areaCount{}
				areas[area] = a
			}
			switch {
			case s.State == types.SpecStatePassed:
				a.passed++
				total.passed++
			case s.State.Is(types.SpecStateFailureStates):
				a.failed++
				total.failed++
				a.failures = append(a.failures, fmt.Sprintf("%s: %s", s.FullText(), firstLine(s.Failure.Message)))
			case s.State == types.SpecStateSkipped && s.Failure.Message != "":
				// Skipped at run time (e2eskipper), with the reason.
				a.skipped++
				total.skipped++
			}
		}
	}
	names := make([]string, 0, len(areas))
	for n, a := range areas {
		if a.passed+a.failed+a.skipped > 0 {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	fmt.Fprintf(w, "\n%-90s %6s %6s %7s\n", "area", "passed", "failed", "skipped")
	fmt.Fprintf(md, "| area | passed | failed | skipped |\n| --- | ---: | ---: | ---: |\n")
	for _, n := range names {
		a := areas[n]
		fmt.Fprintf(w, "%-90s %6d %6d %7d\n", n, a.passed, a.failed, a.skipped)
		fmt.Fprintf(md, "| %s | %d | %d | %d |\n", strings.ReplaceAll(n, "|", `\|`), a.passed, a.failed, a.skipped)
	}
	fmt.Fprintf(w, "%-90s %6d %6d %7d\n", "total", total.passed, total.failed, total.skipped)
	fmt.Fprintf(md, "| **total** | %d | %d | %d |\n", total.passed, total.failed, total.skipped)
	var fails []string
	fails = append(fails, total.failures...)
	for _, n := range names {
		fails = append(fails, areas[n].failures...)
	}
	if len(fails) > 0 {
		fmt.Fprintf(w, "\nfailed:\n")
		fmt.Fprintf(md, "\nFailed:\n\n")
		for _, f := range fails {
			fmt.Fprintf(w, "  %s\n", f)
			fmt.Fprintf(md, "- %s\n", f)
		}
	}
	return total.failed, nil
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
