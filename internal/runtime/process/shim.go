package process

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/utils/clock"

	"github.com/podvisor/podvisor/internal/runtime"
)

// The shim supervises one container instance. The agent starts it as
//
//	podvisor __shim <instance dir>
//
// in a new session with fd 3 the write end of a pipe. The shim starts the
// command, records "running" (or "exited" with StartError) in state.json and
// closes fd 3: the agent's Start returns then. When the command's main
// process exits, the shim kills what is left of the container, records the
// exit in state.json and only then exits itself, so that an agent watching
// the shim's pid finds the exit recorded, and one that was not running at the
// time finds it later.

const (
	readyFD = 3
	// cleanupTimeout bounds the kill-and-reap of leftover processes and the
	// drain of the log pipes after the main process exited.
	cleanupTimeout = 10 * time.Second
)

// RunShim is the shim's main; it returns the shim's exit code.
func RunShim(args []string) int {
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	if len(args) != 1 {
		log.Error("usage: podvisor __shim <instance dir>")
		return 2
	}
	var ready *os.File
	if _, err := unix.FcntlInt(readyFD, unix.F_GETFD, 0); err == nil {
		unix.CloseOnExec(readyFD) // the container must not hold the agent's pipe
		ready = os.NewFile(readyFD, "ready")
	}
	s := &shim{dir: instanceDir(args[0]), clock: clock.RealClock{}, log: log}
	if err := s.run(ready); err != nil {
		log.Error("shim failed", "dir", args[0], "err", err)
		return 1
	}
	return 0
}

type shim struct {
	dir   instanceDir
	clock clock.Clock
	log   *slog.Logger
}

// started is a running container as the shim sees it.
type started struct {
	proc    *os.Process
	cgroups cgroupSet
	logs    *criLog
	copying sync.WaitGroup // stdout and stderr copiers
	hub     *attachHub     // attach sessions
	tty     *os.File       // the terminal's master, with TTY
}

func (s *shim) run(ready *os.File) error {
	cfg, err := s.dir.readConfig()
	if err != nil {
		return err
	}
	s.log = s.log.With("container", cfg.Spec.Name, "pod", cfg.Spec.PodNamespace+"/"+cfg.Spec.PodName, "id", cfg.ID)
	// Orphans of the container (setsid, double fork) are re-parented to the
	// shim, so it can find, kill and reap them even without cgroups.
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		s.log.Warn("cannot become child subreaper", "err", err)
	}
	// Every signal is caught, none ignored: a caught signal is reset to the
	// default in the container, an ignored one (signal.Ignore, or inherited
	// SIG_IGN) would stay ignored there. TERM and INT go on to the container.
	sigs := make(chan os.Signal, 16)
	signal.Notify(sigs)
	var mainPid atomic.Int64
	go func() {
		for sig := range sigs {
			if p := mainPid.Load(); p > 0 && (sig == syscall.SIGTERM || sig == syscall.SIGINT) {
				signalGroup(int(p), sig.(syscall.Signal))
			}
		}
	}()

	c, startErr := s.start(cfg)
	if startErr != nil {
		s.log.Info("container did not start", "err", startErr)
		err := s.dir.writeState(instanceState{
			State:      runtime.StateExited.String(),
			FinishedAt: s.clock.Now(),
			ExitCode:   128,
			Reason:     "StartError",
			Message:    startErr.Error(),
		})
		closeReady(ready)
		return err
	}
	st := instanceState{
		State:     runtime.StateRunning.String(),
		Pid:       c.proc.Pid,
		StartedAt: s.clock.Now(),
		Cgroups:   c.cgroups.Dirs,
	}
	if ps, err := readProcStat(c.proc.Pid); err == nil {
		st.PidStartTime = ps.StartTime // unreaped child: still the same process
	}
	if err := s.dir.writeState(st); err != nil {
		// Without a record nobody could stop it: do not leave it running.
		c.proc.Kill()
		s.log.Error("cannot record start", "err", err)
	}
	closeReady(ready)
	s.log.Info("container started", "pid", c.proc.Pid)

	mainPid.Store(int64(c.proc.Pid))
	ws := s.waitMain(c.proc.Pid)
	mainPid.Store(0)
	s.killRest(c)
	s.drainLogs(c)
	c.hub.close() // sessions end after the last output

	st.State = runtime.StateExited.String()
	st.FinishedAt = s.clock.Now()
	switch {
	case ws.Signaled():
		st.Signal = int32(ws.Signal())
		st.ExitCode = 128 + st.Signal // as runc: SIGKILL is 137
	default:
		st.ExitCode = int32(ws.ExitStatus())
	}
	if c.cgroups.oomKilled() {
		st.Reason = "OOMKilled"
	}
	if err := c.cgroups.remove(); err != nil {
		s.log.Warn("cgroup left behind", "err", err)
	}
	s.log.Info("container exited", "exitCode", st.ExitCode, "signal", st.Signal, "reason", st.Reason)
	return s.dir.writeState(st)
}

func closeReady(f *os.File) {
	if f != nil {
		f.Close()
	}
}

// start runs the command. Its error is the StartError message.
func (s *shim) start(cfg instanceConfig) (*started, error) {
	argv := append(slices.Clip(cfg.Spec.Command), cfg.Spec.Args...)
	if len(argv) == 0 {
		return nil, fmt.Errorf("no command")
	}
	env := containerEnv(cfg)
	cwd := workingDir(s.dir, cfg)
	if fi, err := os.Stat(cwd); err != nil {
		return nil, fmt.Errorf("chdir to cwd (%q) failed: %w", cwd, errors.Unwrap(err))
	} else if !fi.IsDir() {
		return nil, fmt.Errorf("chdir to cwd (%q) failed: %w", cwd, syscall.ENOTDIR)
	}
	path, _ := lookupEnv(env, "PATH")
	bin, err := lookPath(argv[0], path, cwd)
	if err != nil {
		return nil, err
	}
	logs, err := openCRILog(cfg.Spec.LogPath, s.clock)
	if err != nil {
		return nil, fmt.Errorf("open container log: %w", err)
	}
	c := &started{logs: logs}
	ok := false
	defer func() {
		if !ok {
			logs.Close()
			c.cgroups.remove()
			if c.hub != nil {
				c.hub.close()
			}
		}
	}()

	root := os.Geteuid() == 0
	var own []string
	if root && !cfg.NoCgroups {
		own, err = selfCgroups()
		if err == nil {
			c.cgroups, err = createCgroups(own, cfg.ID, cfg.Spec.Resources)
		}
		if err != nil && cfg.Spec.Resources != (runtime.Resources{}) {
			// Running it without its limits would be running something else.
			return nil, fmt.Errorf("apply resource limits: %w", err)
		}
		if err != nil {
			s.log.Warn("no cgroup for the container: orphans are found through the process tree only", "err", err)
		}
	}
	if root && cfg.Spec.OOMScoreAdj != 0 {
		// The shim's own, inherited by the container's processes (and by
		// what is exec'd in it), as runc gives them. Lowering it needs
		// CAP_SYS_RESOURCE: without, the container keeps the agent's, as
		// containerd's restrict_oom_score_adj raises it to its own.
		if err := os.WriteFile("/proc/self/oom_score_adj", []byte(strconv.Itoa(cfg.Spec.OOMScoreAdj)), 0); err != nil {
			s.log.Warn("oom_score_adj not set: the agent's is kept", "want", cfg.Spec.OOMScoreAdj, "err", err)
		}
	}
	if cfg.Spec.User != nil {
		if !root {
			return nil, fmt.Errorf("run as user %d: the agent is not root", cfg.Spec.User.UID)
		}
	}

	outR, outW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		outR.Close()
		outW.Close()
		return nil, err
	}
	attr := &os.ProcAttr{
		Dir: cwd,
		Env: env,
		Sys: &syscall.SysProcAttr{Setpgid: true, Credential: credential(cfg.Spec.User)},
	}
	stdin, err := s.stdio(c, cfg, attr, outW, errW)
	if err != nil {
		outR.Close()
		outW.Close()
		errR.Close()
		errW.Close()
		return nil, err
	}
	if c.tty != nil {
		outR.Close() // the terminal is the only output
		errR.Close()
		outR, errR = c.tty, nil
	}
	startFn := func() (*os.Process, error) { return s.startInCgroup(c.cgroups, own, bin, argv, attr) }
	switch mounts := containerMounts(cfg); {
	case root:
		c.proc, err = inNewMountNamespace(s.dir, mounts, startFn)
	case len(cfg.Spec.Mounts) > 0:
		err = fmt.Errorf("mount %s at %s: mounts need the agent to run as root", cfg.Spec.Mounts[0].HostPath, cfg.Spec.Mounts[0].ContainerPath)
	default:
		// The termination message file is then only found through TerminationMessageEnv.
		c.proc, err = startFn()
	}
	stdin.Close()
	outW.Close()
	errW.Close()
	if err != nil {
		outR.Close()
		errR.Close()
		return nil, err
	}
	c.copying.Go(func() {
		defer outR.Close()
		logs.copyStream("stdout", io.TeeReader(outR, c.hub.output(frameStdout)))
	})
	if errR != nil {
		c.copying.Go(func() {
			defer errR.Close()
			logs.copyStream("stderr", io.TeeReader(errR, c.hub.output(frameStderr)))
		})
	}
	ok = true
	return c, nil
}

// stdio gives the container its stdin, stdout and stderr in attr, and
// starts serving attach sessions: stdin is /dev/null unless the container
// has stdin (a pipe the shim writes); with TTY all three are a fresh
// pseudo-terminal whose master the shim keeps (in c.tty), and the
// container's process leads a session with that terminal as its controlling
// one. It returns what the shim closes once the process has started.
func (s *shim) stdio(c *started, cfg instanceConfig, attr *os.ProcAttr, outW, errW *os.File) (*os.File, error) {
	var child *os.File
	var toContainer io.WriteCloser
	switch {
	case cfg.Spec.TTY:
		master, slave, err := openPTY()
		if err != nil {
			return nil, fmt.Errorf("pseudo-terminal: %w", err)
		}
		c.tty, child = master, slave
		attr.Files = []*os.File{slave, slave, slave}
		attr.Sys.Setpgid = false
		attr.Sys.Setsid, attr.Sys.Setctty, attr.Sys.Ctty = true, true, 0
		if cfg.Spec.Stdin {
			toContainer = nopCloser{master} // the terminal stays: its end is the copier's
		}
	case cfg.Spec.Stdin:
		r, w, err := os.Pipe()
		if err != nil {
			return nil, err
		}
		child, toContainer = r, w
		attr.Files = []*os.File{r, outW, errW}
	default:
		null, err := os.Open(os.DevNull)
		if err != nil {
			return nil, err
		}
		child = null
		attr.Files = []*os.File{null, outW, errW}
	}
	hub, err := listenAttach(string(s.dir), toContainer, c.tty, cfg.Spec.StdinOnce, c.logs.reopen, s.log)
	if err != nil {
		child.Close()
		if toContainer != nil {
			toContainer.Close()
		}
		if c.tty != nil {
			c.tty.Close()
		}
		return nil, err
	}
	c.hub = hub
	return child, nil
}

type nopCloser struct{ io.Writer }

func (nopCloser) Close() error { return nil }

// startInCgroup starts the process inside cg from its first instruction: the
// shim joins cg, forks, and goes back to its own cgroups, so the shim is
// never killed with the container.
func (s *shim) startInCgroup(cg cgroupSet, own []string, bin string, argv []string, attr *os.ProcAttr) (*os.Process, error) {
	if len(cg.Dirs) > 0 {
		if err := cg.add(os.Getpid()); err != nil {
			s.log.Warn("cannot join container cgroup", "err", err)
		} else {
			defer func() {
				if err := (cgroupSet{Dirs: own}).add(os.Getpid()); err != nil {
					s.log.Error("cannot leave container cgroup", "err", err)
				}
			}()
		}
	}
	p, err := os.StartProcess(bin, argv, attr)
	if err != nil {
		return nil, unwrapStartErr(argv[0], err)
	}
	return p, nil
}

// unwrapStartErr drops os's "fork/exec <path>:" prefix in favour of
// upstream's wording.
func unwrapStartErr(name string, err error) error {
	if pe, ok := err.(*os.PathError); ok {
		return fmt.Errorf("exec: %q: %w", name, pe.Err)
	}
	return err
}

// waitMain reaps children until the main process is among them.
func (s *shim) waitMain(pid int) syscall.WaitStatus {
	for {
		var ws syscall.WaitStatus
		p, err := syscall.Wait4(-1, &ws, 0, nil)
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			s.log.Error("lost the main process", "err", err)
			return ws
		}
		if p == pid {
			return ws
		}
	}
}

// killRest kills every process left of the container, as a runtime does
// when the init process dies, and reaps those that were re-parented to the shim.
func (s *shim) killRest(c *started) {
	self := os.Getpid()
	deadline := s.clock.Now().Add(cleanupTimeout)
	for {
		signalGroup(c.proc.Pid, syscall.SIGKILL)
		c.cgroups.signal(syscall.SIGKILL)
		signalAll(descendants(self), syscall.SIGKILL)
		noChildren := reapAll()
		if noChildren && len(c.cgroups.procs()) == 0 {
			return
		}
		if s.clock.Now().After(deadline) {
			s.log.Error("processes of the container survive SIGKILL", "cgroupProcs", c.cgroups.procs(), "children", descendants(self))
			return
		}
		s.clock.Sleep(5 * time.Millisecond)
	}
}

// reapAll reaps every exited child without blocking; it reports whether the
// shim has no children left.
func reapAll() bool {
	for {
		var ws syscall.WaitStatus
		p, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
		switch {
		case err == syscall.EINTR:
		case err == syscall.ECHILD:
			return true
		case err != nil || p == 0:
			return false
		}
	}
}

// drainLogs waits for the log copiers to reach EOF; a pipe held open by a
// process that escaped the kill must not keep the exit from being recorded.
func (s *shim) drainLogs(c *started) {
	done := make(chan struct{})
	go func() { c.copying.Wait(); close(done) }()
	select {
	case <-done:
	case <-s.clock.After(cleanupTimeout):
		s.log.Warn("container log pipes still open after exit")
	}
	c.logs.Close()
}
