package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/podvisor/podvisor/internal/cli/flagfile"
	"github.com/podvisor/podvisor/internal/cli/reset"
	"github.com/podvisor/podvisor/internal/cli/service"
)

const installUsage = `Usage: podvisor install [--print] [--no-start] [--unit-dir DIR] up|server|agent [FLAGS...]

Installs podvisor as a systemd service, as k3s's install.sh does: writes
podvisor.service (up, server) or podvisor-agent.service (agent) running this
binary, where it is, with the FLAGS given (--data-dir made absolute, the
default one added when absent), enables it, and starts it; the start returns
once the node is Ready (the unit is Type=notify). Stopping the service leaves
the containers running (KillMode=process), as stopping podvisor does.
--print writes the unit to stdout and changes nothing.
Remove it with 'podvisor uninstall'.
`

const uninstallUsage = `Usage: podvisor uninstall [--remove-data] [--unit-dir DIR]

Stops and disables the service(s) 'podvisor install' wrote, runs 'podvisor
reset' on their data dirs (removing the pods, containers and network they
left), and removes the unit files. The data dir stays unless --remove-data.
`

func installer(unitDir string) service.Installer {
	return service.Installer{UnitDir: unitDir, Out: os.Stdout, Systemctl: func(args ...string) error {
		cmd := exec.Command("systemctl", args...)
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("systemctl %s: %w", strings.Join(args, " "), err)
		}
		return nil
	}}
}

func runInstall(args []string) error {
	fs := flag.NewFlagSet("podvisor install", flag.ContinueOnError)
	fs.Usage = func() { fmt.Fprint(os.Stderr, installUsage); fs.PrintDefaults() }
	print := fs.Bool("print", false, "print the unit and change nothing")
	noStart := fs.Bool("no-start", false, "enable the unit without starting it now")
	unitDir := fs.String("unit-dir", service.UnitDir, "where to write the unit")
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			return nil
		}
		os.Exit(2)
	}
	if fs.NArg() == 0 {
		return fmt.Errorf("install: say what the service runs: up, server or agent\n\n%s", installUsage)
	}
	bin, err := os.Executable()
	if err != nil {
		return err
	}
	if bin, err = filepath.EvalSymlinks(bin); err != nil {
		return err
	}
	args = fs.Args()[1:]
	// The service has no environment of yours: a config file named by
	// $PODVISOR_CONFIG_FILE goes into its command line.
	if env := os.Getenv(flagfile.EnvVar); env != "" && flagValue(args, flagfile.FlagName) == "" {
		abs, err := filepath.Abs(env)
		if err != nil {
			return err
		}
		args = append(args, "--"+flagfile.FlagName, abs)
	}
	// The service reads the same config file: its data-dir is the default.
	def, err := dataDirFromConfig(flagValue(args, flagfile.FlagName))
	if err != nil {
		return err
	}
	u, err := service.BuildUnit(bin, fs.Arg(0), args, def)
	if err != nil {
		return err
	}
	if *print {
		fmt.Print(service.Render(u))
		return nil
	}
	if os.Geteuid() != 0 {
		return fmt.Errorf("install needs root, as podvisor does")
	}
	if !service.Running() {
		return fmt.Errorf("install: systemd is not running on this machine (no /run/systemd/system); run 'podvisor %s' directly, or --print the unit", u.Command)
	}
	_, err = installer(*unitDir).Install(u, !*noStart)
	return err
}

func runUninstall(args []string) error {
	fs := flag.NewFlagSet("podvisor uninstall", flag.ContinueOnError)
	fs.Usage = func() { fmt.Fprint(os.Stderr, uninstallUsage); fs.PrintDefaults() }
	removeData := fs.Bool("remove-data", false, "also remove the data dir (etcd, PKI, images)")
	unitDir := fs.String("unit-dir", service.UnitDir, "where install wrote the unit")
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			return nil
		}
		os.Exit(2)
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("uninstall takes no arguments, got %q", fs.Args())
	}
	if os.Geteuid() != 0 {
		return fmt.Errorf("uninstall needs root, as podvisor does")
	}
	in := installer(*unitDir)
	units, err := in.Find()
	if err != nil {
		return err
	}
	if len(units) == 0 {
		return fmt.Errorf("uninstall: no podvisor service installed in %s", *unitDir)
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	for _, u := range units {
		err := in.Uninstall(u, func(dir string) error {
			res, err := reset.Run(context.Background(), dir, log)
			if err == nil {
				fmt.Printf("reset %s: removed %d pod sandbox(es), killed %d process(es)\n", dir, res.Sandboxes, res.Killed)
			}
			return err
		}, *removeData)
		if err != nil {
			return err
		}
	}
	return nil
}

// flagValue is the value a command line gives a flag (-name v, --name=v),
// or "".
func flagValue(args []string, name string) string {
	v := ""
	for i, a := range args {
		n, val, hasVal := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if !strings.HasPrefix(a, "-") || n != name {
			continue
		}
		if hasVal {
			v = val
		} else if i+1 < len(args) {
			v = args[i+1]
		}
	}
	return v
}
