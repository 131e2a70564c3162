package registration

import (
	"context"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	regapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
	"k8s.io/utils/clock"
)

// DirName is the registration directory under the agent's root, as the
// kubelet's (/var/lib/kubelet/plugins_registry); registrars are told it
// with --kubelet-registration-path's sibling flag.
const DirName = "plugins_registry"

// Handler takes validated drivers. Register is called for a new or
// re-created socket and must be safe to call again for the same driver
// (the registrar restarted); its error is reported to the registrar and
// the socket is tried again on the next sync. Deregister is called when
// the socket goes away.
type Handler interface {
	Register(ctx context.Context, p Plugin) error
	Deregister(ctx context.Context, name string)
}

// Watcher scans the registration directory and registers what it finds.
// Its state is owned by the goroutine calling Sync (Run's).
type Watcher struct {
	Dir     string
	Handler Handler
	Clock   clock.WithTicker
	// Interval between scans; the kubelet's reconciler also runs every
	// second.
	Interval time.Duration
	// CallTimeout bounds each call to a registrar.
	CallTimeout time.Duration
	Log         *slog.Logger

	registered map[string]Registered
}

// Run creates the directory and syncs it every Interval until ctx ends.
func (w *Watcher) Run(ctx context.Context) error {
	if err := os.MkdirAll(w.Dir, 0o750); err != nil {
		return fmt.Errorf("plugin registration directory: %w", err)
	}
	t := w.Clock.NewTicker(w.Interval)
	defer t.Stop()
	for {
		w.Sync(ctx)
		select {
		case <-ctx.Done():
			return nil
		case <-t.C():
		}
	}
}

// Sync scans the directory once and registers and deregisters drivers as
// Plan says.
func (w *Watcher) Sync(ctx context.Context) {
	if w.registered == nil {
		w.registered = map[string]Registered{}
	}
	found, err := scan(w.Dir)
	if err != nil {
		w.Log.Warn("scanning plugin registration directory", "dir", w.Dir, "err", err)
		return
	}
	register, deregister := Plan(found, w.registered)
	for _, path := range deregister {
		name := w.registered[path].Name
		delete(w.registered, path)
		w.Log.Info("CSI driver deregistered", "driver", name, "socket", path)
		w.Handler.Deregister(ctx, name)
	}
	for _, s := range register {
		name, err := w.register(ctx, s.Path)
		if err != nil {
			w.Log.Warn("CSI driver registration failed", "socket", s.Path, "driver", name, "err", err)
			continue
		}
		w.registered[s.Path] = Registered{ID: s.ID, Name: name}
		w.Log.Info("CSI driver registered", "driver", name, "socket", s.Path)
	}
}

// Registered returns the driver names registered, by socket path.
func (w *Watcher) Registered() map[string]string {
	out := make(map[string]string, len(w.registered))
	for p, r := range w.registered {
		out[p] = r.Name
	}
	return out
}

// register asks the registrar who it is, hands the driver to the handler
// and tells the registrar the outcome.
func (w *Watcher) register(ctx context.Context, socket string) (string, error) {
	conn, err := grpc.NewClient("unix://"+socket,
		grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithAuthority("localhost"))
	if err != nil {
		return "", err
	}
	defer conn.Close()
	client := regapi.NewRegistrationClient(conn)

	callCtx, cancel := context.WithTimeout(ctx, w.CallTimeout)
	info, err := client.GetInfo(callCtx, &regapi.InfoRequest{})
	cancel()
	if err != nil {
		return "", fmt.Errorf("GetInfo: %w", err)
	}
	plugin, err := Validate(info, socket)
	if err == nil {
		err = w.Handler.Register(ctx, plugin)
	}
	status := &regapi.RegistrationStatus{PluginRegistered: err == nil}
	if err != nil {
		status.Error = err.Error()
	}
	callCtx, cancel = context.WithTimeout(ctx, w.CallTimeout)
	_, notifyErr := client.NotifyRegistrationStatus(callCtx, status)
	cancel()
	if err != nil {
		return info.GetName(), err
	}
	if notifyErr != nil {
		// The driver is registered on our side; a registrar that missed the
		// news only logs it, as upstream.
		w.Log.Warn("NotifyRegistrationStatus failed", "driver", plugin.Name, "err", notifyErr)
	}
	return plugin.Name, nil
}

// scan lists the sockets under dir (subdirectories too, as the kubelet's
// watcher), skipping names that begin with a dot.
func scan(dir string) ([]Socket, error) {
	var out []Socket
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			if path == dir {
				return err
			}
			return nil // a file that went away while we walked
		}
		if path != dir && strings.HasPrefix(d.Name(), ".") {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if d.Type()&fs.ModeSocket == 0 {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return nil
		}
		out = append(out, Socket{Path: path, ID: socketID(info)})
		return nil
	})
	return out, err
}

// socketID tells a re-created socket from the old one: a new inode or
// modification time.
func socketID(info fs.FileInfo) string {
	if st, ok := info.Sys().(*syscall.Stat_t); ok {
		return fmt.Sprintf("%d-%d", st.Ino, info.ModTime().UnixNano())
	}
	return fmt.Sprint(info.ModTime().UnixNano())
}
