package clusterdns

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

func TestMerge(t *testing.T) {
	tests := []struct {
		name        string
		cm, files   map[string]string
		want        Custom
		wantIgnored []string
	}{
		{name: "nothing", want: Custom{Overrides: map[string]string{}, Servers: map[string]string{}}},
		{name: "keys are sorted by suffix as in k3s, other keys ignored",
			cm:          map[string]string{"stub.server": "s", "log.override": "log", "README": "x"},
			want:        Custom{Overrides: map[string]string{"log.override": "log"}, Servers: map[string]string{"stub.server": "s"}},
			wantIgnored: []string{"configmap key README"}},
		{name: "a data dir file wins over the ConfigMap key of its name",
			cm:    map[string]string{"stub.server": "from cm", "a.override": "cm"},
			files: map[string]string{"stub.server": "from file", "b.override": "file"},
			want: Custom{Overrides: map[string]string{"a.override": "cm", "b.override": "file"},
				Servers: map[string]string{"stub.server": "from file"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ignored := Merge(tt.cm, tt.files)
			if !reflect.DeepEqual(got, tt.want) || !reflect.DeepEqual(ignored, tt.wantIgnored) {
				t.Errorf("Merge = %+v, %v; want %+v, %v", got, ignored, tt.want, tt.wantIgnored)
			}
		})
	}
}

func TestReadFragments(t *testing.T) {
	dir := t.TempDir()
	for name, data := range map[string]string{"a.server": "A", "b.override": "B", "notes.txt": "N"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := ReadFragments(dir)
	want := map[string]string{"a.server": "A", "b.override": "B"}
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("ReadFragments = %v, %v; want %v", got, err, want)
	}
	if got, err := ReadFragments(filepath.Join(dir, "missing")); err != nil || len(got) != 0 {
		t.Errorf("missing dir: %v, %v; want nothing", got, err)
	}
}

func TestUpstreamResolvConf(t *testing.T) {
	dir := t.TempDir()
	write := func(name, data string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	plain := write("plain", "nameserver 192.0.2.53\n")
	stub := write("stub", "# resolved\nnameserver 127.0.0.53\noptions edns0\n")
	yes := func(string) bool { return true }
	no := func(string) bool { return false }
	for _, tt := range []struct {
		name, conf string
		exists     func(string) bool
		want       string
	}{
		{"a resolv.conf with real servers is used as is", plain, yes, plain},
		{"systemd-resolved's stub: its upstream file", stub, yes, resolvedUpstream},
		{"the stub without resolved's file: the stub", stub, no, stub},
	} {
		if got := UpstreamResolvConf(tt.conf, tt.exists); got != tt.want {
			t.Errorf("%s: got %s, want %s", tt.name, got, tt.want)
		}
	}
}
