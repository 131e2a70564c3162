package service

import (
	"bytes"
	"errors"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

// The unit is k3s's: notify, process kill mode, delegated cgroups, always
// restarted, unlimited; ExecStart runs the binary with the flags given.
func TestRenderIsK3sShaped(t *testing.T) {
	u := Unit{Binary: "/usr/local/bin/podvisor", Command: "up", Args: []string{"--data-dir", "/var/lib/podvisor", "--api-port", "6443"}, DataDir: "/var/lib/podvisor"}
	got := Render(u)
	for _, line := range []string{
		"Type=notify", "KillMode=process", "Delegate=yes", "Restart=always", "LimitNOFILE=1048576",
		"LimitNPROC=infinity", "TasksMax=infinity", "WantedBy=multi-user.target", "After=network-online.target",
		"ExecStart=/usr/local/bin/podvisor up --data-dir /var/lib/podvisor --api-port 6443",
		"X-Podvisor-Data-Dir=/var/lib/podvisor",
	} {
		if !hasLine(got, line) {
			t.Errorf("unit has no line %q:\n%s", line, got)
		}
	}
	if dir, ok := DataDirOf(got); !ok || dir != "/var/lib/podvisor" {
		t.Errorf("DataDirOf = %q, %v", dir, ok)
	}
}

func hasLine(text, line string) bool {
	for _, l := range strings.Split(text, "\n") {
		if l == line {
			return true
		}
	}
	return false
}

// systemd expands % specifiers and $ variables and splits on spaces; the
// flags must reach podvisor as the user typed them.
func TestQuote(t *testing.T) {
	for in, want := range map[string]string{
		"plain":           "plain",
		"--tls-san=a,b":   "--tls-san=a,b",
		"with space":      `"with space"`,
		`say "hi"`:        `"say \"hi\""`,
		"100%":            "100%%",
		"$HOME":           "$$HOME",
		`back\slash`:      `"back\\slash"`,
		"":                `""`,
		"semi;colon":      `"semi;colon"`,
		"/dir/with %n x":  `"/dir/with %%n x"`,
		"single'quote":    `"single'quote"`,
		"tab\tseparated":  `"tab\tseparated"`,
		"new\nline":       `"new\nline"`,
		"/var/lib/pod-v1": "/var/lib/pod-v1",
	} {
		if got := quote(in); got != want {
			t.Errorf("quote(%q) = %s, want %s", in, got, want)
		}
	}
	u := Unit{Binary: "/b", Command: "up", DataDir: "/data 100%/$x"}
	if dir, _ := DataDirOf(Render(u)); dir != u.DataDir {
		t.Errorf("DataDirOf round trip = %q, want %q", dir, u.DataDir)
	}
}

func TestWithDataDir(t *testing.T) {
	wd, _ := os.Getwd()
	for _, tc := range []struct {
		name string
		args []string
		want []string
		err  bool
	}{
		{"default added", []string{"--api-port", "1"}, []string{"--data-dir", "/def", "--api-port", "1"}, false},
		{"given, separate", []string{"--data-dir", "/d", "-v"}, []string{"--data-dir", "/d", "-v"}, false},
		{"given, with =", []string{"-v", "--data-dir=/d"}, []string{"--data-dir", "/d", "-v"}, false},
		{"single dash", []string{"-data-dir", "/d"}, []string{"--data-dir", "/d"}, false},
		{"relative made absolute", []string{"--data-dir", "rel"}, []string{"--data-dir", filepath.Join(wd, "rel")}, false},
		{"the last wins, as flag parsing", []string{"--data-dir", "/a", "--data-dir", "/b"}, []string{"--data-dir", "/b"}, false},
		{"missing value", []string{"--data-dir"}, nil, true},
		{"a flag value that looks like it is kept", []string{"--node-name", "data-dir"}, []string{"--data-dir", "/def", "--node-name", "data-dir"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, _, err := WithDataDir(tc.args, "/def")
			if (err != nil) != tc.err || (!tc.err && !reflect.DeepEqual(got, tc.want)) {
				t.Errorf("WithDataDir(%q) = %q, %v; want %q (error %v)", tc.args, got, err, tc.want, tc.err)
			}
		})
	}
}

func TestBuildUnitRefusesOtherCommands(t *testing.T) {
	if _, err := BuildUnit("/b", "kubectl", nil, "/d"); err == nil {
		t.Error("install of kubectl accepted")
	}
	if _, err := BuildUnit("bin/podvisor", "up", nil, "/d"); err == nil {
		t.Error("a relative binary path accepted")
	}
	if Name("agent") != "podvisor-agent.service" || Name("server") != "podvisor.service" {
		t.Error("unit names differ from k3s's pattern")
	}
}

// install writes the unit, reloads, enables and restarts it; uninstall
// stops it, resets the data dir, removes the unit (and only with
// removeData the data dir).
func TestInstallAndUninstall(t *testing.T) {
	unitDir, data := t.TempDir(), filepath.Join(t.TempDir(), "data")
	os.MkdirAll(data, 0o700)
	var calls []string
	var out bytes.Buffer
	in := Installer{UnitDir: unitDir, Out: &out, Systemctl: func(args ...string) error {
		calls = append(calls, strings.Join(args, " "))
		return nil
	}}
	u, err := BuildUnit("/usr/local/bin/podvisor", "agent", []string{"--data-dir", data, "--server", "https://10.0.0.1:6443"}, "/unused")
	if err != nil {
		t.Fatal(err)
	}
	path, err := in.Install(u, true)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"daemon-reload", "enable podvisor-agent.service", "restart podvisor-agent.service"}; !reflect.DeepEqual(calls, want) {
		t.Errorf("systemctl calls %q, want %q", calls, want)
	}
	if b, _ := os.ReadFile(path); string(b) != Render(u) {
		t.Errorf("%s does not hold the rendered unit", path)
	}
	found, err := in.Find()
	if err != nil || len(found) != 1 || found[0].DataDir != data || found[0].Name != "podvisor-agent.service" {
		t.Fatalf("Find = %+v, %v", found, err)
	}

	calls = nil
	var resetDir string
	if err := in.Uninstall(found[0], func(d string) error { resetDir = d; return nil }, false); err != nil {
		t.Fatal(err)
	}
	if want := []string{"disable --now podvisor-agent.service", "daemon-reload"}; !reflect.DeepEqual(calls, want) {
		t.Errorf("systemctl calls %q, want %q", calls, want)
	}
	if resetDir != data {
		t.Errorf("reset ran on %q, want %q", resetDir, data)
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("unit still there: %v", err)
	}
	if _, err := os.Stat(data); err != nil {
		t.Errorf("data dir removed without --remove-data: %v", err)
	}

	in.Install(u, false)
	found, _ = in.Find()
	if err := in.Uninstall(found[0], func(string) error { return nil }, true); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(data); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("data dir kept with --remove-data: %v", err)
	}
}

// A unit someone else wrote under the same name is left alone.
func TestFindLeavesForeignUnits(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "podvisor.service"), []byte("[Service]\nExecStart=/bin/true\n"), 0o644)
	if _, err := (Installer{UnitDir: dir}).Find(); err == nil || !strings.Contains(err.Error(), "not written by podvisor install") {
		t.Errorf("Find of a foreign unit: %v", err)
	}
}

// Under a Type=notify unit, systemd reads READY=1 from $NOTIFY_SOCKET.
func TestNotifyReady(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "notify.sock")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sock, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	t.Setenv("NOTIFY_SOCKET", sock)
	nf := TakeNotifySocket()
	if v, ok := os.LookupEnv("NOTIFY_SOCKET"); ok {
		t.Fatalf("NOTIFY_SOCKET=%q left for the API server to send an early READY=1", v)
	}
	sent, err := nf.Ready("node n1 is Ready")
	if err != nil || !sent {
		t.Fatalf("NotifyReady = %v, %v", sent, err)
	}
	conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	buf := make([]byte, 4096)
	n, err := conn.Read(buf)
	if err != nil {
		t.Fatal(err)
	}
	if got := string(buf[:n]); got != "READY=1\nSTATUS=node n1 is Ready" {
		t.Errorf("notification %q", got)
	}
	if _, ok := os.LookupEnv("NOTIFY_SOCKET"); ok {
		t.Error("NOTIFY_SOCKET back in the environment after Ready")
	}
	t.Setenv("NOTIFY_SOCKET", "")
	if sent, err := TakeNotifySocket().Ready("x"); sent || err != nil {
		t.Errorf("without NOTIFY_SOCKET: %v, %v; want nothing sent", sent, err)
	}
}
