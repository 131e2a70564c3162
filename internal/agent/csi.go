package agent

import (
	"context"
	"os"
	"path/filepath"
	"time"

	"k8s.io/utils/clock"

	"github.com/podvisor/podvisor/internal/agent/csi/csinode"
	"github.com/podvisor/podvisor/internal/agent/csi/drivers"
	"github.com/podvisor/podvisor/internal/agent/csi/registration"
)

// CSI drivers register as with the kubelet: a driver's registrar
// (node-driver-registrar, --kubelet-registration-path) puts its socket into
// <data dir>/agent/plugins_registry, the equivalent of
// /var/lib/kubelet/plugins_registry; the agent directory is the kubelet's
// root, so volumes are staged under <data dir>/agent/plugins/kubernetes.io/csi.

// csi is the node's CSI driver registry and the watcher that fills it.
type csi struct {
	registry *drivers.Registry
	watcher  *registration.Watcher
	csinode  csinode.Writer
}

func (a *Agent) newCSI() error {
	w := csinode.Writer{Client: a.client, NodeName: a.cfg.NodeName}
	reg := &drivers.Registry{CSINode: w, CallTimeout: 30 * time.Second, Log: a.cfg.Log}
	a.csi = &csi{
		registry: reg,
		csinode:  w,
		watcher: &registration.Watcher{
			Dir: filepath.Join(a.agentDir, registration.DirName), Handler: reg,
			Clock: clock.RealClock{}, Interval: time.Second, CallTimeout: 10 * time.Second, Log: a.cfg.Log,
		},
	}
	return nil
}

// start registers the drivers whose sockets are already there (a restarted
// agent's: their pods still run) before the workers start, so that the
// volumes of pods deleted while the agent was down can be torn down by
// their driver at once; then it makes the node's CSINode (the kubelet
// makes it at start, drivers or not: the scheduler reads it) and watches
// for drivers until ctx ends.
func (c *csi) start(ctx context.Context, log func(msg string, args ...any)) {
	if err := os.MkdirAll(c.watcher.Dir, 0o750); err != nil {
		log("CSI plugin registration directory", "err", err)
	} else {
		c.watcher.Sync(ctx)
	}
	go c.run(ctx, log)
}

func (c *csi) run(ctx context.Context, log func(msg string, args ...any)) {
	for delay := time.Second; ; delay = min(2*delay, 30*time.Second) {
		if _, err := c.csinode.Ensure(ctx); err == nil {
			break
		} else {
			log("CSINode not written yet", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(delay):
		}
	}
	if err := c.watcher.Run(ctx); err != nil {
		log("CSI plugin registration stopped", "err", err)
	}
	c.registry.Close()
}
