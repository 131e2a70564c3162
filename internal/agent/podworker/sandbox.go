package podworker

import (
	"context"
	"maps"
	"sort"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/podvisor/podvisor/internal/agent/lifecycle"
	"github.com/podvisor/podvisor/internal/agent/podcgroup"
	"github.com/podvisor/podvisor/internal/agent/podnames"
	"github.com/podvisor/podvisor/internal/agent/podsecurity"
	"github.com/podvisor/podvisor/internal/runtime"
)

// The pod's sandbox: made when the core asks for one (ActionRunSandbox),
// its IPs are the pod's, stopped once the pod is done, removed with the
// pod. A failed creation is retried after sandboxRetry, as the kubelet's
// pod worker retries a failed sync.
const sandboxRetry = 10 * time.Second

// sandboxReadyLocked: the newest sandbox is ready, so containers can start.
func (w *worker) sandboxReadyLocked() bool {
	n := len(w.sandboxes)
	return n > 0 && w.sandboxes[n-1].State == runtime.SandboxReady
}

// podIPLocked is the pod's IP: the newest sandbox's, kept after it stopped
// (a terminated pod still shows the IP it had, as upstream); empty before
// the first sandbox.
func (w *worker) podIPLocked() string {
	if n := len(w.sandboxes); n > 0 && len(w.sandboxes[n-1].IPs) > 0 {
		return w.sandboxes[n-1].IPs[0]
	}
	return ""
}

func (w *worker) podIP() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.podIPLocked()
}

// observeSandbox records a new status of one of the pod's sandboxes: one
// that stopped behind the agent's back makes the pod run again in a new one
// (lifecycle/sandbox.go).
func (w *worker) observeSandbox(st runtime.SandboxStatus) {
	w.mu.Lock()
	if !updateSandbox(w.sandboxes, st) {
		w.sandboxes = append(w.sandboxes, st)
		sortSandboxes(w.sandboxes)
	}
	w.mu.Unlock()
	w.poke()
}

// updateSandbox replaces the entry of st.ID in list with st, unless that
// would take a stopped sandbox back to ready (a stale read): a sandbox
// never comes back. It reports whether list has st.ID.
func updateSandbox(list []runtime.SandboxStatus, st runtime.SandboxStatus) bool {
	for i := range list {
		if list[i].ID == st.ID {
			if list[i].State != runtime.SandboxNotReady {
				list[i] = st
			}
			return true
		}
	}
	return false
}

// oldSandboxLocked: an instance of sandbox id ran in a sandbox that is not
// the pod's ready one (a dead one, or one a newer sandbox replaced). An
// instance without a sandbox (made before sandboxes existed) is not old.
func (w *worker) oldSandboxLocked(id string) bool {
	n := len(w.sandboxes)
	if id == "" || n == 0 {
		return false
	}
	newest := w.sandboxes[n-1]
	return id != newest.ID || newest.State != runtime.SandboxReady
}

// sandboxIDLocked is the sandbox new containers join.
func (w *worker) sandboxIDLocked() string {
	if n := len(w.sandboxes); n > 0 {
		return w.sandboxes[n-1].ID
	}
	return ""
}

func sortSandboxes(list []runtime.SandboxStatus) {
	sort.SliceStable(list, func(i, j int) bool {
		if list[i].Attempt != list[j].Attempt {
			return list[i].Attempt < list[j].Attempt
		}
		return list[i].CreatedAt.Before(list[j].CreatedAt)
	})
}

// runSandbox makes a new sandbox (Attempt one past the newest) on its own
// goroutine; one at a time, and not before a failed one's retry time. The
// core asks for one only while the newest sandbox is not ready, but its
// decision may predate a sandbox that another run just made: that one is
// kept, not stopped and replaced.
func (w *worker) runSandbox(ctx context.Context, pod *v1.Pod) {
	now := w.m.cfg.Clock.Now()
	w.mu.Lock()
	if w.sandboxBusy || now.Before(w.sandboxRetryAt) || w.sandboxReadyLocked() {
		w.mu.Unlock()
		return
	}
	w.sandboxBusy = true
	var attempt int32
	if n := len(w.sandboxes); n > 0 {
		attempt = w.sandboxes[n-1].Attempt + 1
	}
	w.mu.Unlock()
	go func() {
		defer w.poke()
		rt := w.m.cfg.Runtime
		// A dead sandbox keeps its network (address, namespace) until it is
		// stopped: release it first, as the kubelet stops the old sandbox
		// before making the new one.
		w.stopSandboxes(ctx, pod, "")
		spec, err := w.m.sandboxSpec(pod, attempt, w.podDir())
		var id string
		if err == nil {
			id, err = rt.Sandboxes.RunSandbox(ctx, spec)
		}
		var st runtime.SandboxStatus
		if err == nil {
			st, err = rt.Sandboxes.SandboxStatus(ctx, id)
		}
		w.mu.Lock()
		w.sandboxBusy = false
		finished := w.finished
		switch {
		case err == nil && finished:
			// The pod went (a force delete) while the sandbox was made:
			// finish removed the others, and nothing would remove this one.
		case err == nil:
			if !updateSandbox(w.sandboxes, st) { // an event may have told of it first
				w.sandboxes = append(w.sandboxes, st)
				sortSandboxes(w.sandboxes)
			}
		default:
			w.sandboxRetryAt = w.m.cfg.Clock.Now().Add(sandboxRetry)
		}
		w.mu.Unlock()
		if err == nil && finished {
			if err := rt.Sandboxes.RemoveSandbox(ctx, id); err != nil && !runtime.IsNotFound(err) {
				w.m.cfg.Log.Warn("removing the sandbox of a pod that went while it was made", "pod", pod.Namespace+"/"+pod.Name, "id", id, "err", err)
			}
			w.removeCgroup(pod) // finish could not: the sandbox ran in it
			return
		}
		if err != nil {
			w.m.cfg.Log.Warn("creating pod sandbox", "pod", pod.Namespace+"/"+pod.Name, "err", err)
			w.m.cfg.Recorder.Eventf(pod, v1.EventTypeWarning, "FailedCreatePodSandBox", "Failed to create pod sandbox: %v", err)
			w.m.cfg.Clock.AfterFunc(sandboxRetry, w.poke)
		}
	}()
}

// stopSandboxes stops the pod's sandboxes other than keep that this worker
// has not stopped yet (ready ones once the pod is done, dead ones whose network
// is still held). A stop that fails (a CNI plugin's error) is tried again
// sandboxRetry later (stopOldSandboxes, or at done): until then the
// sandbox's address stays taken.
func (w *worker) stopSandboxes(ctx context.Context, pod *v1.Pod, keep string) {
	w.mu.Lock()
	var ids []string
	for _, sb := range w.sandboxes {
		if !w.sandboxStopped[sb.ID] && sb.ID != keep {
			ids = append(ids, sb.ID)
		}
	}
	w.mu.Unlock()
	all := true
	for _, id := range ids {
		err := w.m.cfg.Runtime.Sandboxes.StopSandbox(ctx, id)
		if err != nil && !runtime.IsNotFound(err) {
			all = false
			w.m.cfg.Log.Warn("stopping pod sandbox, will retry", "pod", pod.Namespace+"/"+pod.Name, "id", id, "err", err)
			continue
		}
		w.mu.Lock()
		w.sandboxStopped[id] = true
		for i := range w.sandboxes {
			if w.sandboxes[i].ID == id {
				w.sandboxes[i].State = runtime.SandboxNotReady
			}
		}
		w.mu.Unlock()
	}
	if !all {
		w.m.cfg.Clock.AfterFunc(sandboxRetry, w.poke)
	}
}

// stopOldSandboxes stops, once the pod runs in a newer ready sandbox, the
// earlier ones not stopped yet: nothing runs in them any more (a new
// sandbox is made only after the containers of the dead one stopped), and
// one re-adopted from an earlier agent, or whose stop failed, may still
// hold its network.
func (w *worker) stopOldSandboxes(ctx context.Context, pod *v1.Pod) {
	w.mu.Lock()
	n := len(w.sandboxes)
	pending := false
	for i, sb := range w.sandboxes {
		pending = pending || (i < n-1 && !w.sandboxStopped[sb.ID])
	}
	ready := n > 0 && w.sandboxes[n-1].State == runtime.SandboxReady
	var newest string
	if n > 0 {
		newest = w.sandboxes[n-1].ID
	}
	w.mu.Unlock()
	if pending && ready {
		w.stopSandboxes(ctx, pod, newest)
	}
}

// removeSandboxes removes every sandbox of the pod (and what is left in
// them). Removing stops a sandbox first; a removal that fails is tried
// twice more, a second apart, then left to the next agent start's cleanup
// of what no pod claims.
func (w *worker) removeSandboxes(ctx context.Context, pod *v1.Pod) {
	w.mu.Lock()
	list := w.sandboxes
	w.sandboxes = nil
	w.mu.Unlock()
	defer w.removeCgroup(pod)
	for _, sb := range list {
		for try := 1; ; try++ {
			err := w.m.cfg.Runtime.Sandboxes.RemoveSandbox(ctx, sb.ID)
			if err == nil || runtime.IsNotFound(err) {
				break
			}
			if try == 3 || ctx.Err() != nil {
				w.m.cfg.Log.Warn("removing pod sandbox", "pod", pod.Namespace+"/"+pod.Name, "id", sb.ID, "err", err)
				break
			}
			select {
			case <-w.m.cfg.Clock.After(time.Second):
			case <-ctx.Done():
			}
		}
	}
}

// sandboxSpec is the sandbox a kubelet asks for: the pod's identity,
// labels and annotations, its hostname, DNS, host network, log directory
// and host ports. A hostname it cannot make (an FQDN over 64 characters) or
// a node resolv.conf it cannot read fails the sandbox, as upstream.
func (m *Manager) sandboxSpec(pod *v1.Pod, attempt int32, logDir string) (runtime.SandboxSpec, error) {
	// The pod's identity labels a kubelet adds are the runtime's to add:
	// the identity is in the spec's fields.
	spec := runtime.SandboxSpec{
		PodUID: string(pod.UID), PodNamespace: pod.Namespace, PodName: pod.Name, Attempt: attempt,
		HostNetwork: pod.Spec.HostNetwork, LogDir: logDir,
		Labels: maps.Clone(pod.Labels), Annotations: maps.Clone(pod.Annotations),
	}
	if !pod.Spec.HostNetwork {
		host, domain, err := podnames.HostnameAndDomain(pod, m.cfg.DNS.ClusterDomain)
		if err != nil {
			return spec, err
		}
		if spec.Hostname, err = podnames.KernelHostname(host, domain, pod.Spec.SetHostnameAsFQDN); err != nil {
			return spec, err
		}
	}
	if m.cfg.Runtime.Features.Security {
		if err := podsecurity.Sandbox(pod, m.cfg.Security, &spec); err != nil {
			return spec, err
		}
	}
	if m.cfg.Cgroups != nil {
		qos := lifecycle.QOSClass(pod)
		spec.CgroupParent = podcgroup.Parent(string(pod.UID), qos)
		if err := m.cfg.Cgroups.Ensure(spec.CgroupParent, podcgroup.Config(pod, qos)); err != nil {
			return spec, err
		}
	}
	if m.cfg.Runtime.Features.PodNetwork {
		// On the process runtime every pod resolves as the node does.
		dns, err := m.podDNS(pod)
		if err != nil {
			return spec, err
		}
		spec.DNS = dns
	}
	for _, c := range append(append([]v1.Container{}, pod.Spec.InitContainers...), pod.Spec.Containers...) {
		for _, p := range c.Ports {
			if p.HostPort == 0 {
				continue
			}
			proto := string(p.Protocol)
			if proto == "" {
				proto = string(v1.ProtocolTCP)
			}
			spec.Ports = append(spec.Ports, runtime.PortMapping{Protocol: proto, ContainerPort: p.ContainerPort, HostPort: p.HostPort, HostIP: p.HostIP})
		}
	}
	return spec, nil
}

// removeCgroup removes the pod's cgroup once its sandboxes are gone.
func (w *worker) removeCgroup(pod *v1.Pod) {
	if w.m.cfg.Cgroups == nil {
		return
	}
	name := pod.Namespace + "/" + pod.Name
	if err := w.m.removePodCgroup(podcgroup.Parent(string(pod.UID), lifecycle.QOSClass(pod)), name); err != nil {
		w.m.cfg.Log.Warn("removing the pod's cgroup", "pod", name, "err", err)
	}
}

// removePodCgroup removes the cgroup parent of pod (its name, for the
// log), whose containers and sandboxes are gone. A process still in it has
// outlived its container and sandbox (one that escaped, or one still
// dying): it is killed, as the kubelet kills what is left in a pod's cgroup
// before removing it, and the removal is tried again while it dies.
func (m *Manager) removePodCgroup(parent, pod string) error {
	err := m.cfg.Cgroups.Remove(parent)
	if err == nil {
		return nil
	}
	pids, kerr := m.cfg.Cgroups.KillProcesses(parent)
	if len(pids) > 0 || kerr != nil {
		m.cfg.Log.Warn("killed processes left in the cgroup of a pod that is gone", "pod", pod, "pids", pids, "err", kerr)
	}
	for try := 0; try < cgroupRemoveTries && err != nil && len(pids) > 0; try++ {
		<-m.cfg.Clock.After(cgroupRemoveRetry)
		err = m.cfg.Cgroups.Remove(parent)
	}
	return err
}

// A pod cgroup whose processes were just killed is removed again up to
// cgroupRemoveTries times, cgroupRemoveRetry apart (a killed process leaves
// its cgroup within milliseconds).
const (
	cgroupRemoveTries = 10
	cgroupRemoveRetry = 100 * time.Millisecond
)
