package node

import (
	"bufio"
	"bytes"
	"os"
	"runtime"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Machine is what the node reports about the host, read fresh each time:
// its capacity. What is available is the eviction manager's to measure.
type Machine struct {
	CPUs        int
	MemoryTotal int64 // bytes
	DiskTotal   int64 // bytes of the filesystem holding the data dir
}

// ReadMachine reads the host's resources; dataDir selects the filesystem.
func ReadMachine(dataDir string) Machine {
	m := Machine{CPUs: runtime.NumCPU()}
	if f, err := os.Open("/proc/meminfo"); err == nil {
		s := bufio.NewScanner(f)
		for s.Scan() {
			fields := strings.Fields(s.Text())
			if len(fields) < 2 {
				continue
			}
			kb, _ := strconv.ParseInt(fields[1], 10, 64)
			if fields[0] == "MemTotal:" {
				m.MemoryTotal = kb * 1024
				break
			}
		}
		f.Close()
	}
	var st unix.Statfs_t
	if unix.Statfs(dataDir, &st) == nil {
		m.DiskTotal = int64(st.Blocks) * st.Bsize
	}
	return m
}

func readTrimmed(path string) string {
	b, _ := os.ReadFile(path)
	return strings.TrimSpace(string(b))
}

// osImage is PRETTY_NAME from os-release, as the kubelet reports it.
func osImage() string {
	b, err := os.ReadFile("/etc/os-release")
	if err != nil {
		return "Linux"
	}
	for _, line := range bytes.Split(b, []byte("\n")) {
		if v, ok := bytes.CutPrefix(line, []byte("PRETTY_NAME=")); ok {
			return strings.Trim(string(v), `"`)
		}
	}
	return "Linux"
}

func kernelVersion() string {
	var u unix.Utsname
	if unix.Uname(&u) != nil {
		return ""
	}
	return unix.ByteSliceToString(u.Release[:])
}
