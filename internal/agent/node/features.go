package node

import (
	"sync"

	ndf "k8s.io/component-helpers/nodedeclaredfeatures"
	ndfeatures "k8s.io/component-helpers/nodedeclaredfeatures/features"
	"k8s.io/component-helpers/nodedeclaredfeatures/features/extendwebsocketstokubelet"
	"k8s.io/component-helpers/nodedeclaredfeatures/features/restartallcontainers"
	ndftypes "k8s.io/component-helpers/nodedeclaredfeatures/types"
)

// implementedGates are the feature gates whose node-side behaviour the agent
// implements. Only these count as enabled when the node's declared features
// are discovered: a node must never declare what it cannot do, since the
// scheduler places pods that need a feature only on nodes declaring it.
var implementedGates = ndftypes.FeatureGateMap{
	restartallcontainers.RestartAllContainersOnContainerExits: true,
	// The agent API translates WebSocket exec, attach and port-forward to
	// SPDY itself, so the API server passes those clients through.
	extendwebsocketstokubelet.ExtendWebSocketsToKubeletFeatureGate: true,
}

// declaredFeatures is node.status.declaredFeatures (KEP-5328): upstream's
// feature registry evaluated against the gates the agent implements, sorted
// as the kubelet writes them. It cannot change while the agent runs, so it
// is computed once, not on every status sync.
var declaredFeatures = sync.OnceValue(func() []string {
	return ndf.New(ndfeatures.AllFeatures).DiscoverNodeFeatures(&ndf.NodeConfiguration{FeatureGates: implementedGates})
})
