package agentup

import (
	"os"
	"path/filepath"
)

// BinaryName is the agent-only binary (cmd/podvisor-agent) that `podvisor
// agent` runs when it is installed beside podvisor.
const BinaryName = "podvisor-agent"

// BinaryBeside is the agent-only binary in exe's directory, or "" when
// there is none (or exe is that binary).
func BinaryBeside(exe string) string {
	lean := filepath.Join(filepath.Dir(exe), BinaryName)
	if filepath.Base(exe) == BinaryName {
		return ""
	}
	if st, err := os.Stat(lean); err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0 {
		return lean
	}
	return ""
}
