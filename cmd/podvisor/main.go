// Command podvisor is a Kubernetes node in one binary.
package main

import (
	"fmt"
	"os"
)

const usage = `podvisor: a Kubernetes node in one binary.

Usage:
  podvisor up [flags]        start the control plane and the node agent
  podvisor server [flags]    start the control plane alone, for nodes that join it
  podvisor agent [flags]     run a node agent joining a cluster (--server with a --token,
                             --kubeconfig, or a local podvisor up's --server-data-dir)
  podvisor token create|list make a bootstrap token for 'podvisor agent --token', list them
  podvisor node shutdown|cancel|status
                             gracefully shut the node down (without systemd-logind), or cancel
  podvisor kubectl ARGS...   run kubectl against the local podvisor
  podvisor timeline [-n NS] POD [-o table|json|trace] [-w]
                             every step of a pod's lifecycle, to the millisecond
  podvisor image import|ls   import images from tars into the node's containerd, list them
  podvisor etcd-snapshot save [--name N]|ls|delete NAME|prune
                             snapshots of the cluster's etcd (restore: up --cluster-reset-restore-path)
  podvisor crictl ps|pods|images|logs|inspect|…
                             the CRI client for the node's containerd (works without the API)
  podvisor install up|server|agent [FLAGS...] | uninstall [--remove-data]
                             run podvisor as a systemd service (podvisor.service), or remove it
  podvisor reset [--data-dir DIR]
                             remove the pods, containers and network a stopped podvisor left running
  podvisor secrets-encrypt status|rotate-keys
                             Secrets' encryption at rest (up/server --secrets-encryption)
  podvisor certificate rotate
                             re-issue the control plane's certificates (podvisor stopped)
  podvisor version           print versions

Every subcommand's flags may also come from a config file (YAML keys named as
the flags): --config-file, $PODVISOR_CONFIG_FILE or /etc/podvisor/config.yaml.

Run 'podvisor up -h' for its flags.
`

func main() {
	if len(os.Args) < 2 {
		fmt.Fprint(os.Stderr, usage)
		os.Exit(2)
	}
	cmd, args := os.Args[1], os.Args[2:]
	var err error
	switch cmd {
	case "up":
		err = runUp(args)
	case "agent":
		err = runAgent(args)
	case "server":
		err = runServer(args)
	case "token":
		err = runToken(args)
	case "node":
		err = runNode(args)
	case "kubectl":
		kubectl(args) // exits
	case "image":
		err = runImage(args)
	case "timeline":
		err = runTimeline(args)
	case "etcd-snapshot":
		err = runEtcdSnapshot(args)
	case "crictl":
		err = runCrictl(args)
	case "install":
		err = runInstall(args)
	case "uninstall":
		err = runUninstall(args)
	case "reset":
		err = runReset(args)
	case "secrets-encrypt":
		err = runSecretsEncrypt(args)
	case "certificate":
		err = runCertificate(args)
	case shimCommand:
		shim(args) // exits
	case "version", "--version":
		versionCmd()
	case "-h", "--help", "help":
		fmt.Print(usage)
	default:
		fmt.Fprintf(os.Stderr, "podvisor: unknown command %q\n\n%s", cmd, usage)
		os.Exit(2)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "podvisor: %v\n", err)
		os.Exit(1)
	}
}
