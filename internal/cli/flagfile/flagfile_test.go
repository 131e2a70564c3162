package flagfile

import (
	"flag"
	"strings"
	"testing"
	"time"
)

type opts struct {
	dataDir, nodeName, sans string
	port                    int
	verbose                 bool
	grace                   time.Duration
}

func newFlags(o *opts) *flag.FlagSet {
	fs := flag.NewFlagSet("up", flag.ContinueOnError)
	fs.StringVar(&o.dataDir, "data-dir", "/var/lib/podvisor", "")
	fs.StringVar(&o.nodeName, "node-name", "", "")
	fs.StringVar(&o.sans, "tls-san", "", "")
	fs.IntVar(&o.port, "api-port", 6443, "")
	fs.BoolVar(&o.verbose, "v", false, "")
	fs.DurationVar(&o.grace, "node-monitor-grace-period", 0, "")
	return fs
}

// merge parses args, then applies the file, as a subcommand does.
func merge(t *testing.T, file string, args ...string) (opts, error) {
	t.Helper()
	var o opts
	fs := newFlags(&o)
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	entries, err := Parse("/etc/podvisor/config.yaml", []byte(file))
	if err != nil {
		return o, err
	}
	otherSubcommands := func(k string) bool { return k == "ttl" || k == "server" }
	err = Apply("/etc/podvisor/config.yaml", entries, Std(fs), otherSubcommands, map[string]bool{"tls-san": true})
	return o, err
}

func TestMerge(t *testing.T) {
	file := `# podvisor up's flags
data-dir: /srv/podvisor
node-name: from-file
api-port: 7443
v: true
node-monitor-grace-period: 20s
tls-san: [a.example, 192.0.2.7]
ttl: 1h         # token create's: not up's, skipped
`
	o, err := merge(t, file)
	if err != nil {
		t.Fatal(err)
	}
	want := opts{dataDir: "/srv/podvisor", nodeName: "from-file", port: 7443, verbose: true,
		grace: 20 * time.Second, sans: "a.example,192.0.2.7"}
	if o != want {
		t.Errorf("file alone: %+v, want %+v", o, want)
	}
	o, err = merge(t, file, "--node-name", "from-flag", "--api-port=8443")
	if err != nil {
		t.Fatal(err)
	}
	want.nodeName, want.port = "from-flag", 8443
	if o != want {
		t.Errorf("flags over the file: %+v, want %+v", o, want)
	}
	if o, err := merge(t, "", "--node-name", "x"); err != nil || o.nodeName != "x" || o.dataDir != "/var/lib/podvisor" {
		t.Errorf("empty file: %+v, %v; want the defaults and flags", o, err)
	}
}

func TestErrorsNameFileLineAndKey(t *testing.T) {
	for _, tc := range []struct {
		name, file string
		want       []string
	}{
		{"unknown key", "node-name: a\napi-prot: 7443\n", []string{"config.yaml:2", `unknown key "api-prot"`}},
		{"bad value", "node-name: a\n\napi-port: seven\n", []string{"config.yaml:3", `key "api-port"`, "invalid"}},
		{"bad duration", "node-monitor-grace-period: 20\n", []string{"config.yaml:1", `"node-monitor-grace-period"`}},
		{"bad YAML", "node-name: a\napi-port: [7443\n", []string{"/etc/podvisor/config.yaml", "line"}},
		{"list for a single value", "node-name: [a, b]\n", []string{"config.yaml:1", `"node-name" takes one value`}},
		{"no value", "node-name:\n", []string{"config.yaml:1", `"node-name" has no value`}},
		{"repeated key", "node-name: a\nnode-name: b\n", []string{"config.yaml:2", "repeated"}},
		{"not a mapping", "- node-name\n", []string{"config.yaml:1", "mapping"}},
		{"nested value", "node-name: {a: b}\n", []string{"config.yaml:1", `"node-name"`}},
		{"config file in a config file", "config-file: /x.yaml\n", []string{"config.yaml:1", `"config-file"`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := merge(t, tc.file)
			if err == nil {
				t.Fatalf("no error for %q", tc.file)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
		})
	}
}

func TestLocate(t *testing.T) {
	env := func(v string) func(string) string {
		return func(k string) string {
			if k == EnvVar {
				return v
			}
			return ""
		}
	}
	yes := func(string) bool { return true }
	no := func(string) bool { return false }
	for _, tc := range []struct {
		name, flag, env string
		exists          func(string) bool
		want            string
		required        bool
	}{
		{"flag wins", "/a.yaml", "/b.yaml", yes, "/a.yaml", true},
		{"then the variable", "", "/b.yaml", yes, "/b.yaml", true},
		{"then the default if present", "", "", yes, DefaultPath, false},
		{"else none", "", "", no, "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, req := Locate(tc.flag, env(tc.env), tc.exists)
			if got != tc.want || req != tc.required {
				t.Errorf("Locate = %q, %v; want %q, %v", got, req, tc.want, tc.required)
			}
		})
	}
}
