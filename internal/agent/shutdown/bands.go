package shutdown

import (
	"sort"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/podvisor/podvisor/internal/agent/config"
	"github.com/podvisor/podvisor/internal/agent/lifecycle"
)

// SystemCriticalPriority is the priority from which a pod is critical
// (system-cluster-critical and system-node-critical are at or above it).
const SystemCriticalPriority int32 = 2000000000

// Band is one step of a shutdown: pods whose priority is at least Priority
// (and below the next band's) get Period to stop.
type Band struct {
	Priority int32
	Period   time.Duration
}

// Bands turns the configuration into bands sorted from the lowest priority
// up. The legacy pair becomes two bands, as upstream: priority 0 with
// shutdownGracePeriod - shutdownGracePeriodCriticalPods, and
// SystemCriticalPriority with shutdownGracePeriodCriticalPods.
// No bands means graceful shutdown is off.
func Bands(c config.Config) []Band {
	var out []Band
	if len(c.ShutdownGracePeriodByPodPriority) > 0 {
		for _, b := range c.ShutdownGracePeriodByPodPriority {
			out = append(out, Band{Priority: b.Priority, Period: time.Duration(b.ShutdownGracePeriodSeconds) * time.Second})
		}
	} else {
		total, critical := c.ShutdownGracePeriod, c.ShutdownGracePeriodCriticalPods
		if total <= 0 || critical > total {
			return nil
		}
		// Whole seconds, as the kubelet converts them.
		out = []Band{
			{Priority: 0, Period: (total - critical).Truncate(time.Second)},
			{Priority: SystemCriticalPriority, Period: critical.Truncate(time.Second)},
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Priority < out[j].Priority })
	return out
}

// Total is the longest a shutdown can take: the sum of the band periods.
func Total(bands []Band) time.Duration {
	var sum time.Duration
	for _, b := range bands {
		sum += b.Period
	}
	return sum
}

// Group is a band with the pods that belong to it.
type Group struct {
	Band
	Pods []*v1.Pod
}

// Groups sorts pods into bands (sorted by priority, lowest first): a pod
// belongs to the band with the highest priority at or below its own; a pod
// below every band goes to the lowest one, as upstream. Every band is
// returned, empty ones included, in order.
func Groups(bands []Band, pods []*v1.Pod) []Group {
	groups := make([]Group, len(bands))
	for i, b := range bands {
		groups[i].Band = b
	}
	if len(groups) == 0 {
		return nil
	}
	for _, pod := range pods {
		p := Priority(pod)
		// The first band above p; the pod's band is the one before it.
		i := sort.Search(len(groups), func(i int) bool { return groups[i].Priority > p })
		if i > 0 {
			i--
		}
		groups[i].Pods = append(groups[i].Pods, pod)
	}
	return groups
}

// Priority is the pod's resolved priority; unset means 0.
func Priority(pod *v1.Pod) int32 {
	if pod.Spec.Priority != nil {
		return *pod.Spec.Priority
	}
	return 0
}

// Grace is how long a pod gets in its band: the band's period, or the pod's
// own terminationGracePeriodSeconds when that is shorter.
func Grace(pod *v1.Pod, band Band) time.Duration {
	g := band.Period
	if s := pod.Spec.TerminationGracePeriodSeconds; s != nil {
		g = min(g, lifecycle.Seconds(*s)) // saturates: the API bounds no grace period
	}
	return g
}
