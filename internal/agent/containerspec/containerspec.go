// Package containerspec computes what a container sees: its environment
// (envFrom, env with $(VAR) expansion, the downward API, the service links),
// the user it runs as, and its cgroup resources, from the pod, the container
// and the objects it reads. It does no I/O beyond the Objects it is given,
// so the process and CRI runtimes get the same view, computed once.
package containerspec

// ConfigError is a container that cannot be created as specified; the agent
// shows it as the waiting reason CreateContainerConfigError with a Failed
// event, and retries when the pod or what it reads changes.
type ConfigError struct{ Msg string }

func (e ConfigError) Error() string { return e.Msg }
