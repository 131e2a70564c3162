package containerd

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"text/template"

	"github.com/pelletier/go-toml/v2"
)

// config is what the generated config.toml depends on.
type config struct {
	Paths
	Snapshotter  string
	SandboxImage string
	Runc         string
	Shim         string
	CNIBinDirs   []string
	StreamPort   int
	// Auths are registries.yaml's credentials (its mirrors are in
	// Paths.HostsDir).
	Auths []registryAuth
}

// configTemplate is containerd 2.x's config, version 4 (server settings
// under their plugins). Choices that differ from containerd's defaults:
//   - the CRI and the snapshotter are required plugins, so that containerd
//     exits rather than serving without them;
//   - restrict_oom_score_adj: without CAP_SYS_RESOURCE runc cannot give the
//     sandbox the CRI's oom_score_adj of -998 and fails with "can't get final
//     child's PID from pipe: EOF";
//   - oom_score -999, as a node's containerd runs: restrict_oom_score_adj
//     raises what is below containerd's own score to it, and a Guaranteed
//     container's -997 (upstream's QoS policy) must stay -997;
//   - cgroupfs (SystemdCgroup = false): podvisor does not need systemd;
//   - runc's root under the state directory, not /run/containerd/runc, so
//     that two podvisors on one machine never share it;
//   - NRI off: it would listen on the machine-wide /var/run/nri/nri.sock;
//   - the streaming server (exec, attach, port-forward) on 127.0.0.1 only;
//   - the registries' hosts.toml files in the data dir (registries.go), not
//     the machine's /etc/containerd/certs.d;
//   - use_internal_loopback: containerd brings a pod's lo up itself instead
//     of running the loopback CNI plugin, one process fewer per pod start and
//     stop (about 1 % of the CPU of a 100-pod burst, BENCHMARKS.md).
var configTemplate = template.Must(template.New("config.toml").Funcs(template.FuncMap{"q": strconv.Quote}).Parse(
	`# Written by podvisor at every start of its containerd: edits are overwritten.
version = 4
oom_score = -999
root = {{q .Root}}
state = {{q .State}}
temp = {{q (print .Root "/tmp")}}
required_plugins = ["io.containerd.grpc.v1.cri", "io.containerd.snapshotter.v1.{{.Snapshotter}}"]

[plugins."io.containerd.server.v1.grpc"]
  address = {{q .Socket}}

[plugins."io.containerd.server.v1.ttrpc"]
  address = {{q (print .Socket ".ttrpc")}}

[plugins."io.containerd.nri.v1.nri"]
  disable = true

[plugins."io.containerd.grpc.v1.cri"]
  disable_tcp_service = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "{{.StreamPort}}"

[plugins."io.containerd.cri.v1.images"]
  snapshotter = {{q .Snapshotter}}
  [plugins."io.containerd.cri.v1.images".pinned_images]
    sandbox = {{q .SandboxImage}}
  [plugins."io.containerd.cri.v1.images".registry]
    config_path = {{q .HostsDir}}
{{- range .Auths}}
    [plugins."io.containerd.cri.v1.images".registry.configs.{{q .Host}}.auth]
      username = {{q .Username}}
      password = {{q .Password}}
      auth = {{q .Auth}}
      identitytoken = {{q .IdentityToken}}
{{- end}}

[plugins."io.containerd.cri.v1.runtime"]
  restrict_oom_score_adj = true
  [plugins."io.containerd.cri.v1.runtime".containerd]
    default_runtime_name = "runc"
    [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      runtime_path = {{q .Shim}}
      [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc.options]
        BinaryName = {{q .Runc}}
        Root = {{q (print .State "/runc")}}
        SystemdCgroup = false
  [plugins."io.containerd.cri.v1.runtime".cni]
    use_internal_loopback = true
    bin_dirs = [{{range $i, $d := .CNIBinDirs}}{{if $i}}, {{end}}{{q $d}}{{end}}]
    conf_dir = {{q .CNIConfDir}}
`))

func writeConfig(c config) error {
	var b bytes.Buffer
	if err := configTemplate.Execute(&b, c); err != nil {
		return err
	}
	return writeFileAtomic(c.Config, b.Bytes())
}

// readSnapshotter returns the snapshotter the CRI of the containerd
// configured by the file at path uses, so that images imported from another
// process are unpacked for it.
func readSnapshotter(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	var c struct {
		Plugins map[string]struct {
			Snapshotter string `toml:"snapshotter"`
		} `toml:"plugins"`
	}
	if err := toml.Unmarshal(b, &c); err != nil {
		return "", fmt.Errorf("%s: %w", path, err)
	}
	s := c.Plugins["io.containerd.cri.v1.images"].Snapshotter
	if s == "" {
		return "", fmt.Errorf("%s names no snapshotter for the CRI's images", path)
	}
	return s, nil
}

func writeFileAtomic(path string, data []byte) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
