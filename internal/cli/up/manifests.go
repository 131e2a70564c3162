package up

import (
	"context"
	"log/slog"
	"time"

	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/clock"

	"github.com/podvisor/podvisor/internal/cli/datadir"
	"github.com/podvisor/podvisor/internal/cluster/manifests"
)

// manifestsInterval is how often DATA_DIR/manifests is read for changes.
const manifestsInterval = 5 * time.Second

// runManifests keeps DATA_DIR/manifests applied until ctx ends.
func runManifests(ctx context.Context, dir string, log *slog.Logger) {
	rc, err := clientcmd.BuildConfigFromFlags("", datadir.AdminKubeconfig(dir))
	if err != nil {
		log.Error("manifests: admin kubeconfig", "err", err)
		return
	}
	m := &manifests.Manager{Dir: manifests.Dir(dir), Config: rc, Interval: manifestsInterval, Clock: clock.RealClock{}, Log: log}
	go func() {
		if err := m.Run(ctx); err != nil {
			log.Error("manifests stopped", "err", err)
		}
	}()
}
