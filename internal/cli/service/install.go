package service

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// UnitDir is where install writes units, as k3s's install.sh does.
const UnitDir = "/etc/systemd/system"

// Commands install knows.
var commands = map[string]bool{"up": true, "server": true, "agent": true}

// Running reports whether systemd manages this machine (sd_booted(3)).
func Running() bool {
	fi, err := os.Stat("/run/systemd/system")
	return err == nil && fi.IsDir()
}

// Systemctl runs systemctl; tests replace it.
type Systemctl func(args ...string) error

// Installer writes, enables and starts the unit, and takes it away again.
type Installer struct {
	UnitDir   string
	Systemctl Systemctl
	Out       io.Writer
}

// BuildUnit checks the command and its flags and makes the unit for them:
// --data-dir is made absolute, or added (the default one), since the
// service runs without the installing user's environment.
func BuildUnit(binary, command string, args []string, defaultDataDir string) (Unit, error) {
	if !commands[command] {
		return Unit{}, fmt.Errorf("install: the service runs 'up', 'server' or 'agent', not %q", command)
	}
	if !filepath.IsAbs(binary) {
		return Unit{}, fmt.Errorf("install: the binary's path %q is not absolute", binary)
	}
	args, dir, err := WithDataDir(args, defaultDataDir)
	if err != nil {
		return Unit{}, err
	}
	return Unit{Binary: binary, Command: command, Args: args, DataDir: dir}, nil
}

// WithDataDir returns args with --data-dir given once, as an absolute path,
// and that path.
func WithDataDir(args []string, def string) ([]string, string, error) {
	out := make([]string, 0, len(args)+2)
	dir := ""
	for i := 0; i < len(args); i++ {
		a := args[i]
		name, val, hasVal := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if !strings.HasPrefix(a, "-") || name != "data-dir" {
			out = append(out, a)
			continue
		}
		if !hasVal {
			if i+1 == len(args) {
				return nil, "", errors.New("install: --data-dir needs a value")
			}
			i++
			val = args[i]
		}
		dir = val
	}
	if dir == "" {
		dir = def
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, "", err
	}
	return append([]string{"--data-dir", abs}, out...), abs, nil
}

// Install writes the unit, enables it and (re)starts it; systemctl start
// returns once podvisor reported readiness.
func (in Installer) Install(u Unit, start bool) (string, error) {
	path := filepath.Join(in.UnitDir, Name(u.Command))
	if err := os.MkdirAll(in.UnitDir, 0o755); err != nil {
		return "", err
	}
	if err := os.WriteFile(path, []byte(Render(u)), 0o644); err != nil {
		return "", fmt.Errorf("writing %s: %w", path, err)
	}
	fmt.Fprintf(in.Out, "wrote %s\n", path)
	if err := in.Systemctl("daemon-reload"); err != nil {
		return path, err
	}
	if err := in.Systemctl("enable", Name(u.Command)); err != nil {
		return path, err
	}
	if !start {
		return path, nil
	}
	fmt.Fprintf(in.Out, "starting %s (returns once the node is Ready)\n", Name(u.Command))
	return path, in.Systemctl("restart", Name(u.Command))
}

// Installed is one unit install wrote.
type Installed struct {
	Name, Path, DataDir string
}

// Find returns the units install wrote in the unit dir.
func (in Installer) Find() ([]Installed, error) {
	var out []Installed
	for _, name := range []string{Name("up"), Name("agent")} {
		path := filepath.Join(in.UnitDir, name)
		b, err := os.ReadFile(path)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, err
		}
		dir, ok := DataDirOf(string(b))
		if !ok {
			return nil, fmt.Errorf("%s was not written by podvisor install (no %s line): left alone", path, dataDirKey)
		}
		out = append(out, Installed{Name: name, Path: path, DataDir: dir})
	}
	return out, nil
}

// Uninstall stops and disables the unit, runs reset on its data dir,
// removes the unit and, with removeData, the data dir.
func (in Installer) Uninstall(u Installed, reset func(dataDir string) error, removeData bool) error {
	// Stopping a unit that failed or is gone is not an error worth stopping for.
	if err := in.Systemctl("disable", "--now", u.Name); err != nil {
		fmt.Fprintf(in.Out, "systemctl disable --now %s: %v (continuing)\n", u.Name, err)
	}
	if err := reset(u.DataDir); err != nil {
		return fmt.Errorf("reset of %s: %w", u.DataDir, err)
	}
	if err := os.Remove(u.Path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	fmt.Fprintf(in.Out, "removed %s\n", u.Path)
	if err := in.Systemctl("daemon-reload"); err != nil {
		return err
	}
	if !removeData {
		fmt.Fprintf(in.Out, "data dir %s kept (--remove-data removes it)\n", u.DataDir)
		return nil
	}
	if u.DataDir == "" || u.DataDir == "/" || !filepath.IsAbs(u.DataDir) {
		return fmt.Errorf("refusing to remove data dir %q", u.DataDir)
	}
	if err := os.RemoveAll(u.DataDir); err != nil {
		return err
	}
	fmt.Fprintf(in.Out, "removed data dir %s\n", u.DataDir)
	return nil
}
