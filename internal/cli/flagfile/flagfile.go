// Package flagfile reads podvisor's config file: a subcommand's flags as
// YAML keys (k3s's /etc/rancher/k3s/config.yaml, for podvisor), merged under
// the command line's.
package flagfile

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/spf13/pflag"
	"go.yaml.in/yaml/v3"
)

// DefaultPath is read when present and no other file is named.
const DefaultPath = "/etc/podvisor/config.yaml"

// EnvVar names a file instead of the default.
const EnvVar = "PODVISOR_CONFIG_FILE"

// FlagName is the command-line flag that names the file.
const FlagName = "config-file"

// Entry is one key of the file with its value(s) as the command line would
// give them.
type Entry struct {
	Key    string
	Values []string
	List   bool // written as a YAML list
	Line   int
}

// Locate says which file to read: the --config-file flag's value, else
// $PODVISOR_CONFIG_FILE, else DefaultPath if it exists (else none, "").
// A file named by the flag or the variable must exist.
func Locate(flagValue string, getenv func(string) string, exists func(string) bool) (path string, required bool) {
	if flagValue != "" {
		return flagValue, true
	}
	if v := getenv(EnvVar); v != "" {
		return v, true
	}
	if exists(DefaultPath) {
		return DefaultPath, false
	}
	return "", false
}

// Parse reads the file's entries, in the file's order. Errors name the file
// and, where the YAML parser knows it, the line.
func Parse(path string, data []byte) ([]Entry, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, fmt.Errorf("config file %s: %w", path, err)
	}
	if len(doc.Content) == 0 {
		return nil, nil // empty file
	}
	root := doc.Content[0]
	if root.Kind != yaml.MappingNode {
		return nil, fmt.Errorf("config file %s:%d: want a mapping of flag names to values", path, root.Line)
	}
	var out []Entry
	seen := map[string]int{}
	for i := 0; i+1 < len(root.Content); i += 2 {
		k, v := root.Content[i], root.Content[i+1]
		if k.Kind != yaml.ScalarNode || k.Value == "" {
			return nil, fmt.Errorf("config file %s:%d: a key must be a flag name", path, k.Line)
		}
		key := strings.TrimLeft(k.Value, "-")
		if first, dup := seen[key]; dup {
			return nil, fmt.Errorf("config file %s:%d: key %q repeated (first on line %d)", path, k.Line, key, first)
		}
		seen[key] = k.Line
		e := Entry{Key: key, Line: k.Line}
		switch v.Kind {
		case yaml.ScalarNode:
			if v.Tag == "!!null" {
				return nil, fmt.Errorf("config file %s:%d: key %q has no value", path, v.Line, key)
			}
			e.Values = []string{v.Value}
		case yaml.SequenceNode:
			e.List = true
			for _, item := range v.Content {
				if item.Kind != yaml.ScalarNode {
					return nil, fmt.Errorf("config file %s:%d: key %q: list items must be plain values", path, item.Line, key)
				}
				e.Values = append(e.Values, item.Value)
			}
		default:
			return nil, fmt.Errorf("config file %s:%d: key %q: want a value or a list of values", path, v.Line, key)
		}
		out = append(out, e)
	}
	return out, nil
}

// Flags is what Apply needs of a flag set (the standard library's or
// pflag's, through an adapter).
type Flags interface {
	// Has reports whether the subcommand has the flag.
	Has(name string) bool
	// Given reports whether the command line set it.
	Given(name string) bool
	Set(name, value string) error
}

// Std adapts a standard library flag set once parsed.
func Std(fs *flag.FlagSet) Flags {
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	return stdFlags{fs, given}
}

type stdFlags struct {
	fs    *flag.FlagSet
	given map[string]bool
}

func (s stdFlags) Has(name string) bool         { return s.fs.Lookup(name) != nil }
func (s stdFlags) Given(name string) bool       { return s.given[name] }
func (s stdFlags) Set(name, value string) error { return s.fs.Set(name, value) }

// P adapts a pflag flag set (kubectl-style flags) once parsed.
func P(fs *pflag.FlagSet) Flags { return pFlags{fs} }

type pFlags struct{ fs *pflag.FlagSet }

func (p pFlags) Has(name string) bool         { return p.fs.Lookup(name) != nil }
func (p pFlags) Given(name string) bool       { return p.fs.Changed(name) }
func (p pFlags) Set(name, value string) error { return p.fs.Set(name, value) }

// Apply sets the flags the file names and the command line did not.
// A key that is no flag of this subcommand is skipped when known says
// another subcommand has it (one file serves up, agent, token…), and is an
// error otherwise. listFlags take a YAML list, joined with commas as their
// comma-separated command-line value.
func Apply(path string, entries []Entry, fs Flags, known func(string) bool, listFlags map[string]bool) error {
	for _, e := range entries {
		where := fmt.Sprintf("config file %s:%d", path, e.Line)
		switch {
		case e.Key == FlagName:
			return fmt.Errorf("%s: key %q: a config file cannot name another", where, e.Key)
		case !fs.Has(e.Key):
			if known(e.Key) {
				continue
			}
			return fmt.Errorf("%s: unknown key %q: no podvisor subcommand has a flag --%s", where, e.Key, e.Key)
		case fs.Given(e.Key):
			continue // the command line wins
		case e.List && !listFlags[e.Key]:
			return fmt.Errorf("%s: key %q takes one value, not a list", where, e.Key)
		}
		v := strings.Join(e.Values, ",")
		if err := fs.Set(e.Key, v); err != nil {
			return fmt.Errorf("%s: key %q: invalid value %q: %v", where, e.Key, v, err)
		}
	}
	return nil
}

// Read locates, reads and parses the file; no file gives no entries.
func Read(flagValue string) (path string, entries []Entry, err error) {
	path, required := Locate(flagValue, os.Getenv, func(p string) bool {
		_, err := os.Stat(p)
		return !errors.Is(err, os.ErrNotExist)
	})
	if path == "" {
		return "", nil, nil
	}
	data, err := os.ReadFile(path)
	if err != nil {
		if !required && errors.Is(err, os.ErrNotExist) {
			return "", nil, nil
		}
		return path, nil, fmt.Errorf("config file: %w", err)
	}
	entries, err = Parse(path, data)
	return path, entries, err
}

// ListFlags take a YAML list in the config file (their command-line value
// is comma-separated).
var ListFlags = map[string]bool{"tls-san": true, "ca-cert-hash": true}

// ParseStd parses a subcommand's command line, then sets the flags its
// config file names and the command line does not; known says which keys
// any subcommand has. -h and a bad command line exit, as flag.ExitOnError
// would, after the usage.
func ParseStd(fs *flag.FlagSet, args []string, known func(string) bool) error {
	configFile := fs.String(FlagName, "", ConfigFileUsage)
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			os.Exit(0)
		}
		os.Exit(2)
	}
	path, entries, err := Read(*configFile)
	if err != nil {
		return err
	}
	return Apply(path, entries, Std(fs), known, ListFlags)
}

// ConfigFileUsage is the usage of --config-file.
const ConfigFileUsage = "config file: flags as YAML keys, under the command line's (default: $" + EnvVar + ", else " + DefaultPath + " if present)"
