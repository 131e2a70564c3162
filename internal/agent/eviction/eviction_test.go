package eviction

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8stypes "k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
)

const mi = 1 << 20

func mustParse(t *testing.T, hard, soft, grace, reclaim map[string]string) []Threshold {
	t.Helper()
	ts, err := ParseThresholds(hard, soft, grace, reclaim)
	if err != nil {
		t.Fatal(err)
	}
	return ts
}

func TestParseThresholdsUpstreamRules(t *testing.T) {
	for _, tc := range []struct {
		name                    string
		hard, soft, grace, recl map[string]string
		want                    int
		err                     string
	}{
		{name: "defaults", hard: DefaultHard, want: 5},
		{name: "0% disables", hard: map[string]string{"nodefs.available": "0%", "memory.available": "1Mi"}, want: 1},
		{name: "soft needs a grace period", soft: map[string]string{"memory.available": "1Gi"}, err: "grace period must be specified for the soft eviction threshold memory.available"},
		{name: "unknown signal", hard: map[string]string{"cpu.available": "1"}, err: "unsupported eviction signal cpu.available"},
		{name: "zero quantity", hard: map[string]string{"memory.available": "0"}, err: "eviction threshold memory.available must be positive: 0"},
		{name: "over 100%", hard: map[string]string{"nodefs.available": "101%"}, err: "must be <= 100%"},
		{name: "soft with grace", soft: map[string]string{"memory.available": "1Gi"}, grace: map[string]string{"memory.available": "30s"}, want: 1},
		{name: "negative reclaim", hard: map[string]string{"memory.available": "1Mi"}, recl: map[string]string{"memory.available": "-1Mi"}, err: "negative eviction minimum reclaim specified for memory.available"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ts, err := ParseThresholds(tc.hard, tc.soft, tc.grace, tc.recl)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil || len(ts) != tc.want {
				t.Fatalf("got %d thresholds, err %v; want %d", len(ts), err, tc.want)
			}
		})
	}
}

func TestDecideHardThresholdActsAtOnce(t *testing.T) {
	s := Settings{Thresholds: mustParse(t, map[string]string{"memory.available": "100Mi"}, nil, nil, nil), PressureTransitionPeriod: 5 * time.Minute}
	now := time.Unix(1000, 0)
	_, d := Decide(s, State{}, Observations{MemoryAvailable: {Available: 50 * mi, Capacity: 1000 * mi}}, now)
	if d.Reclaim == nil || d.Resource != v1.ResourceMemory || len(d.Conditions) != 1 || d.Conditions[0] != v1.NodeMemoryPressure {
		t.Fatalf("decision = %+v", d)
	}
	_, d = Decide(s, State{}, Observations{MemoryAvailable: {Available: 150 * mi, Capacity: 1000 * mi}}, now)
	if d.Reclaim != nil || len(d.Conditions) != 0 {
		t.Fatalf("no pressure expected: %+v", d)
	}
}

func TestDecidePercentageOfCapacity(t *testing.T) {
	s := Settings{Thresholds: mustParse(t, map[string]string{"nodefs.available": "10%"}, nil, nil, nil), PressureTransitionPeriod: time.Minute}
	now := time.Unix(1000, 0)
	if _, d := Decide(s, State{}, Observations{NodeFsAvailable: {Available: 99, Capacity: 1000}}, now); d.Reclaim == nil || d.Conditions[0] != v1.NodeDiskPressure {
		t.Fatalf("99 of 1000 is under 10%%: %+v", d)
	}
	if _, d := Decide(s, State{}, Observations{NodeFsAvailable: {Available: 100, Capacity: 1000}}, now); d.Reclaim != nil {
		t.Fatalf("100 of 1000 is not under 10%%: %+v", d)
	}
}

func TestDecideSoftThresholdWaitsForGracePeriod(t *testing.T) {
	s := Settings{Thresholds: mustParse(t, nil, map[string]string{"pid.available": "100"}, map[string]string{"pid.available": "30s"}, nil), PressureTransitionPeriod: time.Minute}
	obs := Observations{PIDAvailable: {Available: 10, Capacity: 1000}}
	t0 := time.Unix(1000, 0)
	st, d := Decide(s, State{}, obs, t0)
	if d.Reclaim != nil || len(d.Conditions) != 1 || d.Conditions[0] != v1.NodePIDPressure {
		t.Fatalf("condition at once, eviction not yet: %+v", d)
	}
	st, d = Decide(s, st, obs, t0.Add(29*time.Second))
	if d.Reclaim != nil {
		t.Fatal("evicted before the grace period")
	}
	_, d = Decide(s, st, obs, t0.Add(30*time.Second))
	if d.Reclaim == nil || d.Resource != resourcePids {
		t.Fatalf("grace period over: %+v", d)
	}
	// A threshold that stops being met restarts its grace period.
	st, _ = Decide(s, st, Observations{PIDAvailable: {Available: 500, Capacity: 1000}}, t0.Add(31*time.Second))
	if _, d = Decide(s, st, obs, t0.Add(32*time.Second)); d.Reclaim != nil {
		t.Fatal("grace period restarted")
	}
}

func TestDecideTransitionPeriodKeepsCondition(t *testing.T) {
	s := Settings{Thresholds: mustParse(t, map[string]string{"memory.available": "100Mi"}, nil, nil, nil), PressureTransitionPeriod: 5 * time.Minute}
	t0 := time.Unix(1000, 0)
	st, _ := Decide(s, State{}, Observations{MemoryAvailable: {Available: 50 * mi, Capacity: 1000 * mi}}, t0)
	ok := Observations{MemoryAvailable: {Available: 500 * mi, Capacity: 1000 * mi}}
	st, d := Decide(s, st, ok, t0.Add(4*time.Minute+59*time.Second))
	if len(d.Conditions) != 1 || d.Reclaim != nil {
		t.Fatalf("condition stays for the transition period, nothing to evict: %+v", d)
	}
	if _, d = Decide(s, st, ok, t0.Add(5*time.Minute)); len(d.Conditions) != 0 {
		t.Fatalf("condition off after the transition period: %+v", d)
	}
}

func TestDecideMinimumReclaimKeepsThresholdUntilReclaimed(t *testing.T) {
	s := Settings{Thresholds: mustParse(t, map[string]string{"memory.available": "100Mi"}, nil, nil, map[string]string{"memory.available": "50Mi"}), PressureTransitionPeriod: time.Minute}
	t0 := time.Unix(1000, 0)
	st, _ := Decide(s, State{}, Observations{MemoryAvailable: {Available: 90 * mi, Capacity: 1000 * mi}}, t0)
	st, d := Decide(s, st, Observations{MemoryAvailable: {Available: 120 * mi, Capacity: 1000 * mi}}, t0.Add(time.Second))
	if d.Reclaim == nil {
		t.Fatal("120Mi is below 100Mi + 50Mi reclaim: still evicting")
	}
	if _, d = Decide(s, st, Observations{MemoryAvailable: {Available: 151 * mi, Capacity: 1000 * mi}}, t0.Add(2*time.Second)); d.Reclaim != nil {
		t.Fatal("reclaimed past the minimum")
	}
}

func TestDecideMemoryBeforeDisk(t *testing.T) {
	s := Settings{Thresholds: mustParse(t, map[string]string{"memory.available": "100Mi", "nodefs.available": "10%"}, nil, nil, nil), PressureTransitionPeriod: time.Minute}
	_, d := Decide(s, State{}, Observations{MemoryAvailable: {Available: mi, Capacity: 1000 * mi}, NodeFsAvailable: {Available: 1, Capacity: 1000}}, time.Unix(1, 0))
	if d.Reclaim.Signal != MemoryAvailable || len(d.Conditions) != 2 {
		t.Fatalf("decision = %+v", d)
	}
}

func TestPodGrace(t *testing.T) {
	hard := Threshold{Signal: MemoryAvailable}
	soft := Threshold{Signal: MemoryAvailable, GracePeriod: time.Minute}
	s := Settings{MaxPodGracePeriodSeconds: 20}
	pod := &v1.Pod{Spec: v1.PodSpec{TerminationGracePeriodSeconds: ptr.To[int64](30)}}
	short := &v1.Pod{Spec: v1.PodSpec{TerminationGracePeriodSeconds: ptr.To[int64](5)}}
	if g := PodGrace(s, hard, pod); g != 1 {
		t.Errorf("hard: %d, want 1", g)
	}
	if g := PodGrace(s, soft, pod); g != 20 {
		t.Errorf("soft: %d, want evictionMaxPodGracePeriod 20", g)
	}
	if g := PodGrace(s, soft, short); g != 5 {
		t.Errorf("soft, short pod grace: %d, want 5", g)
	}
}

func pod(name string, prio int32, memRequest string, storageRequest string) *v1.Pod {
	p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, UID: k8stypes.UID("uid-" + name)}, Spec: v1.PodSpec{Priority: &prio,
		Containers: []v1.Container{{Name: "c", Resources: v1.ResourceRequirements{Requests: v1.ResourceList{}}}}}}
	if memRequest != "" {
		p.Spec.Containers[0].Resources.Requests[v1.ResourceMemory] = resource.MustParse(memRequest)
	}
	if storageRequest != "" {
		p.Spec.Containers[0].Resources.Requests[v1.ResourceEphemeralStorage] = resource.MustParse(storageRequest)
	}
	return p
}

func names(pods []*v1.Pod) string {
	var out []string
	for _, p := range pods {
		out = append(out, p.Name)
	}
	return strings.Join(out, ",")
}

func TestRankMemoryExceedsRequestsThenPriorityThenUsage(t *testing.T) {
	stats := map[string]PodStats{
		"within":       {Containers: []ContainerStats{{Name: "c", MemoryWorkingSet: 50 * mi}}},
		"over-high":    {Containers: []ContainerStats{{Name: "c", MemoryWorkingSet: 20 * mi}}},
		"over-low":     {Containers: []ContainerStats{{Name: "c", MemoryWorkingSet: 20 * mi}}},
		"over-low-big": {Containers: []ContainerStats{{Name: "c", MemoryWorkingSet: 80 * mi}}},
	}
	pods := []*v1.Pod{pod("within", 0, "100Mi", ""), pod("over-high", 10, "10Mi", ""), pod("over-low", 0, "10Mi", ""), pod("over-low-big", 0, "10Mi", ""), pod("nostats", 1000, "", "")}
	Rank(MemoryAvailable, pods, func(p *v1.Pod) (PodStats, bool) { s, ok := stats[p.Name]; return s, ok })
	if got, want := names(pods), "nostats,over-low-big,over-low,over-high,within"; got != want {
		t.Fatalf("order %s, want %s", got, want)
	}
}

func TestRankPIDsPriorityThenProcesses(t *testing.T) {
	stats := map[string]PodStats{"many": {Processes: 100}, "few": {Processes: 2}, "many-high": {Processes: 500}}
	pods := []*v1.Pod{pod("few", 0, "", ""), pod("many-high", 5, "", ""), pod("many", 0, "", "")}
	Rank(PIDAvailable, pods, func(p *v1.Pod) (PodStats, bool) { s, ok := stats[p.Name]; return s, ok })
	if got, want := names(pods), "many,few,many-high"; got != want {
		t.Fatalf("order %s, want %s", got, want)
	}
}

func TestRankDiskCountsLogsWritableDirsAndLocalVolumes(t *testing.T) {
	withVol := pod("volume", 0, "", "10Mi")
	withVol.Spec.Volumes = []v1.Volume{{Name: "scratch", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}}}
	stats := map[string]PodStats{
		"volume": {Containers: []ContainerStats{{Name: "c", LogsBytes: mi}}, Volumes: []VolumeStats{{Name: "scratch", Bytes: 50 * mi}}},
		"logs":   {Containers: []ContainerStats{{Name: "c", LogsBytes: 20 * mi, RootfsBytes: 5 * mi}}},
		"small":  {Containers: []ContainerStats{{Name: "c", LogsBytes: mi}}},
	}
	pods := []*v1.Pod{pod("small", 0, "", "10Mi"), pod("logs", 0, "", "10Mi"), withVol}
	Rank(NodeFsAvailable, pods, func(p *v1.Pod) (PodStats, bool) { s, ok := stats[p.Name]; return s, ok })
	if got, want := names(pods), "volume,logs,small"; got != want {
		t.Fatalf("order %s, want %s", got, want)
	}
}

func TestMessageNodePressureAsUpstream(t *testing.T) {
	s := Settings{Thresholds: mustParse(t, map[string]string{"memory.available": "100Mi"}, nil, nil, nil), PressureTransitionPeriod: time.Minute}
	obs := Observations{MemoryAvailable: {Available: 50 * mi, Capacity: 1000 * mi}}
	_, d := Decide(s, State{}, obs, time.Unix(1, 0))
	p := pod("p", 0, "", "")
	msg, ann := Message(d, obs, p, func(*v1.Pod) (PodStats, bool) {
		return PodStats{Containers: []ContainerStats{{Name: "c", MemoryWorkingSet: 80 * mi}}}, true
	})
	want := "The node was low on resource: memory. Threshold quantity: 100Mi, available: 50Mi. Container c was using 80Mi, request is 0, has larger consumption of memory. "
	if msg != want {
		t.Fatalf("message\n%q\nwant\n%q", msg, want)
	}
	if ann["offending_containers"] != "c" || ann["starved_resource"] != "memory" {
		t.Fatalf("annotations %v", ann)
	}
}

func TestMessagePIDsHasNoContainerPart(t *testing.T) {
	s := Settings{Thresholds: mustParse(t, map[string]string{"pid.available": "1000"}, nil, nil, nil), PressureTransitionPeriod: time.Minute}
	obs := Observations{PIDAvailable: {Available: 900, Capacity: 32768}}
	_, d := Decide(s, State{}, obs, time.Unix(1, 0))
	msg, _ := Message(d, obs, pod("p", 0, "", ""), func(*v1.Pod) (PodStats, bool) { return PodStats{Processes: 10}, true })
	if want := "The node was low on resource: pids. Threshold quantity: 1k, available: 900. "; msg != want {
		t.Fatalf("message %q, want %q", msg, want)
	}
}

func TestLocalStorageLimits(t *testing.T) {
	lim := resource.MustParse("1Mi")
	emptyDir := &v1.Pod{Spec: v1.PodSpec{Containers: []v1.Container{{Name: "c"}},
		Volumes: []v1.Volume{{Name: "x", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{SizeLimit: &lim}}}}}}
	container := &v1.Pod{Spec: v1.PodSpec{Containers: []v1.Container{
		{Name: "a"},
		{Name: "c", Resources: v1.ResourceRequirements{Limits: v1.ResourceList{v1.ResourceEphemeralStorage: lim}}}}}}
	podLevel := &v1.Pod{Spec: v1.PodSpec{
		Volumes:    []v1.Volume{{Name: "v", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}}},
		Containers: []v1.Container{{Name: "c", Resources: v1.ResourceRequirements{Limits: v1.ResourceList{v1.ResourceEphemeralStorage: lim}}}}}}
	for _, tc := range []struct {
		name string
		pod  *v1.Pod
		st   PodStats
		want string
	}{
		{"emptyDir over sizeLimit", emptyDir, PodStats{Volumes: []VolumeStats{{Name: "x", Bytes: 2 * mi}}}, `Usage of EmptyDir volume "x" exceeds the limit "1Mi". `},
		{"emptyDir at sizeLimit", emptyDir, PodStats{Volumes: []VolumeStats{{Name: "x", Bytes: mi}}}, ""},
		{"container over its limit", container, PodStats{Containers: []ContainerStats{{Name: "a", LogsBytes: 5 * mi}, {Name: "c", LogsBytes: mi / 2, RootfsBytes: mi}}}, `Pod ephemeral local storage usage exceeds the total limit of containers 1Mi. `},
		{"container over, other without limit", container, PodStats{Containers: []ContainerStats{{Name: "c", RootfsBytes: 2 * mi}}}, `Pod ephemeral local storage usage exceeds the total limit of containers 1Mi. `},
		{"pod over with an emptyDir", podLevel, PodStats{Containers: []ContainerStats{{Name: "c", LogsBytes: 1}}, Volumes: []VolumeStats{{Name: "v", Bytes: 2 * mi}}}, `Pod ephemeral local storage usage exceeds the total limit of containers 1Mi. `},
		{"within", container, PodStats{Containers: []ContainerStats{{Name: "c", RootfsBytes: mi / 2}}}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := LocalStorage(tc.pod, tc.st); got != tc.want {
				t.Fatalf("got %q, want %q", got, tc.want)
			}
		})
	}
}

func TestLocalStorageContainerMessage(t *testing.T) {
	lim := resource.MustParse("1Mi")
	// Two containers with limits: the pod limit is their sum, so one container
	// over its own limit is caught by the container rule.
	p := &v1.Pod{Spec: v1.PodSpec{Containers: []v1.Container{
		{Name: "a", Resources: v1.ResourceRequirements{Limits: v1.ResourceList{v1.ResourceEphemeralStorage: resource.MustParse("10Mi")}}},
		{Name: "c", Resources: v1.ResourceRequirements{Limits: v1.ResourceList{v1.ResourceEphemeralStorage: lim}}}}}}
	got := LocalStorage(p, PodStats{Containers: []ContainerStats{{Name: "a"}, {Name: "c", LogsBytes: mi, RootfsBytes: mi}}})
	if want := `Container c exceeded its local ephemeral storage limit "1Mi". `; got != want {
		t.Fatalf("got %q, want %q", got, want)
	}
}

func TestAdmitUnderPressure(t *testing.T) {
	crit := pod("crit", systemCriticalPriority, "", "")
	tolerant := pod("tolerant", 0, "", "")
	tolerant.Spec.Tolerations = []v1.Toleration{{Key: v1.TaintNodeMemoryPressure, Operator: v1.TolerationOpExists, Effect: v1.TaintEffectNoSchedule}}
	mem := []v1.NodeConditionType{v1.NodeMemoryPressure}
	disk := []v1.NodeConditionType{v1.NodeDiskPressure}
	for _, tc := range []struct {
		name  string
		conds []v1.NodeConditionType
		pod   *v1.Pod
		qos   v1.PodQOSClass
		want  string
	}{
		{"no pressure", nil, pod("p", 0, "", ""), v1.PodQOSBestEffort, ""},
		{"memory pressure refuses BestEffort", mem, pod("p", 0, "", ""), v1.PodQOSBestEffort, "The node had condition: [MemoryPressure]. "},
		{"memory pressure admits Burstable", mem, pod("p", 0, "1Mi", ""), v1.PodQOSBurstable, ""},
		{"memory pressure admits a tolerating BestEffort", mem, tolerant, v1.PodQOSBestEffort, ""},
		{"disk pressure refuses all", disk, pod("p", 0, "1Mi", ""), v1.PodQOSGuaranteed, "The node had condition: [DiskPressure]. "},
		{"two conditions", []v1.NodeConditionType{v1.NodeMemoryPressure, v1.NodePIDPressure}, tolerant, v1.PodQOSBestEffort, "The node had condition: [MemoryPressure PIDPressure]. "},
		{"critical always admitted", disk, crit, v1.PodQOSBestEffort, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			msg, ok := Admit(tc.conds, tc.pod, tc.qos)
			if ok != (tc.want == "") || msg != tc.want {
				t.Fatalf("got %q %v, want %q", msg, ok, tc.want)
			}
		})
	}
}

// The node's CPU time comes from the root cgroup, wherever the machine
// mounts cpuacct (its own hierarchy, co-mounted with cpu, or v2).
func TestHostCPUTime(t *testing.T) {
	for _, tt := range []struct {
		name, file, body string
		want             uint64
	}{
		{"v1 cpuacct alone", "cpuacct/cpuacct.usage", "42000\n", 42000},
		{"v1 co-mounted", "cpu,cpuacct/cpuacct.usage", "43000\n", 43000},
		{"v2", "cpu.stat", "usage_usec 44\nuser_usec 40\n", 44000},
	} {
		t.Run(tt.name, func(t *testing.T) {
			root := t.TempDir()
			path := filepath.Join(root, tt.file)
			if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, []byte(tt.body), 0o644); err != nil {
				t.Fatal(err)
			}
			u := Host{CgroupRoot: root}.Usage()
			if !u.CPUOK || u.CPUUsageCoreNanoSeconds != tt.want {
				t.Errorf("CPU = %d %v, want %d", u.CPUUsageCoreNanoSeconds, u.CPUOK, tt.want)
			}
		})
	}
	if u := (Host{CgroupRoot: t.TempDir()}).Usage(); u.CPUOK {
		t.Errorf("CPU read from nothing: %+v", u)
	}
}
