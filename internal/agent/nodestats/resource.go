package nodestats

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
)

// The kubelet's /metrics/resource (its resource metrics collector, STABLE):
// the same names, help, labels and types, each sample stamped with the time
// it was measured.
var (
	nodeCPU = prometheus.NewDesc("node_cpu_usage_seconds_total",
		"Cumulative cpu time consumed by the node in core-seconds", nil, nil)
	nodeMemory = prometheus.NewDesc("node_memory_working_set_bytes",
		"Current working set of the node in bytes", nil, nil)
	containerCPU = prometheus.NewDesc("container_cpu_usage_seconds_total",
		"Cumulative cpu time consumed by the container in core-seconds", []string{"container", "pod", "namespace"}, nil)
	containerMemory = prometheus.NewDesc("container_memory_working_set_bytes",
		"Current working set of the container in bytes", []string{"container", "pod", "namespace"}, nil)
	containerStart = prometheus.NewDesc("container_start_time_seconds",
		"Start time of the container since unix epoch in seconds", []string{"container", "pod", "namespace"}, nil)
	podCPU = prometheus.NewDesc("pod_cpu_usage_seconds_total",
		"Cumulative cpu time consumed by the pod in core-seconds", []string{"pod", "namespace"}, nil)
	podMemory = prometheus.NewDesc("pod_memory_working_set_bytes",
		"Current working set of the pod in bytes", []string{"pod", "namespace"}, nil)
	scrapeError = prometheus.NewDesc("scrape_error",
		"1 if there was an error while getting container metrics, 0 otherwise", nil, nil)
)

// scrapeTimeout bounds one scrape's sampling (the Collector has no context).
const scrapeTimeout = 30 * time.Second

// ResourceCollector serves /metrics/resource from summaries.
type ResourceCollector struct {
	Summary func(context.Context) statsapi.Summary
}

// Describe implements prometheus.Collector.
func (c ResourceCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{nodeCPU, nodeMemory, containerCPU, containerMemory, containerStart, podCPU, podMemory, scrapeError} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c ResourceCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), scrapeTimeout)
	defer cancel()
	ResourceMetrics(c.Summary(ctx), ch)
}

// ResourceMetrics sends the resource metrics of s to ch. scrape_error is 1
// when the node's own CPU or memory could not be read, as the kubelet's
// when its summary fails.
func ResourceMetrics(s statsapi.Summary, ch chan<- prometheus.Metric) {
	failed := 0.0
	if s.Node.CPU == nil || s.Node.Memory == nil {
		failed = 1
	}
	ch <- prometheus.MustNewConstMetric(scrapeError, prometheus.GaugeValue, failed)
	cpuMem(ch, nodeCPU, nodeMemory, s.Node.CPU, s.Node.Memory)
	for _, p := range s.Pods {
		for _, c := range p.Containers {
			ch <- prometheus.NewMetricWithTimestamp(c.StartTime.Time,
				prometheus.MustNewConstMetric(containerStart, prometheus.GaugeValue, float64(c.StartTime.UnixNano())/1e9, c.Name, p.PodRef.Name, p.PodRef.Namespace))
			cpuMem(ch, containerCPU, containerMemory, c.CPU, c.Memory, c.Name, p.PodRef.Name, p.PodRef.Namespace)
		}
		cpuMem(ch, podCPU, podMemory, p.CPU, p.Memory, p.PodRef.Name, p.PodRef.Namespace)
	}
}

func cpuMem(ch chan<- prometheus.Metric, cpuDesc, memDesc *prometheus.Desc, cpu *statsapi.CPUStats, mem *statsapi.MemoryStats, labels ...string) {
	if cpu != nil && cpu.UsageCoreNanoSeconds != nil {
		ch <- prometheus.NewMetricWithTimestamp(cpu.Time.Time,
			prometheus.MustNewConstMetric(cpuDesc, prometheus.CounterValue, float64(*cpu.UsageCoreNanoSeconds)/1e9, labels...))
	}
	if mem != nil && mem.WorkingSetBytes != nil {
		ch <- prometheus.NewMetricWithTimestamp(mem.Time.Time,
			prometheus.MustNewConstMetric(memDesc, prometheus.GaugeValue, float64(*mem.WorkingSetBytes), labels...))
	}
}
