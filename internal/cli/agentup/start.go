package agentup

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"

	"github.com/podvisor/podvisor/internal/cli/datadir"
)

// CheckPort fails with a one-line error when the port cannot be bound.
func CheckPort(host string, port int, flag string) error {
	if port <= 0 || port > 65535 {
		return fmt.Errorf("%s %d is not a valid port", flag, port)
	}
	l, err := net.Listen("tcp", net.JoinHostPort(host, fmt.Sprint(port)))
	if err != nil {
		if errors.Is(err, errAddrInUse) || strings.Contains(err.Error(), "address already in use") {
			return fmt.Errorf("port %d (%s) is already in use", port, flag)
		}
		return fmt.Errorf("port %d (%s): %v", port, flag, err)
	}
	return l.Close()
}

// setupLogging sends the components' klog output and the agent's slog output
// to the log file (and stderr too when verbose).
func setupLogging(path string, verbose bool, stderr io.Writer) (*slog.Logger, func(), error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, nil, fmt.Errorf("log file: %w", err)
	}
	var w io.Writer = f
	if verbose {
		w = io.MultiWriter(f, stderr)
	}
	klog.LogToStderr(false)
	klog.SetOutput(w)
	log := slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelInfo}))
	slog.SetDefault(log)
	return log, func() { klog.Flush(); f.Close() }, nil
}

// WaitNodeReady waits for the node to be Ready.
func WaitNodeReady(ctx context.Context, rc *rest.Config, name string) error {
	c, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return err
	}
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		if n, err := c.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{}); err == nil && nodeIsReady(n) {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("node %s did not become Ready within 1m", name)
}

func nodeIsReady(n *v1.Node) bool {
	for _, cond := range n.Status.Conditions {
		if cond.Type == v1.NodeReady {
			return cond.Status == v1.ConditionTrue
		}
	}
	return false
}

func init() {
	// klog copies errors to stderr unless told otherwise; podvisor's stderr is
	// for its own one-line messages, the components' logs go to the log file.
	fs := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(fs)
	_ = fs.Set("stderrthreshold", "FATAL")
	_ = fs.Set("logtostderr", "false")
}

// ClaimDataDir opens dir for node nodeName; a data dir belongs to one node.
func ClaimDataDir(dir, nodeName string) (datadir.State, error) {
	st, err := datadir.Open(dir)
	if err != nil {
		return st, err
	}
	if st.NodeName != "" && st.NodeName != nodeName {
		return st, fmt.Errorf("data dir %s belongs to node %q, not %q (use another --data-dir)", dir, st.NodeName, nodeName)
	}
	st.NodeName = nodeName
	return st, nil
}

// StartLogging opens DIR/podvisor.log for all logs and says, in one line on
// stderr, which configuration fields are ignored.
func StartLogging(dir string, verbose bool, stderr io.Writer, configFile string, ignored []string) (*slog.Logger, string, func(), error) {
	logFile := filepath.Join(dir, "podvisor.log")
	log, closeLog, err := setupLogging(logFile, verbose, stderr)
	if err != nil {
		return nil, "", nil, err
	}
	if len(ignored) > 0 {
		fmt.Fprintf(stderr, "podvisor: warning: %s sets fields podvisor does not implement yet (ignored): %s\n",
			configFile, strings.Join(ignored, ", "))
	}
	return log, logFile, closeLog, nil
}
