package main

import (
	"flag"
	"os"

	"github.com/spf13/pflag"

	"github.com/podvisor/podvisor/internal/cli/datadir"
	"github.com/podvisor/podvisor/internal/cli/flagfile"
	"github.com/podvisor/podvisor/internal/cli/up"
)

const configFileUsage = "config file: flags as YAML keys, under the command line's (default: $" + flagfile.EnvVar + ", else " + flagfile.DefaultPath + " if present)"

// listFlags take a YAML list in the config file (their command-line value
// is comma-separated).
var listFlags = map[string]bool{"tls-san": true, "ca-cert-hash": true}

// parseFlags parses a subcommand's command line, then sets the flags its
// config file names and the command line does not. -h and a bad command
// line exit, as flag.ExitOnError would, after the usage.
func parseFlags(fs *flag.FlagSet, args []string) error {
	configFile := fs.String(flagfile.FlagName, "", configFileUsage)
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			os.Exit(0)
		}
		os.Exit(2)
	}
	path, entries, err := flagfile.Read(*configFile)
	if err != nil {
		return err
	}
	return flagfile.Apply(path, entries, flagfile.Std(fs), knownFlag, listFlags)
}

// parsePFlags is parseFlags for the subcommands with kubectl-style flags.
func parsePFlags(fs *pflag.FlagSet, args []string) error {
	configFile := fs.String(flagfile.FlagName, "", configFileUsage)
	if err := fs.Parse(args); err != nil {
		return err
	}
	path, entries, err := flagfile.Read(*configFile)
	if err != nil {
		return err
	}
	return flagfile.Apply(path, entries, flagfile.P(fs), knownFlag, listFlags)
}

// knownFlag reports whether any subcommand has the flag: one config file
// serves them all (data-dir for up, token, reset…), and a key no
// subcommand knows is a mistake worth an error.
func knownFlag(name string) bool {
	sets := []*flag.FlagSet{
		upFlags(new(up.Options)),
		serverFlags(new(up.ServerOptions), new(string)),
		agentFlags(new(up.AgentOptions), new(string)),
		tokenFlags("create", new(tokenOptions)),
		nodeFlags("shutdown", new(nodeOptions)),
		imageFlags("import", new(string)),
		resetFlags(new(string)),
		certificateFlags(new(string)),
		secretsEncryptFlags(new(string)),
		etcdSnapshotFlags("save", new(etcdSnapshotOptions)),
	}
	for _, fs := range sets {
		if fs.Lookup(name) != nil {
			return true
		}
	}
	return timelineFlags(new(timelineOptions)).Lookup(name) != nil
}

// dataDirFromConfig is the data-dir the config file names (configFile, else
// $PODVISOR_CONFIG_FILE or the default file), else the default data dir:
// for commands whose own flags leave no room for the file's other keys.
func dataDirFromConfig(configFile string) (string, error) {
	_, entries, err := flagfile.Read(configFile)
	if err != nil {
		return "", err
	}
	for _, e := range entries {
		if e.Key == "data-dir" && len(e.Values) == 1 {
			return e.Values[0], nil
		}
	}
	return datadir.Default(), nil
}
