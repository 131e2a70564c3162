package runtime

import "errors"

// Set is what one runtime offers, one field per concern, as its
// constructor hands it out. A nil optional field says the runtime lacks
// that concern altogether; callers check the field, never the runtime's
// type.
//
// All the fields of one Set are usually the same value (a runtime
// implements every concern it has), but callers must not rely on it.
type Set struct {
	// Info names the runtime (the scheme of container IDs, its version).
	Info Info
	// Features: how its containers and sandboxes honour their specs.
	Features Features

	// Required.
	Containers Containers
	Sandboxes  Sandboxes
	Exec       Executor
	Stats      Stats
	// Events delivers state changes (start, exit) of every instance, and
	// the stop of a sandbox the agent did not stop itself; the agent
	// re-reads the status. The channel is never closed.
	Events <-chan Event

	// Optional.
	// Images: the runtime runs ContainerSpec.Image (and mounts image
	// volumes); nil: a container is ContainerSpec.Command run on the host.
	Images Images
	// Streams: interactive sessions (exec, attach, port-forward), and with
	// attach a container's stdin and TTY (ContainerSpec.Stdin, TTY); nil:
	// none of them.
	Streams Streamer
	// Logs: container logs can be rotated while they run; nil: they cannot.
	Logs LogReopener
}

// Check refuses a set without one of the required concerns.
func (s Set) Check() error {
	if s.Containers == nil || s.Sandboxes == nil || s.Exec == nil || s.Stats == nil || s.Events == nil {
		return errors.New("runtime: a runtime set needs containers, sandboxes, exec, stats and events")
	}
	return nil
}
