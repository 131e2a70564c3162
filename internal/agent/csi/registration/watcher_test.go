package registration

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	regapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/podvisor/podvisor/internal/agent/csi/csitest"
)

type handler struct {
	fail       error
	registered []Plugin
	deregs     []string
}

func (h *handler) Register(_ context.Context, p Plugin) error {
	if h.fail != nil {
		return h.fail
	}
	h.registered = append(h.registered, p)
	return nil
}

func (h *handler) Deregister(_ context.Context, name string) { h.deregs = append(h.deregs, name) }

func newWatcher(t *testing.T, h Handler) *Watcher {
	return &Watcher{
		Dir: t.TempDir(), Handler: h, Clock: clocktesting.NewFakeClock(time.Now()),
		Interval: time.Second, CallTimeout: time.Minute,
		Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
}

func TestRegistersADriverAndTellsTheRegistrar(t *testing.T) {
	h := &handler{}
	w := newWatcher(t, h)
	socket := filepath.Join(w.Dir, "hostpath.csi.k8s.io-reg.sock")
	r := &csitest.Registrar{Info: regapi.PluginInfo{Type: regapi.CSIPlugin, Name: "hostpath.csi.k8s.io",
		Endpoint: "/var/lib/podvisor/plugins/csi-hostpath/csi.sock", SupportedVersions: []string{"1.0.0"}}}
	stop := r.Serve(t, socket)
	// Not a socket, and a hidden socket: both ignored.
	if err := os.WriteFile(filepath.Join(w.Dir, "notes.txt"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	(&csitest.Registrar{Info: regapi.PluginInfo{Type: regapi.CSIPlugin, Name: "hidden", SupportedVersions: []string{"1.0.0"}}}).Serve(t, filepath.Join(w.Dir, ".hidden.sock"))

	ctx := context.Background()
	w.Sync(ctx)
	want := []Plugin{{Name: "hostpath.csi.k8s.io", Endpoint: "/var/lib/podvisor/plugins/csi-hostpath/csi.sock", Versions: []string{"1.0.0"}}}
	if d := cmp.Diff(want, h.registered); d != "" {
		t.Fatalf("registered (-want +got):\n%s", d)
	}
	if s := r.Told(); len(s) != 1 || !s[0].PluginRegistered || s[0].Error != "" {
		t.Fatalf("registrar was told %v, want one successful status", s)
	}
	if got := w.Registered(); !cmp.Equal(got, map[string]string{socket: "hostpath.csi.k8s.io"}) {
		t.Fatalf("Registered() = %v", got)
	}

	// A second sync with nothing changed does not register again.
	w.Sync(ctx)
	if len(h.registered) != 1 || len(r.Told()) != 1 {
		t.Fatalf("unchanged socket was registered again: %v, statuses %v", h.registered, r.Told())
	}

	// The registrar goes away: the driver is deregistered.
	stop()
	w.Sync(ctx)
	if !cmp.Equal(h.deregs, []string{"hostpath.csi.k8s.io"}) {
		t.Fatalf("deregistered %v, want the driver", h.deregs)
	}
	if len(w.Registered()) != 0 {
		t.Fatalf("still registered: %v", w.Registered())
	}
}

func TestRefusedRegistrationIsReportedAndRetried(t *testing.T) {
	h := &handler{fail: errors.New("NodeGetInfo: driver not ready")}
	w := newWatcher(t, h)
	r := &csitest.Registrar{Info: regapi.PluginInfo{Type: regapi.CSIPlugin, Name: "d", SupportedVersions: []string{"1.0.0"}}}
	r.Serve(t, filepath.Join(w.Dir, "d.sock"))

	ctx := context.Background()
	w.Sync(ctx)
	s := r.Told()
	if len(s) != 1 || s[0].PluginRegistered || s[0].Error != "NodeGetInfo: driver not ready" {
		t.Fatalf("registrar was told %v, want one failure with the handler's error", s)
	}
	if len(w.Registered()) != 0 {
		t.Fatalf("a failed driver is registered: %v", w.Registered())
	}

	// Once the handler accepts it, the next sync registers it.
	h.fail = nil
	w.Sync(ctx)
	s = r.Told()
	if len(s) != 2 || !s[1].PluginRegistered {
		t.Fatalf("registrar was told %v, want a success after the retry", s)
	}
}

func TestInvalidPluginIsRefused(t *testing.T) {
	h := &handler{}
	w := newWatcher(t, h)
	r := &csitest.Registrar{Info: regapi.PluginInfo{Type: regapi.CSIPlugin, Name: "old", SupportedVersions: []string{"0.3.0"}}}
	r.Serve(t, filepath.Join(w.Dir, "old.sock"))
	w.Sync(context.Background())
	if len(h.registered) != 0 {
		t.Fatalf("a CSI 0.x driver was handed on: %v", h.registered)
	}
	if s := r.Told(); len(s) != 1 || s[0].PluginRegistered || s[0].Error == "" {
		t.Fatalf("registrar was told %v, want a failure with a reason", s)
	}
}

// Run creates the registration directory registrars write into.
func TestRunCreatesTheDirectory(t *testing.T) {
	h := &handler{}
	w := newWatcher(t, h)
	w.Dir = filepath.Join(w.Dir, "plugins_registry") // Run creates it
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- w.Run(ctx) }()
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(w.Dir); err != nil || !st.IsDir() {
		t.Fatalf("registration directory not created: %v", err)
	}
}
