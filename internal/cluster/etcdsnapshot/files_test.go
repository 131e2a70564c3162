package etcdsnapshot

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

func snap(name string, unix int64) Snapshot {
	return Snapshot{Name: name, Created: time.Unix(unix, 0)}
}

func names(ss []Snapshot) []string {
	var out []string
	for _, s := range ss {
		out = append(out, s.Name)
	}
	return out
}

// Retention keeps a node's newest scheduled snapshots, as k3s's
// --etcd-snapshot-retention: on-demand ones, other nodes' and a user's
// files are never pruned.
func TestToPrune(t *testing.T) {
	pre := ScheduledPrefix("n1")
	sched := func(unix int64) Snapshot { return snap(FileName(ScheduledName, "n1", time.Unix(unix, 0)), unix) }
	for _, tc := range []struct {
		name  string
		snaps []Snapshot
		keep  int
		want  []string
	}{
		{"none", nil, 5, nil},
		{"fewer than kept", []Snapshot{sched(1), sched(2)}, 5, nil},
		{"exactly kept", []Snapshot{sched(1), sched(2), sched(3)}, 3, nil},
		{"oldest go first", []Snapshot{sched(3), sched(1), sched(4), sched(2)}, 2,
			[]string{"etcd-snapshot-n1-2", "etcd-snapshot-n1-1"}},
		{"on-demand ones stay", []Snapshot{snap("on-demand-n1-1", 1), sched(2), sched(3)}, 1,
			[]string{"etcd-snapshot-n1-2"}},
		{"other nodes' stay", []Snapshot{snap("etcd-snapshot-n2-1", 1), sched(2), sched(3)}, 1,
			[]string{"etcd-snapshot-n1-2"}},
		{"a node whose name extends another's is not it", []Snapshot{snap("etcd-snapshot-n1x-1", 1), sched(2)}, 1, nil},
		{"retention 0 keeps all", []Snapshot{sched(1), sched(2)}, 0, nil},
		{"same second: name breaks the tie", []Snapshot{snap(pre+"5", 5), snap(pre+"5b", 5)}, 1, []string{pre + "5"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := names(ToPrune(tc.snaps, pre, tc.keep)); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("ToPrune(keep %d) = %v, want %v", tc.keep, got, tc.want)
			}
		})
	}
}

func TestListOrdersByTheTimeInTheName(t *testing.T) {
	dd := t.TempDir()
	os.MkdirAll(Dir(dd), 0o700)
	for _, n := range []string{"on-demand-n-300", "etcd-snapshot-n-100", "etcd-snapshot-n-200.part", ".hidden"} {
		if err := os.WriteFile(filepath.Join(Dir(dd), n), []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	got, err := List(dd)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"etcd-snapshot-n-100", "on-demand-n-300"}; !reflect.DeepEqual(names(got), want) {
		t.Errorf("List = %v, want %v", names(got), want)
	}
	if got[0].Created.Unix() != 100 {
		t.Errorf("created %v, want unix 100", got[0].Created)
	}
}

func TestDeleteRefusesPathsAndNamesAMissingSnapshot(t *testing.T) {
	dd := t.TempDir()
	if err := Delete(dd, "../podvisor.json"); err == nil {
		t.Error("Delete of a path outside the snapshot dir succeeded")
	}
	if err := Delete(dd, "nope"); err == nil {
		t.Error("Delete of a missing snapshot succeeded")
	}
}

// A file that is not a snapshot is refused with its name, and the etcd
// data dir is left as it was.
func TestRestoreOfANonSnapshotChangesNothing(t *testing.T) {
	dd := t.TempDir()
	etcd := filepath.Join(dd, "etcd")
	os.MkdirAll(filepath.Join(etcd, "member"), 0o700)
	os.WriteFile(filepath.Join(etcd, "member", "marker"), []byte("old"), 0o600)
	bad := filepath.Join(dd, "notes.txt")
	os.WriteFile(bad, []byte("this is not a snapshot\n"), 0o600)
	for _, file := range []string{bad, filepath.Join(dd, "missing"), dd} {
		_, err := Restore(Member{Name: "podvisor", PeerURL: "http://127.0.0.1:2380", Token: "etcd-cluster",
			EtcdDir: etcd, DataDir: dd, Snapshot: file}, time.Unix(1000, 0))
		if err == nil {
			t.Fatalf("Restore(%s) succeeded", file)
		}
		if !strings.Contains(err.Error(), file) {
			t.Errorf("error %q does not name %s", err, file)
		}
		if b, _ := os.ReadFile(filepath.Join(etcd, "member", "marker")); string(b) != "old" {
			t.Fatalf("etcd dir changed after Restore(%s)", file)
		}
		if e, _ := os.ReadDir(filepath.Join(dd, "db")); len(e) != 0 {
			t.Errorf("Restore(%s) left %v in db/", file, e)
		}
	}
}

type fakeInfo struct {
	os.FileInfo
	size int64
	mod  time.Time
}

func (f fakeInfo) Size() int64        { return f.size }
func (f fakeInfo) ModTime() time.Time { return f.mod }

// A restore flag left in place restores only once: the same file (path,
// size, modification time) is not restored again.
func TestSameFile(t *testing.T) {
	mod := time.Unix(500, 0)
	last := Restored{Snapshot: "/s/a", Size: 10, ModTime: mod}
	for _, tc := range []struct {
		name string
		path string
		info fakeInfo
		want bool
	}{
		{"same", "/s/a", fakeInfo{size: 10, mod: mod}, true},
		{"other path", "/s/b", fakeInfo{size: 10, mod: mod}, false},
		{"rewritten: size", "/s/a", fakeInfo{size: 11, mod: mod}, false},
		{"rewritten: time", "/s/a", fakeInfo{size: 10, mod: mod.Add(time.Second)}, false},
	} {
		if got := SameFile(last, tc.path, tc.info); got != tc.want {
			t.Errorf("%s: SameFile = %v, want %v", tc.name, got, tc.want)
		}
	}
}
