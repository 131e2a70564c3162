package crictl

import (
	"reflect"
	"testing"
)

// crictl takes flags before and after the IDs: `logs ID --tail 5` and
// `logs --tail 5 ID` mean the same.
func TestParseTakesFlagsAnywhere(t *testing.T) {
	for _, args := range [][]string{
		{"--tail", "5", "abc", "-f"},
		{"abc", "--tail", "5", "-f"},
		{"-f", "abc", "--tail=5"},
	} {
		c := &cli{}
		fs := c.flags("logs")
		follow := fs.Bool("f", false, "")
		tail := fs.Int64("tail", -1, "")
		pos, err := parse(fs, args)
		if err != nil || !reflect.DeepEqual(pos, []string{"abc"}) || !*follow || *tail != 5 {
			t.Errorf("parse(%q) = %q, %v; follow %v tail %d", args, pos, err, *follow, *tail)
		}
	}
	c := &cli{}
	if _, err := parse(c.flags("ps"), []string{"--bogus"}); err == nil {
		t.Error("an unknown flag was accepted")
	}
	c = &cli{}
	if _, err := parse(c.flags("ps"), []string{"--data-dir", "/d", "-r", "unix:///x.sock"}); err != nil || c.dataDir != "/d" || c.endpoint != "unix:///x.sock" {
		t.Errorf("global flags after the command: %v, %q %q", err, c.dataDir, c.endpoint)
	}
}
