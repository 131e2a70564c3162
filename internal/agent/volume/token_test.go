package volume

import (
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
)

// A projected token is requested again at 80 % of its lifetime, or after
// 24 h whatever its lifetime, as the kubelet's token manager.
func TestCachedTokenIsStaleAt80PercentOrADay(t *testing.T) {
	issued := time.Date(2026, 11, 28, 0, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name  string
		life  time.Duration
		age   time.Duration
		stale bool
	}{
		{"fresh", time.Hour, 47 * time.Minute, false},
		{"at 80 %", time.Hour, 48 * time.Minute, false},
		{"past 80 %", time.Hour, 48*time.Minute + time.Second, true},
		{"a week's token, within a day", 7 * 24 * time.Hour, 23 * time.Hour, false},
		{"a week's token, past a day", 7 * 24 * time.Hour, 24*time.Hour + time.Second, true},
	} {
		tok := cachedToken{issued: issued, expiresAt: issued.Add(tc.life)}
		if got := tok.stale(issued.Add(tc.age)); got != tc.stale {
			t.Errorf("%s: stale %v, want %v", tc.name, got, tc.stale)
		}
	}
}

// A projected token's file belongs to the user every container runs as when
// they all run as the same non-root user (upstream's FsUser), else to root.
func TestSharedNonRootUser(t *testing.T) {
	c := func(uid *int64) v1.Container {
		if uid == nil {
			return v1.Container{Name: "c"}
		}
		return v1.Container{Name: "c", SecurityContext: &v1.SecurityContext{RunAsUser: uid}}
	}
	for _, tc := range []struct {
		name       string
		podUser    *int64
		init, main []v1.Container
		uid        int64
		ok         bool
	}{
		{"no users", nil, nil, []v1.Container{c(nil)}, 0, false},
		{"the pod's user", ptr.To[int64](1000), nil, []v1.Container{c(nil), c(nil)}, 1000, true},
		{"containers agree", nil, []v1.Container{c(ptr.To[int64](7))}, []v1.Container{c(ptr.To[int64](7))}, 7, true},
		{"containers differ", nil, nil, []v1.Container{c(ptr.To[int64](7)), c(ptr.To[int64](8))}, 0, false},
		{"one without a user", nil, nil, []v1.Container{c(ptr.To[int64](7)), c(nil)}, 0, false},
		{"root", ptr.To[int64](0), nil, []v1.Container{c(nil)}, 0, false},
		{"a container overrides the pod", ptr.To[int64](1000), []v1.Container{c(ptr.To[int64](0))}, []v1.Container{c(nil)}, 0, false},
	} {
		pod := &v1.Pod{Spec: v1.PodSpec{InitContainers: tc.init, Containers: tc.main}}
		if tc.podUser != nil {
			pod.Spec.SecurityContext = &v1.PodSecurityContext{RunAsUser: tc.podUser}
		}
		if uid, ok := sharedNonRootUser(pod); uid != tc.uid || ok != tc.ok {
			t.Errorf("%s: %d %v, want %d %v", tc.name, uid, ok, tc.uid, tc.ok)
		}
	}
}
