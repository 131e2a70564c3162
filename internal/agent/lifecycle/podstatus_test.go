package lifecycle

import (
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestQOSClass(t *testing.T) {
	res := func(req, lim string) v1.ResourceRequirements {
		r := v1.ResourceRequirements{}
		if req != "" {
			r.Requests = v1.ResourceList{v1.ResourceCPU: resource.MustParse(req), v1.ResourceMemory: resource.MustParse(req + "Mi")}
		}
		if lim != "" {
			r.Limits = v1.ResourceList{v1.ResourceCPU: resource.MustParse(lim), v1.ResourceMemory: resource.MustParse(lim + "Mi")}
		}
		return r
	}
	with := func(name string, r v1.ResourceRequirements) podOpt {
		return modify(name, func(c *v1.Container) { c.Resources = r })
	}
	tests := []struct {
		name string
		pod  *v1.Pod
		want v1.PodQOSClass
	}{
		{name: "no requests or limits -> BestEffort", pod: newPod(containers("c1", "c2")), want: v1.PodQOSBestEffort},
		{name: "only other resources -> BestEffort",
			pod:  newPod(containers("c1"), with("c1", v1.ResourceRequirements{Limits: v1.ResourceList{"example.com/gpu": resource.MustParse("1")}})),
			want: v1.PodQOSBestEffort},
		{name: "requests only -> Burstable", pod: newPod(containers("c1"), with("c1", res("1", ""))), want: v1.PodQOSBurstable},
		{name: "requests equal limits everywhere -> Guaranteed",
			pod: newPod(inits("i"), containers("c1"), with("i", res("1", "1")), with("c1", res("2", "2"))), want: v1.PodQOSGuaranteed},
		{name: "one container without limits -> Burstable",
			pod: newPod(containers("c1", "c2"), with("c1", res("1", "1"))), want: v1.PodQOSBurstable},
		{name: "requests below limits -> Burstable", pod: newPod(containers("c1"), with("c1", res("1", "2"))), want: v1.PodQOSBurstable},
		{name: "pod-level resources decide alone",
			pod: newPod(containers("c1"), func(p *v1.Pod) { r := res("1", "1"); p.Spec.Resources = &r }), want: v1.PodQOSGuaranteed},
		{name: "a published class is kept (immutable)",
			pod: newPod(containers("c1"), func(p *v1.Pod) { p.Status.QOSClass = v1.PodQOSBurstable }), want: v1.PodQOSBurstable},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := Compute(snap(tc.pod, nil)).Status.QOSClass; got != tc.want {
				t.Errorf("qosClass = %s, want %s", got, tc.want)
			}
		})
	}
}

func TestPodStatusFields(t *testing.T) {
	pod := newPod(containers("c1"), func(p *v1.Pod) {
		p.Generation = 3
		p.Status.NominatedNodeName = "n1" // not ours: kept
	})
	p := Compute(snap(pod, nil, at(t0.Add(1500*time.Millisecond))))
	st := p.Status
	if st.HostIP != "10.0.0.1" || len(st.HostIPs) != 1 || st.HostIPs[0].IP != "10.0.0.1" ||
		st.PodIP != "10.0.0.1" || len(st.PodIPs) != 1 || st.PodIPs[0].IP != "10.0.0.1" {
		t.Errorf("IPs: %+v", st)
	}
	if st.StartTime == nil || !st.StartTime.Time.Equal(t0.Add(time.Second)) {
		t.Errorf("startTime = %v, want now in whole seconds", st.StartTime)
	}
	if st.NominatedNodeName != "n1" || st.ObservedGeneration != 3 {
		t.Errorf("nominatedNodeName %q observedGeneration %d", st.NominatedNodeName, st.ObservedGeneration)
	}

	started := metav1.NewTime(t0.Add(-time.Hour))
	pod.Status.StartTime = &started
	p = Compute(snap(pod, nil, func(s *Snapshot) { s.HostIP, s.PodIP = "", "" }))
	if !p.Status.StartTime.Equal(&started) {
		t.Errorf("startTime not kept: %v", p.Status.StartTime)
	}
	if p.Status.HostIP != "" {
		t.Errorf("hostIP invented: %q", p.Status.HostIP)
	}

	// Compute does not change its input.
	before := pod.DeepCopy()
	Compute(snap(pod, recs{"c1": rec(exited("a", 0, 1))}))
	if pod.Status.Phase != before.Status.Phase || len(pod.Status.Conditions) != len(before.Status.Conditions) {
		t.Errorf("input modified")
	}
}

func TestPhaseReasonKeptWhilePhaseUnchanged(t *testing.T) {
	pod := newPod(containers("c1"), func(p *v1.Pod) { p.Status.Phase, p.Status.Reason, p.Status.Message = v1.PodRunning, "R", "M" })
	p := Compute(snap(pod, recs{"c1": rec(running("a", 0))}))
	if p.Status.Reason != "R" || p.Status.Message != "M" {
		t.Errorf("kept: %q %q", p.Status.Reason, p.Status.Message)
	}
	pod.Spec.RestartPolicy = v1.RestartPolicyNever
	p = Compute(snap(pod, recs{"c1": rec(exited("a", 0, 0))}))
	if p.Status.Phase != v1.PodSucceeded || p.Status.Reason != "" || p.Status.Message != "" {
		t.Errorf("phase change clears reason: %s %q %q", p.Status.Phase, p.Status.Reason, p.Status.Message)
	}
}
