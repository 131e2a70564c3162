package process

import (
	"os"
	"path/filepath"
	"testing"
)

// The figures are read from whichever cgroup files a directory has: v1's
// memory and cpuacct hierarchies (separate directories on this project's
// CI machine), or one v2 directory with both.
func TestCgroupFigures(t *testing.T) {
	write := func(dir string, files map[string]string) string {
		t.Helper()
		for name, body := range files {
			if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		return dir
	}
	v1mem := write(t.TempDir(), map[string]string{"memory.usage_in_bytes": "1000\n",
		"memory.stat": "cache 300\nrss 600\ntotal_rss 650\ntotal_inactive_file 200\n"})
	v1cpu := write(t.TempDir(), map[string]string{"cpuacct.usage": "123456789\n"})
	v2 := write(t.TempDir(), map[string]string{"memory.current": "2000\n",
		"memory.stat": "anon 1500\nfile 500\ninactive_file 400\n",
		"cpu.stat":    "usage_usec 5000\nuser_usec 4000\nsystem_usec 1000\n"})

	if ws, usage, rss, ok := memory(v1mem); !ok || ws != 800 || usage != 1000 || rss != 650 {
		t.Errorf("v1 memory = %d %d %d %v, want 800 1000 650", ws, usage, rss, ok)
	}
	if ws, usage, rss, ok := memory(v2); !ok || ws != 1600 || usage != 2000 || rss != 1500 {
		t.Errorf("v2 memory = %d %d %d %v, want 1600 2000 1500", ws, usage, rss, ok)
	}
	if _, _, _, ok := memory(v1cpu); ok {
		t.Errorf("a cpuacct directory read as memory")
	}
	if n, ok := cpuTime(v1cpu); !ok || n != 123456789 {
		t.Errorf("v1 cpuacct = %d %v", n, ok)
	}
	if n, ok := cpuTime(v2); !ok || n != 5000000 {
		t.Errorf("v2 cpu.stat = %d %v, want 5e6 ns", n, ok)
	}
	if _, ok := cpuTime(v1mem); ok {
		t.Errorf("a memory directory read as CPU")
	}
}
