// Package service installs podvisor as a systemd service, as k3s's
// install.sh installs k3s.service: the unit file (this file, pure), the
// systemctl calls (install.go) and the readiness notification the unit's
// Type=notify waits for (notify.go).
package service

import (
	"bufio"
	"fmt"
	"strings"
)

// Unit says what a unit file runs.
type Unit struct {
	Binary  string   // absolute path of the podvisor binary
	Command string   // up, server or agent
	Args    []string // the flags given, --data-dir included
	DataDir string   // absolute; recorded for uninstall
}

// Name is the unit's name: podvisor.service for up and server,
// podvisor-agent.service for agent (k3s: k3s.service, k3s-agent.service).
func Name(command string) string {
	if command == "agent" {
		return "podvisor-agent.service"
	}
	return "podvisor.service"
}

// dataDirKey records the data dir in the unit for uninstall; systemd
// ignores keys that start with X-.
const dataDirKey = "X-Podvisor-Data-Dir"

// Render writes the unit file. It follows k3s's unit: Type=notify (podvisor
// reports readiness once the node is Ready), KillMode=process (stopping the
// service leaves the containers running, as stopping podvisor does),
// Delegate=yes (the pods' cgroups are podvisor's to manage), Restart=always,
// and no resource limits on a process that runs a node's containers.
func Render(u Unit) string {
	desc := map[string]string{
		"up":     "podvisor: a Kubernetes node in one binary (control plane and node agent)",
		"server": "podvisor server: the Kubernetes control plane",
		"agent":  "podvisor agent: a Kubernetes node joined to a cluster",
	}[u.Command]
	exec := []string{quote(u.Binary), quote(u.Command)}
	for _, a := range u.Args {
		exec = append(exec, quote(a))
	}
	var b strings.Builder
	fmt.Fprintf(&b, `# Written by 'podvisor install'; 'podvisor uninstall' removes it.
[Unit]
Description=%s
Documentation=https://github.com/podvisor/podvisor
Wants=network-online.target
After=network-online.target
%s=%s

[Install]
WantedBy=multi-user.target

[Service]
Type=notify
EnvironmentFile=-/etc/default/%%N
KillMode=process
Delegate=yes
User=root
LimitNOFILE=1048576
LimitNPROC=infinity
LimitCORE=infinity
TasksMax=infinity
TimeoutStartSec=0
Restart=always
RestartSec=5s
ExecStartPre=-/sbin/modprobe br_netfilter
ExecStartPre=-/sbin/modprobe overlay
ExecStart=%s
`, desc, dataDirKey, escape(u.DataDir), strings.Join(exec, " "))
	return b.String()
}

// DataDirOf reads the data dir a unit file was written for.
func DataDirOf(unit string) (string, bool) {
	s := bufio.NewScanner(strings.NewReader(unit))
	for s.Scan() {
		if v, ok := strings.CutPrefix(strings.TrimSpace(s.Text()), dataDirKey+"="); ok {
			return strings.NewReplacer("%%", "%", "$$", "$").Replace(v), v != ""
		}
	}
	return "", false
}

// escape doubles systemd's specifier and variable characters, so that a
// value reaches podvisor as written.
func escape(s string) string {
	return strings.NewReplacer("%", "%%", "$", "$$").Replace(s)
}

// quote makes one ExecStart word: plain when it can be, else in double
// quotes with backslash escapes (systemd.service(5), "Command lines").
func quote(s string) string {
	s = escape(s)
	if s != "" && !strings.ContainsAny(s, " \t\n\"'\\;") {
		return s
	}
	r := strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`, "\t", `\t`)
	return `"` + r.Replace(s) + `"`
}
