package process

import (
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// defaultPath is the PATH a container gets when its spec sets none, as containerd.
const defaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// TerminationMessageEnv names the variable that tells a process where its
// termination message goes on the host. Without a mount namespace the spec's
// terminationMessagePath cannot be shown at its own path.
const TerminationMessageEnv = "PODVISOR_TERMINATION_MESSAGE_PATH"

// containerEnv is the environment of the container's processes: the spec's
// and nothing of the agent's, plus a PATH if the spec has none and the
// termination message file.
func containerEnv(c instanceConfig) []string {
	env := append([]string(nil), c.Spec.Env...)
	if _, ok := lookupEnv(env, "PATH"); !ok {
		env = append(env, "PATH="+defaultPath)
	}
	if c.TerminationMessageFile != "" {
		env = append(env, TerminationMessageEnv+"="+c.TerminationMessageFile)
	}
	return env
}

// lookupEnv returns the last value of key, as a shell would see it.
func lookupEnv(env []string, key string) (string, bool) {
	for i := len(env) - 1; i >= 0; i-- {
		if k, v, ok := strings.Cut(env[i], "="); ok && k == key {
			return v, true
		}
	}
	return "", false
}

// workingDir is the spec's working directory, or the instance's own; a
// container run as another user starts in / (as a container whose image sets
// no WORKDIR), since the agent's state directory is closed to other users.
func workingDir(dir instanceDir, c instanceConfig) string {
	if c.Spec.WorkingDir != "" {
		return c.Spec.WorkingDir
	}
	if c.Spec.User != nil {
		return "/"
	}
	return dir.path(workDir)
}

// lookPath finds name as exec.LookPath would, but in the container's PATH
// rather than the caller's; a relative path with a slash is taken from cwd.
// Errors read as upstream's: exec: "x": executable file not found in $PATH.
func lookPath(name, path, cwd string) (string, error) {
	if strings.Contains(name, "/") {
		p := name
		if !filepath.IsAbs(p) {
			p = filepath.Join(cwd, p)
		}
		if err := executable(p); err != nil {
			return "", &exec.Error{Name: name, Err: err}
		}
		return p, nil
	}
	for _, d := range filepath.SplitList(path) {
		if d == "" {
			d = "."
		}
		if !filepath.IsAbs(d) {
			d = filepath.Join(cwd, d)
		}
		p := filepath.Join(d, name)
		if err := executable(p); err == nil {
			return p, nil
		}
	}
	return "", &exec.Error{Name: name, Err: exec.ErrNotFound}
}

func executable(p string) error {
	fi, err := os.Stat(p)
	if err != nil {
		return err
	}
	if fi.IsDir() || fi.Mode()&0o111 == 0 {
		return fs.ErrPermission
	}
	return nil
}
