package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/podvisor/podvisor/internal/cli/datadir"
)

// etcd snapshots, as k3s users take them: a ConfigMap saved in a snapshot
// and deleted afterwards is back once podvisor restarts from it; the
// previous etcd data is kept aside. A file that is not a snapshot is
// refused with its name and leaves etcd as it was.
func TestEtcdSnapshotSaveAndRestore(t *testing.T) {
	processRuntimeOnly(t)
	t.Parallel()
	// A schedule every 2 s, 2 kept, stands for k3s's twice a day, 5 kept.
	p := NewPodvisor(t, "--etcd-snapshot-schedule-cron", "@every 2s", "--etcd-snapshot-retention", "2")
	p.Start()
	ctx := context.Background()
	cms := p.Admin.CoreV1().ConfigMaps("default")
	if _, err := cms.Create(ctx, &v1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "precious"},
		Data: map[string]string{"k": "v"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	out, stderr, code := runPodvisor(t, 2*time.Minute, "etcd-snapshot", "save", "--data-dir", p.DataDir, "--name", "before")
	if code != 0 {
		t.Fatalf("etcd-snapshot save: exit %d: %s", code, stderr)
	}
	t.Logf("save: %s", strings.TrimSpace(out))
	snaps, _ := filepath.Glob(filepath.Join(p.DataDir, "db", "snapshots", "before-"+p.NodeName+"-*"))
	if len(snaps) != 1 {
		t.Fatalf("snapshot files %v, want one before-%s-TIME", snaps, p.NodeName)
	}
	snap := snaps[0]
	out, _, code = runPodvisor(t, time.Minute, "etcd-snapshot", "ls", "--data-dir", p.DataDir)
	if code != 0 || !strings.Contains(out, filepath.Base(snap)) {
		t.Fatalf("etcd-snapshot ls (exit %d) does not list %s:\n%s", code, filepath.Base(snap), out)
	}

	// The schedule takes its own snapshots and prunes only those.
	scheduled := func() []string {
		m, _ := filepath.Glob(filepath.Join(p.DataDir, "db", "snapshots", "etcd-snapshot-"+p.NodeName+"-*"))
		var done []string
		for _, f := range m {
			if !strings.HasSuffix(f, ".part") {
				done = append(done, f)
			}
		}
		return done
	}
	Eventually(t, time.Minute, "scheduled snapshots taken and the oldest pruned", func() (bool, error) {
		log, _ := os.ReadFile(filepath.Join(p.DataDir, "podvisor.log"))
		pruned := strings.Contains(string(log), "etcd snapshot pruned")
		return pruned && len(scheduled()) == 2, fmt.Errorf("pruned: %v, scheduled snapshots %v", pruned, scheduled())
	})
	if _, err := os.Stat(snap); err != nil {
		t.Fatalf("the on-demand snapshot went with the schedule's retention: %v", err)
	}

	// A stopped data dir whose recorded etcd port another podvisor now
	// uses: its snapshot would be the other cluster's, so save refuses.
	other := t.TempDir()
	if err := datadir.Save(other, datadir.State{Layout: datadir.Layout, NodeName: "other",
		EtcdClientPort: p.etcdPorts[0], EtcdPeerPort: p.etcdPorts[1]}); err != nil {
		t.Fatal(err)
	}
	_, stderr, code = runPodvisor(t, time.Minute, "etcd-snapshot", "save", "--data-dir", other)
	if code == 0 || !strings.Contains(stderr, "is data dir "+p.DataDir+"'s") {
		t.Errorf("save of a data dir whose etcd port another podvisor uses: exit %d, %q; want a refusal naming %s", code, stderr, p.DataDir)
	}
	if left, _ := filepath.Glob(filepath.Join(other, "db", "snapshots", "*")); len(left) != 0 {
		t.Errorf("the refused save wrote %v", left)
	}

	if err := cms.Delete(ctx, "precious", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	p.Stop()

	// Stopped: save says why it cannot, ls still works.
	_, stderr, code = runPodvisor(t, time.Minute, "etcd-snapshot", "save", "--data-dir", p.DataDir)
	if code == 0 || !strings.Contains(stderr, "podvisor is not running") {
		t.Errorf("save with podvisor stopped: exit %d, %q; want a refusal saying it is not running", code, stderr)
	}

	// Not a snapshot: refused, naming the file; etcd untouched.
	bad := filepath.Join(t.TempDir(), "not-a-snapshot.db")
	if err := os.WriteFile(bad, []byte(strings.Repeat("garbage\n", 1000)), 0o600); err != nil {
		t.Fatal(err)
	}
	etcdBefore := dirListing(t, filepath.Join(p.DataDir, "etcd", "member", "wal"))
	_, stderr, code = runPodvisor(t, 2*time.Minute, append(upArgs(p), "--cluster-reset-restore-path", bad)...)
	if code == 0 || !strings.Contains(stderr, bad) || !strings.Contains(stderr, "not an etcd snapshot") {
		t.Fatalf("up with a restore path that is no snapshot: exit %d, stderr %q; want an error naming %s", code, stderr, bad)
	}
	if after := dirListing(t, filepath.Join(p.DataDir, "etcd", "member", "wal")); after != etcdBefore {
		t.Fatalf("etcd's WAL changed after a refused restore: %s -> %s", etcdBefore, after)
	}
	if old, _ := filepath.Glob(filepath.Join(p.DataDir, "db", "etcd-old-*")); len(old) != 0 {
		t.Fatalf("a refused restore moved etcd aside: %v", old)
	}

	p.Args = append(p.Args, "--cluster-reset-restore-path", snap)
	p.Start()
	cm, err := p.Admin.CoreV1().ConfigMaps("default").Get(ctx, "precious", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("ConfigMap after the restore: %v", err)
	}
	if cm.Data["k"] != "v" {
		t.Errorf("restored ConfigMap data %v, want k=v", cm.Data)
	}
	if old, _ := filepath.Glob(filepath.Join(p.DataDir, "db", "etcd-old-*")); len(old) != 1 {
		t.Errorf("previous etcd data kept aside: %v, want one db/etcd-old-TIME", old)
	}
	// The restored cluster works: writes go through.
	if _, err := p.Admin.CoreV1().ConfigMaps("default").Create(ctx, &v1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "after"}},
		metav1.CreateOptions{}); err != nil {
		t.Fatalf("create after the restore: %v", err)
	}
	// The flag left in place (a service's unit, say) does not restore the
	// same snapshot again: what happened since stays.
	p.Stop()
	p.Start()
	if _, err := p.Admin.CoreV1().ConfigMaps("default").Get(ctx, "after", metav1.GetOptions{}); err != nil {
		t.Errorf("ConfigMap made after the restore, after a restart with the same flag: %v", err)
	}
	out, _, code = runPodvisor(t, time.Minute, "etcd-snapshot", "delete", "--data-dir", p.DataDir, filepath.Base(snap))
	if code != 0 {
		t.Errorf("etcd-snapshot delete: exit %d, %s", code, out)
	}
	if _, err := os.Stat(snap); !os.IsNotExist(err) {
		t.Errorf("snapshot %s still there after delete: %v", snap, err)
	}
}

// upArgs are the arguments Start gives podvisor up, for a run that must fail.
func upArgs(p *Podvisor) []string {
	return []string{"up", "--data-dir", p.DataDir, "--api-port", itoa(p.APIPort), "--agent-port", itoa(p.Agent),
		"--node-name", p.NodeName, "--etcd-client-port", itoa(p.etcdPorts[0]), "--etcd-peer-port", itoa(p.etcdPorts[1]),
		"--runtime", p.Runtime, "--disable-metrics-server"}
}

func dirListing(t *testing.T, dir string) string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, e := range entries {
		info, _ := e.Info()
		b.WriteString(e.Name() + ":" + itoa(int(info.Size())) + ":" + info.ModTime().String() + " ")
	}
	return b.String()
}
