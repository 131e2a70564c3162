package cri

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podvisor/podvisor/internal/runtime"
)

// containerMeta is what this runtime keeps of a container, all of it
// recoverable from the container's labels and annotations.
type containerMeta struct {
	podUID, name    string
	sandboxID       string
	terminationFile string
	stopSignal      syscall.Signal
}

func metaOf(labels, annotations map[string]string, name string) containerMeta {
	m := containerMeta{
		podUID:          labels[labelPodUID],
		name:            name,
		sandboxID:       annotations[annotationSandboxID],
		terminationFile: annotations[annotationTerminationFile],
	}
	if n, err := strconv.Atoi(annotations[annotationStopSignal]); err == nil {
		m.stopSignal = syscall.Signal(n)
	}
	return m
}

// Create creates the container in its sandbox; nothing runs yet. The
// termination message file is made here, on the host, and bind-mounted.
func (r *Runtime) Create(ctx context.Context, spec runtime.ContainerSpec) (string, error) {
	sb, err := r.sandbox(ctx, spec.SandboxID)
	if err != nil {
		return "", fmt.Errorf("create container %s: %w", spec.Name, err)
	}
	in := containerInput{spec: spec, sandboxLogDir: sb.spec.LogDir, sandbox: sb.spec}
	if spec.TerminationMessagePath != "" {
		if in.terminationFile, err = r.newTerminationFile(spec); err != nil {
			return "", fmt.Errorf("create container %s: %w", spec.Name, err)
		}
	}
	cfg, err := containerConfig(in)
	if err == nil && spec.LogPath != "" {
		// As the kubelet: the runtime creates the log file, not its directory.
		err = os.MkdirAll(filepath.Dir(spec.LogPath), 0o755)
	}
	if err != nil {
		removeFile(in.terminationFile)
		return "", fmt.Errorf("create container %s: %w", spec.Name, err)
	}
	if err := r.gate.enter(ctx, stageCreate); err != nil {
		removeFile(in.terminationFile)
		return "", classify(err, "create container %s", spec.Name)
	}
	id, err := r.rs.CreateContainer(quiet(ctx), spec.SandboxID, cfg, sb.config)
	r.gate.leave()
	if err != nil {
		removeFile(in.terminationFile)
		return "", classify(err, "create container %s", spec.Name)
	}
	r.remember(id, metaOf(cfg.Labels, cfg.Annotations, spec.Name))
	r.events.observe(id, spec.PodUID, spec.Name, runtime.StateCreated)
	r.log.Info("container created", "pod", spec.PodNamespace+"/"+spec.PodName, "container", spec.Name, "id", id)
	return id, nil
}

// newTerminationFile creates the host file behind a container's
// termination message: world-writable, as upstream's, since the process
// may run as any user.
func (r *Runtime) newTerminationFile(spec runtime.ContainerSpec) (string, error) {
	dir := r.terminationDir(spec.SandboxID)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	b := make([]byte, 4)
	rand.Read(b)
	p := filepath.Join(dir, fmt.Sprintf("%s-%d-%s", spec.Name, spec.Attempt, hex.EncodeToString(b)))
	f, err := os.OpenFile(p, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o666)
	if err != nil {
		return "", err
	}
	defer f.Close()
	return p, f.Chmod(0o666) // past the umask
}

func removeFile(p string) {
	if p != "" {
		os.Remove(p)
	}
}

// Start starts the container. A command the runtime cannot run is not an
// error: the container is then exited, with Reason "StartError", exit code
// 128 and the runtime's message (containerd's own record of it).
func (r *Runtime) Start(ctx context.Context, id string) error {
	m, err := r.meta(ctx, id)
	if err != nil {
		return fmt.Errorf("start container %s: %w", id, err)
	}
	if r.stoppedBeforeStart(id) {
		return fmt.Errorf("start container %s: it was stopped before it started: %w", id, runtime.ErrConflict)
	}
	if err := r.gate.enter(ctx, stageStart); err != nil {
		return classify(err, "start container %s", id)
	}
	startErr := r.rs.StartContainer(quiet(ctx), id)
	r.gate.leave()
	if startErr == nil {
		r.events.observe(id, m.podUID, m.name, runtime.StateRunning)
		r.log.Info("container started", "container", m.name, "id", id)
		return nil
	}
	resp, err := r.rs.ContainerStatus(quiet(ctx), id, false)
	if err != nil {
		return classify(startErr, "start container %s", id)
	}
	switch st := containerStatus(resp.GetStatus()); {
	case st.State == runtime.StateExited && st.Reason == "StartError" && st.StartedAt.IsZero():
		r.events.observe(id, m.podUID, m.name, runtime.StateExited)
		r.log.Info("container could not start", "container", m.name, "id", id, "message", st.Message)
		return nil
	case st.State != runtime.StateCreated:
		// Runtimes answer Unknown for a container started before.
		return &criError{op: fmt.Sprintf("start container %s (it is %s)", id, st.State), class: runtime.ErrConflict, err: startErr}
	}
	return classify(startErr, "start container %s", id)
}

// Stop stops the container: its stop signal, then SIGKILL after grace
// (rounded up to whole seconds, CRI's unit). A runtime that ignores
// ContainerConfig.stop_signal (containerd before 2.1) gets the signal sent
// here, to the container's main process, before CRI's stop kills it.
func (r *Runtime) Stop(ctx context.Context, id string, grace time.Duration) error {
	m, err := r.meta(ctx, id)
	if err != nil {
		return fmt.Errorf("stop container %s: %w", id, err)
	}
	if r.stopUnstarted(ctx, id, m) {
		return nil
	}
	timeout := int64((grace + time.Second - 1) / time.Second)
	if timeout > 0 && m.stopSignal != 0 {
		if r.stopBySignal(ctx, id, m.stopSignal, grace) {
			timeout = 0
		}
	}
	if err := r.rs.StopContainer(quiet(ctx), id, timeout); err != nil {
		return classify(err, "stop container %s", id)
	}
	return nil
}

// Remove removes the container (killing it if it runs) and its
// termination message file; its log stays, in the pod's log directory.
func (r *Runtime) Remove(ctx context.Context, id string) error {
	m, err := r.meta(ctx, id)
	if err != nil {
		return fmt.Errorf("remove container %s: %w", id, err)
	}
	if err := r.rs.RemoveContainer(quiet(ctx), id); err != nil {
		return classify(err, "remove container %s", id)
	}
	removeFile(m.terminationFile)
	r.mu.Lock()
	delete(r.containers, id)
	r.forgetEarlyExitLocked(id)
	r.mu.Unlock()
	r.events.forget(id)
	r.log.Info("container removed", "container", m.name, "id", id)
	return nil
}

func (r *Runtime) remember(id string, m containerMeta) {
	r.mu.Lock()
	r.containers[id] = m
	r.mu.Unlock()
}

// meta returns what is known of container id, asking the runtime once if
// nothing is: an unknown container is ErrNotFound.
func (r *Runtime) meta(ctx context.Context, id string) (containerMeta, error) {
	r.mu.Lock()
	m, ok := r.containers[id]
	r.mu.Unlock()
	if ok {
		return m, nil
	}
	if id == "" {
		return m, fmt.Errorf("no container ID: %w", runtime.ErrNotFound)
	}
	resp, err := r.rs.ContainerStatus(quiet(ctx), id, false)
	if err != nil {
		return m, classify(err, "container %s", id)
	}
	s := resp.GetStatus()
	if s == nil {
		return m, fmt.Errorf("container %s: %w", id, runtime.ErrNotFound)
	}
	m = metaOf(s.GetLabels(), s.GetAnnotations(), s.GetMetadata().GetName())
	r.remember(id, m)
	return m, nil
}

// errNoPid: the runtime did not say which process is the container's.
var errNoPid = errors.New("no pid in the runtime's verbose container status")

// mainPid reads the container's main process from the verbose status
// (containerd and CRI-O both report it as info.pid).
func mainPid(resp *runtimeapi.ContainerStatusResponse) (int, error) {
	var info struct {
		Pid int `json:"pid"`
	}
	if err := unmarshalInfo(resp.GetInfo(), &info); err != nil || info.Pid <= 0 {
		return 0, errNoPid
	}
	return info.Pid, nil
}
