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

// Machine is what the node reports about the host, read fresh each time.
type Machine struct {
	CPUs            int
	MemoryTotal     int64 // bytes
	MemoryAvailable int64
	DiskTotal       int64 // bytes of the filesystem holding the data dir
	DiskAvailable   int64
	PIDMax          int64
	PIDsInUse       int64
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
			switch fields[0] {
			case "MemTotal:":
				m.MemoryTotal = kb * 1024
			case "MemAvailable:":
				m.MemoryAvailable = kb * 1024
			}
		}
		f.Close()
	}
	var st unix.Statfs_t
	if unix.Statfs(dataDir, &st) == nil {
		m.DiskTotal = int64(st.Blocks) * st.Bsize
		m.DiskAvailable = int64(st.Bavail) * st.Bsize
	}
	m.PIDMax = readInt("/proc/sys/kernel/pid_max")
	if ents, err := os.ReadDir("/proc"); err == nil {
		for _, e := range ents {
			if _, err := strconv.Atoi(e.Name()); err == nil {
				m.PIDsInUse++
			}
		}
	}
	return m
}

func readInt(path string) int64 {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	n, _ := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	return n
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
