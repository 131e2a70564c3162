package cri

// Labels and annotations a kubelet puts on CRI objects, so that crictl and
// any other tool reading the runtime sees podvisor's pods as Kubernetes pods.
const (
	labelPodName       = "io.kubernetes.pod.name"
	labelPodNamespace  = "io.kubernetes.pod.namespace"
	labelPodUID        = "io.kubernetes.pod.uid"
	labelContainerName = "io.kubernetes.container.name"

	annotationRestartCount    = "io.kubernetes.container.restartCount"
	annotationTerminationPath = "io.kubernetes.container.terminationMessagePath"
)

// podvisor's own annotations: what the runtime must give back after an
// agent restart that CRI itself does not keep.
const (
	// annotationSandboxSpec holds the runtime.SandboxSpec (JSON) a sandbox
	// was run with: CreateContainer needs the sandbox's config.
	annotationSandboxSpec = "podvisor.io/sandbox-spec"
	// annotationSandboxID: CRI's ContainerStatus does not name the sandbox.
	annotationSandboxID = "podvisor.io/sandbox-id"
	// annotationTerminationFile is the host file bind-mounted at the
	// container's terminationMessagePath.
	annotationTerminationFile = "podvisor.io/termination-message-file"
	// annotationStopSignal is the container's stop signal (a number), for
	// runtimes that ignore ContainerConfig.stop_signal.
	annotationStopSignal = "podvisor.io/stop-signal"
)
