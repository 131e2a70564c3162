package serviceproxy

import (
	"fmt"
	"regexp"
	"strconv"
)

// Mode is the kube-proxy backend (its --proxy-mode).
type Mode string

const (
	NFTables Mode = "nftables"
	IPTables Mode = "iptables"
)

// Host is what this machine offers a service proxy: the kernel's release
// (uname -r), `nft --version`'s output ("" when nft is missing) and whether
// an iptables binary is on PATH.
type Host struct {
	KernelRelease string
	NFTVersion    string
	IPTables      bool
}

// Upstream's minimums for kube-proxy's nftables mode: the kernel features it
// uses arrived in Linux 5.13, and the nft syntax it writes needs nft 1.0.1.
var (
	minKernel = version{5, 13, 0}
	minNFT    = version{1, 0, 1}
)

// ChooseMode picks nftables where the kernel and the nft tool support it,
// else iptables; the reason says why, for the log.
func ChooseMode(h Host) (Mode, string, error) {
	kernel, kok := parseVersion(h.KernelRelease)
	nft, nok := parseVersion(h.NFTVersion)
	var why string
	switch {
	case !kok:
		why = fmt.Sprintf("kernel release %q is not a version", h.KernelRelease)
	case kernel.less(minKernel):
		why = fmt.Sprintf("kernel %s is older than %s", kernel, minKernel)
	case h.NFTVersion == "":
		why = "no nft command on PATH"
	case !nok:
		why = fmt.Sprintf("nft version %q is not a version", h.NFTVersion)
	case nft.less(minNFT):
		why = fmt.Sprintf("nft %s is older than %s", nft, minNFT)
	default:
		return NFTables, fmt.Sprintf("kernel %s and nft %s support it", kernel, nft), nil
	}
	if !h.IPTables {
		return "", "", fmt.Errorf("no usable service proxy backend: nftables unusable (%s) and no iptables command on PATH", why)
	}
	return IPTables, "nftables unusable: " + why, nil
}

type version [3]int

func (v version) String() string { return fmt.Sprintf("%d.%d.%d", v[0], v[1], v[2]) }

func (v version) less(o version) bool {
	for i := range v {
		if v[i] != o[i] {
			return v[i] < o[i]
		}
	}
	return false
}

// versionRE finds the first dotted number: "6.18.44-fc-v657" or
// "nftables v1.0.6 (Lester Gooch #5)".
var versionRE = regexp.MustCompile(`(\d+)\.(\d+)(?:\.(\d+))?`)

func parseVersion(s string) (version, bool) {
	m := versionRE.FindStringSubmatch(s)
	if m == nil {
		return version{}, false
	}
	var v version
	for i, part := range m[1:] {
		if part != "" {
			v[i], _ = strconv.Atoi(part)
		}
	}
	return v, true
}
