package cri

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/podvisor/podvisor/internal/runtime"
)

func TestNewWithoutARuntimeIsUnavailableAtOnce(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	begin := time.Now()
	_, err := New(ctx, Config{Endpoint: filepath.Join(t.TempDir(), "nobody.sock"), StateDir: t.TempDir()})
	if !runtime.IsUnavailable(err) {
		t.Errorf("New on a socket nobody serves: %v, want ErrUnavailable", err)
	}
	if d := time.Since(begin); d > 10*time.Second {
		t.Errorf("New took %v to give up", d)
	}
}

func TestNewRefusesAnIncompleteConfig(t *testing.T) {
	for _, cfg := range []Config{{StateDir: t.TempDir()}, {Endpoint: "/run/x.sock"}} {
		if _, err := New(context.Background(), cfg); err == nil {
			t.Errorf("New(%+v) succeeded", cfg)
		}
	}
}

func TestFakeRuntimeInfoAndFeatures(t *testing.T) {
	r, _ := fakeRuntime(t, time.Hour)
	set := r.Set()
	if info := set.Info; info != (runtime.Info{Name: "fake", Version: "1.0"}) {
		t.Errorf("info %+v, want the runtime's name and version without its v", info)
	}
	if f := set.Features; !f.PodNetwork || !f.Mounts || !f.Limits || !f.Users || !f.Security {
		t.Errorf("features %+v, want all", f)
	}
	if err := set.Check(); err != nil || set.Images == nil || set.Streams == nil || set.Logs == nil {
		t.Errorf("set %+v (%v), want every concern", set, err)
	}
}
