package probe

import (
	"fmt"
	"time"

	v1 "k8s.io/api/core/v1"
)

// kind of probe. Zero means unknown.
type kind int

const (
	kindUnknown kind = iota
	startup
	liveness
	readiness
)

// String is the word upstream puts in front of event messages.
func (k kind) String() string {
	switch k {
	case startup:
		return "Startup"
	case liveness:
		return "Liveness"
	case readiness:
		return "Readiness"
	}
	return "Unknown"
}

// timing is a probe's fields with the API defaults applied (§6), for probes
// built by clients that skipped defaulting.
type timing struct {
	initialDelay     time.Duration
	period           time.Duration
	timeout          time.Duration
	successThreshold int
	failureThreshold int
	grace            *int64 // probe-level terminationGracePeriodSeconds
}

func timingOf(k kind, p *v1.Probe) timing {
	t := timing{
		initialDelay:     time.Duration(max(p.InitialDelaySeconds, 0)) * time.Second,
		period:           10 * time.Second,
		timeout:          time.Second,
		successThreshold: 1,
		failureThreshold: 3,
	}
	if p.PeriodSeconds > 0 {
		t.period = time.Duration(p.PeriodSeconds) * time.Second
	}
	if p.TimeoutSeconds > 0 {
		t.timeout = time.Duration(p.TimeoutSeconds) * time.Second
	}
	// successThreshold must be 1 for liveness and startup (§6).
	if p.SuccessThreshold > 0 && k == readiness {
		t.successThreshold = int(p.SuccessThreshold)
	}
	if p.FailureThreshold > 0 {
		t.failureThreshold = int(p.FailureThreshold)
	}
	if p.TerminationGracePeriodSeconds != nil {
		g := *p.TerminationGracePeriodSeconds
		t.grace = &g
	}
	return t
}

// killMessage is the Killing event message after a failed liveness or
// startup probe; ", will be restarted" only when the restart policy will, as
// upstream.
func killMessage(k kind, pod *v1.Pod, c *v1.Container) string {
	msg := fmt.Sprintf("Container %s failed %s probe", c.Name, map[kind]string{liveness: "liveness", startup: "startup"}[k])
	policy := pod.Spec.RestartPolicy
	if c.RestartPolicy != nil { // sidecars and per-container policies
		policy = v1.RestartPolicy(*c.RestartPolicy)
	}
	if policy != v1.RestartPolicyNever {
		msg += ", will be restarted"
	}
	return msg
}
