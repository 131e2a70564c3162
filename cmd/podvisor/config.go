package main

import (
	"flag"

	"github.com/spf13/pflag"

	"github.com/podvisor/podvisor/internal/cli/agentup"
	"github.com/podvisor/podvisor/internal/cli/datadir"
	"github.com/podvisor/podvisor/internal/cli/flagfile"
	"github.com/podvisor/podvisor/internal/cli/up"
)

// parseFlags parses a subcommand's command line and config file
// (flagfile.ParseStd), knowing every subcommand's flags.
func parseFlags(fs *flag.FlagSet, args []string) error {
	return flagfile.ParseStd(fs, args, knownFlag)
}

// parsePFlags is parseFlags for the subcommands with kubectl-style flags.
func parsePFlags(fs *pflag.FlagSet, args []string) error {
	configFile := fs.String(flagfile.FlagName, "", flagfile.ConfigFileUsage)
	if err := fs.Parse(args); err != nil {
		return err
	}
	path, entries, err := flagfile.Read(*configFile)
	if err != nil {
		return err
	}
	return flagfile.Apply(path, entries, flagfile.P(fs), knownFlag, flagfile.ListFlags)
}

// knownFlag reports whether any subcommand has the flag: one config file
// serves them all (data-dir for up, token, reset…), and a key no
// subcommand knows is a mistake worth an error.
func knownFlag(name string) bool {
	sets := []*flag.FlagSet{
		upFlags(new(up.Options)),
		serverFlags(new(up.ServerOptions), new(string)),
		agentup.Flags(new(agentup.AgentOptions), new(string)),
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
