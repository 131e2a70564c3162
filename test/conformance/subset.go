package main

import (
	"regexp"
	"strings"
)

// fastSubset is the lifecycle core of the selection that CI runs (-fast):
// init containers, hooks, exit statuses and termination messages, probes
// that restart or gate readiness, pod start and graceful deletion — about
// 20 specs that take a few minutes together. The probe specs that watch a
// container for minutes to see it *not* restarted are left to the full run.
var fastSubset = []string{
	`InitContainer \[NodeConformance\] should invoke init containers on a RestartNever pod`,
	`InitContainer \[NodeConformance\] should invoke init containers on a RestartAlways pod`,
	`InitContainer \[NodeConformance\] should not start app containers if init containers fail on a RestartAlways pod`,
	`InitContainer \[NodeConformance\] should not start app containers and fail the pod if init containers fail on a RestartNever pod`,
	`Container Lifecycle Hook when create a pod with lifecycle hook should execute poststart exec hook properly`,
	`Container Lifecycle Hook when create a pod with lifecycle hook should execute prestop exec hook properly`,
	`Container Lifecycle Hook when create a pod with lifecycle hook should execute poststart http hook properly`,
	`Container Lifecycle Hook when create a pod with lifecycle hook should execute prestop http hook properly`,
	`Container Runtime blackbox test when starting a container that exits should run with the expected status`,
	`Container Runtime blackbox test on terminated container should report termination message if TerminationMessagePath is set \[`,
	`Container Runtime blackbox test on terminated container should report termination message from log output if TerminationMessagePolicy FallbackToLogsOnError is set`,
	`Container Runtime blackbox test on terminated container should report termination message from file when pod succeeds and TerminationMessagePolicy FallbackToLogsOnError is set`,
	`Probing container should be restarted with a exec "cat /tmp/health" liveness probe`,
	`Probing container should be restarted startup probe fails`,
	`Probing container should be ready immediately after startupProbe succeeds`,
	`Probing container with readiness probe should not be ready before initial delay and never restart`,
	`Probing container should mark readiness on pods to false while pod is in progress of terminating when a pod has a readiness probe`,
	`\[sig-node\] Pods should be submitted and removed`,
	`\[sig-node\] Pods should get a host IP`,
	`\[sig-node\] PreStop should call prestop when killing a pod`,
	`Restartable Init Container Lifecycle Hook when create a pod with lifecycle hook should execute prestop exec hook properly`,
}

// fastFocus is the subset as one -focus expression.
func fastFocus() string {
	parts := make([]string, len(fastSubset))
	for i, s := range fastSubset {
		parts[i] = "(?:" + s + ")"
	}
	return strings.Join(parts, "|")
}

var _ = regexp.MustCompile(fastFocus()) // a broken pattern fails at start
