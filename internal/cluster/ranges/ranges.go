// Package ranges holds the cluster's address ranges: the Service network and
// the default pod network. The control plane allocates from them and every
// node routes by them, so they live apart from both: a node agent reads them
// without linking the control plane.
package ranges

const (
	// ServiceCIDR is the Service network, as k3s's.
	ServiceCIDR = "10.43.0.0/16"
	// ServiceIP is the first address of the Service network: the
	// `kubernetes` Service.
	ServiceIP = "10.43.0.1"
	// DefaultClusterCIDR is the pod network, as k3s's: each node gets a /24
	// of it (Node.spec.podCIDR) from the controller manager.
	DefaultClusterCIDR = "10.42.0.0/16"
)
