package process

import (
	"os"
	"path/filepath"
	"testing"
)

func TestParseProcStatSurvivesOddCommandNames(t *testing.T) {
	line := "4242 (a) (b c) S 1 4242 4242 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 1000 10 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 0 0 0 0 0 0\n"
	s, err := parseProcStat([]byte(line))
	if err != nil {
		t.Fatal(err)
	}
	if s.State != 'S' || s.Ppid != 1 || s.Pgid != 4242 || s.StartTime != 987654 {
		t.Errorf("got %+v", s)
	}
}

func TestOOMKillIsReadFromEitherCgroupVersion(t *testing.T) {
	for file, content := range map[string]string{
		"memory.oom_control": "oom_kill_disable 0\nunder_oom 0\noom_kill 1\n",               // v1
		"memory.events":      "low 0\nhigh 0\nmax 3\noom 1\noom_kill 2\noom_group_kill 0\n", // v2
	} {
		dir := t.TempDir()
		os.WriteFile(filepath.Join(dir, file), []byte(content), 0o644)
		if !(cgroupSet{Dirs: []string{dir}}).oomKilled() {
			t.Errorf("%s: OOM kill not seen", file)
		}
		os.WriteFile(filepath.Join(dir, file), []byte("oom_kill 0\n"), 0o644)
		if (cgroupSet{Dirs: []string{dir}}).oomKilled() {
			t.Errorf("%s: OOM kill seen where there was none", file)
		}
	}
}
