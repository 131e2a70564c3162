package reset

import "testing"

func TestIsNodeCommand(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want bool
	}{
		{[]string{"/usr/local/bin/podvisor", "up"}, true},
		{[]string{"bin/podvisor", "agent", "--data-dir", "d"}, true},
		// podvisor agent execs podvisor-agent with its own command line.
		{[]string{"podvisor", "agent"}, true},
		{[]string{"/opt/bin/podvisor-agent", "--data-dir", "d"}, true},
		{[]string{"/opt/bin/podvisor-agent"}, true},
		{[]string{"/opt/bin/podvisor-containerd", "--config", "c"}, false},
		{[]string{"/opt/bin/podvisor-agent", "__shim", "dir"}, false},
		{[]string{"podvisor", "crictl"}, false},
		{[]string{"podvisor", "server"}, false},
		{nil, false},
	} {
		if got := isNodeCommand(tc.args); got != tc.want {
			t.Errorf("isNodeCommand(%q) = %v, want %v", tc.args, got, tc.want)
		}
	}
}
