package images

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/podvisor/podvisor/internal/runtime"
)

// The pulled-image credential check (KEP-2535, the kubelet's
// KubeletEnsureSecretPulledImages, beta and on by default in 1.36): an image
// the agent pulled with a pod's pull secret is not handed to another pod
// that lacks that secret just because it is present on the node; with
// pull policy IfNotPresent that pod pulls it again with its own credentials
// (and fails if it has none that work), with Never it waits with
// ErrImageNeverPull. Images the agent pulled without a pod's credentials
// (anonymously, or with the node's registries.yaml credentials) are open to
// every pod of the node. The decisions are in this file; the records live
// on disk (pullrecords.go) so that a restart keeps them.

// VerificationPolicy is imagePullCredentialsVerificationPolicy: which
// present images need a pod's credentials checked.
type VerificationPolicy string

const (
	// NeverVerify trusts every present image, as before KEP-2535.
	NeverVerify VerificationPolicy = "NeverVerify"
	// NeverVerifyPreloadedImages (the default) checks images the agent
	// pulled; images that were on the node otherwise (imported, pulled by
	// hand) are trusted.
	NeverVerifyPreloadedImages VerificationPolicy = "NeverVerifyPreloadedImages"
	// NeverVerifyAllowlistedImages checks every image except those of
	// preloadedImagesVerificationAllowlist.
	NeverVerifyAllowlistedImages VerificationPolicy = "NeverVerifyAllowlistedImages"
	// AlwaysVerify checks every present image, preloaded ones too.
	AlwaysVerify VerificationPolicy = "AlwaysVerify"
)

// ParseVerificationPolicy checks a configured policy; "" is the default.
func ParseVerificationPolicy(s string) (VerificationPolicy, error) {
	switch p := VerificationPolicy(s); p {
	case "":
		return NeverVerifyPreloadedImages, nil
	case NeverVerify, NeverVerifyPreloadedImages, NeverVerifyAllowlistedImages, AlwaysVerify:
		return p, nil
	}
	return "", fmt.Errorf("invalid configuration: imagePullCredentialsVerificationPolicy %q: must be one of %s, %s, %s, %s",
		s, NeverVerify, NeverVerifyPreloadedImages, NeverVerifyAllowlistedImages, AlwaysVerify)
}

// ValidateAllowlist checks preloadedImagesVerificationAllowlist entries:
// a repository without tag or digest, or a path prefix ending in "/*",
// as upstream.
func ValidateAllowlist(patterns []string) error {
	for _, p := range patterns {
		repo, prefix := strings.CutSuffix(p, "/*")
		last := repo[strings.LastIndex(repo, "/")+1:]
		_, err := ParseName(repo)
		if err != nil || repo == "" || strings.ContainsAny(repo, "@*") || (strings.Contains(last, ":") && !(prefix && !strings.Contains(repo, "/"))) {
			return fmt.Errorf("invalid configuration: preloadedImagesVerificationAllowlist: %q is not an image repository (without tag or digest), optionally ending in /*", p)
		}
	}
	return nil
}

// Verification is the policy with its allowlist.
type Verification struct {
	Policy    VerificationPolicy
	Allowlist []string // repositories, or prefixes ending in "/*"
}

// requires says whether a present image needs the pod's credentials
// checked; pulledByAgent: the agent has a record (or an unfinished pull)
// of it.
func (v Verification) requires(repository string, pulledByAgent bool) bool {
	switch v.Policy {
	case NeverVerify:
		return false
	case AlwaysVerify:
		return true
	case NeverVerifyAllowlistedImages:
		for _, p := range v.Allowlist {
			if prefix, ok := strings.CutSuffix(p, "/*"); ok {
				if strings.HasPrefix(repository, qualify(prefix)+"/") {
					return false
				}
			} else if qualify(p) == repository {
				return false
			}
		}
		return true
	}
	return pulledByAgent // NeverVerifyPreloadedImages, the default
}

// qualify writes a repository as ParseName does (docker.io/library/x).
func qualify(repo string) string {
	if n, err := ParseName(repo); err == nil {
		return n.Repository
	}
	return repo
}

// SecretCredential is a credential taken from a pod's pull secret.
type SecretCredential struct {
	UID       string `json:"uid"`
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	// Hash is a SHA-256 of the credential itself (credentialHash): a pod
	// with another secret holding the same credential may use the image.
	Hash string `json:"credentialHash"`
}

// PullCredentials are the credentials one pull of a repository worked
// with.
type PullCredentials struct {
	// NodeWide: pulled without a pod's credentials (anonymously, or with
	// the node's own), so every pod of the node may use it.
	NodeWide bool               `json:"nodePodsAccessible,omitempty"`
	Secrets  []SecretCredential `json:"kubernetesSecrets,omitempty"`
}

// PulledRecord is what the agent knows of an image it pulled: for each
// repository it was pulled as, the credentials that worked.
type PulledRecord struct {
	ImageID     string                     `json:"imageRef"`
	Updated     time.Time                  `json:"lastUpdatedTime"`
	Credentials map[string]PullCredentials `json:"credentialMapping,omitempty"`
}

// accessCheck is the verdict for a present image and a pod.
type accessCheck struct {
	mustPull bool
	// remember, when set, is a pod credential that matched by hash or by
	// secret alone: recorded, so that the next check of that secret
	// matches exactly (a rotated secret, or a copy in another namespace).
	remember *SecretCredential
}

// checkAccess decides whether a pod may use a present image without
// pulling it (upstream's MustAttemptImagePull): rec is the agent's record
// of the image (nil: none), pulledByAgent whether it has a record or an
// unfinished pull of it, podCreds the pod's secret credentials for the
// repository.
func checkAccess(v Verification, repository string, rec *PulledRecord, pulledByAgent bool, podCreds []SecretCredential) accessCheck {
	if !v.requires(repository, pulledByAgent) {
		return accessCheck{}
	}
	if rec == nil {
		return accessCheck{mustPull: true}
	}
	cached, ok := rec.Credentials[repository]
	if !ok {
		return accessCheck{mustPull: true}
	}
	if cached.NodeWide {
		return accessCheck{}
	}
	for _, pc := range podCreds {
		for _, c := range cached.Secrets {
			sameHash := c.Hash != "" && c.Hash == pc.Hash
			sameSecret := c.UID == pc.UID && c.Namespace == pc.Namespace && c.Name == pc.Name
			if sameHash || sameSecret {
				check := accessCheck{}
				if !(sameHash && sameSecret) && len(cached.Secrets) < maxSecretsRemembered {
					check.remember = &pc
				}
				return check
			}
		}
	}
	return accessCheck{mustPull: true}
}

// maxSecretsRemembered bounds what matching adds to one repository's
// record, so that a namespace churn cannot grow it without end (upstream's
// writeRecordWhileMatchingLimit).
const maxSecretsRemembered = 100

// mergeCredentials adds what a pull (or a match) worked with to a record;
// changed says whether it must be written. nil creds add nothing.
func mergeCredentials(rec PulledRecord, repository string, creds *PullCredentials, now time.Time) (PulledRecord, bool) {
	if creds == nil || (!creds.NodeWide && len(creds.Secrets) == 0) {
		return rec, false
	}
	cur, found := rec.Credentials[repository]
	next := cur
	switch {
	case !found:
		next = *creds
	case cur.NodeWide:
		return rec, false // already open to every pod
	case creds.NodeWide:
		next = PullCredentials{NodeWide: true}
	default:
		next.Secrets = slices.Clone(cur.Secrets)
		changed := false
		for _, s := range creds.Secrets {
			i := slices.IndexFunc(next.Secrets, func(c SecretCredential) bool {
				return c.UID == s.UID && c.Namespace == s.Namespace && c.Name == s.Name
			})
			switch {
			case i < 0:
				next.Secrets = append(next.Secrets, s)
				changed = true
			case next.Secrets[i].Hash != s.Hash:
				next.Secrets[i].Hash = s.Hash // the secret was rotated
				changed = true
			}
		}
		if !changed {
			return rec, false
		}
	}
	out := rec
	out.Credentials = maps.Clone(rec.Credentials)
	if out.Credentials == nil {
		out.Credentials = map[string]PullCredentials{}
	}
	out.Credentials[repository] = next
	out.Updated = now
	return out, true
}

// credentialHash identifies a credential by its content.
func credentialHash(a runtime.RegistryAuth) string {
	b, _ := json.Marshal(a)
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}
