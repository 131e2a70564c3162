package images

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/record"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/podvisor/podvisor/internal/runtime"
	"github.com/podvisor/podvisor/internal/runtime/runtimetest"
)

const repo = "quay.io/team/app"

var (
	secretA  = SecretCredential{UID: "ua", Namespace: "ns1", Name: "a", Hash: "h1"}
	copyOfA  = SecretCredential{UID: "uc", Namespace: "ns2", Name: "c", Hash: "h1"} // same credential
	rotatedA = SecretCredential{UID: "ua", Namespace: "ns1", Name: "a", Hash: "h2"}
	secretB  = SecretCredential{UID: "ub", Namespace: "ns2", Name: "b", Hash: "h3"}
)

func recordWith(creds PullCredentials) *PulledRecord {
	return &PulledRecord{ImageID: "sha256:1", Credentials: map[string]PullCredentials{repo: creds}}
}

// The decision of upstream's MustAttemptImagePull, case by case.
func TestCheckAccess(t *testing.T) {
	preloaded := Verification{Policy: NeverVerifyPreloadedImages}
	for _, tc := range []struct {
		name          string
		v             Verification
		rec           *PulledRecord
		pulledByAgent bool
		pod           []SecretCredential
		mustPull      bool
		remember      *SecretCredential
	}{
		{name: "preloaded image, default policy", v: preloaded, mustPull: false},
		{name: "preloaded image, AlwaysVerify", v: Verification{Policy: AlwaysVerify}, mustPull: true},
		{name: "pulled with a secret, NeverVerify", v: Verification{Policy: NeverVerify},
			rec: recordWith(PullCredentials{Secrets: []SecretCredential{secretA}}), pulledByAgent: true, mustPull: false},
		{name: "interrupted pull: no record, an intent", v: preloaded, pulledByAgent: true, mustPull: true},
		{name: "pulled anonymously: every pod", v: preloaded,
			rec: recordWith(PullCredentials{NodeWide: true}), pulledByAgent: true, mustPull: false},
		{name: "record without this repository", v: preloaded,
			rec: &PulledRecord{ImageID: "sha256:1", Credentials: map[string]PullCredentials{"other.io/x": {NodeWide: true}}}, pulledByAgent: true, mustPull: true},
		{name: "record without credentials (recovered)", v: preloaded, rec: &PulledRecord{ImageID: "sha256:1"}, pulledByAgent: true, pod: []SecretCredential{secretA}, mustPull: true},
		{name: "pulled with a secret, pod without any", v: preloaded,
			rec: recordWith(PullCredentials{Secrets: []SecretCredential{secretA}}), pulledByAgent: true, mustPull: true},
		{name: "pulled with a secret, pod with another", v: preloaded,
			rec: recordWith(PullCredentials{Secrets: []SecretCredential{secretA}}), pulledByAgent: true, pod: []SecretCredential{secretB}, mustPull: true},
		{name: "same secret", v: preloaded,
			rec: recordWith(PullCredentials{Secrets: []SecretCredential{secretA}}), pulledByAgent: true, pod: []SecretCredential{secretB, secretA}, mustPull: false},
		{name: "another secret with the same credential is remembered", v: preloaded,
			rec: recordWith(PullCredentials{Secrets: []SecretCredential{secretA}}), pulledByAgent: true, pod: []SecretCredential{copyOfA}, remember: &copyOfA},
		{name: "the same secret rotated is remembered", v: preloaded,
			rec: recordWith(PullCredentials{Secrets: []SecretCredential{secretA}}), pulledByAgent: true, pod: []SecretCredential{rotatedA}, remember: &rotatedA},
		{name: "allowlisted repository", v: Verification{Policy: NeverVerifyAllowlistedImages, Allowlist: []string{"quay.io/team/*"}},
			rec: recordWith(PullCredentials{Secrets: []SecretCredential{secretA}}), pulledByAgent: true, mustPull: false},
		{name: "not allowlisted", v: Verification{Policy: NeverVerifyAllowlistedImages, Allowlist: []string{"quay.io/team/other", "quay.io/te/*"}}, mustPull: true},
		{name: "allowlisted exactly", v: Verification{Policy: NeverVerifyAllowlistedImages, Allowlist: []string{repo}}, mustPull: false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := checkAccess(tc.v, repo, tc.rec, tc.pulledByAgent, tc.pod)
			if got.mustPull != tc.mustPull {
				t.Errorf("mustPull = %v, want %v", got.mustPull, tc.mustPull)
			}
			if (got.remember == nil) != (tc.remember == nil) || got.remember != nil && *got.remember != *tc.remember {
				t.Errorf("remember = %v, want %v", got.remember, tc.remember)
			}
		})
	}
}

func TestMergeCredentials(t *testing.T) {
	now := time.Unix(2e9, 0)
	base := *recordWith(PullCredentials{Secrets: []SecretCredential{secretA}})
	for _, tc := range []struct {
		name    string
		creds   *PullCredentials
		changed bool
		want    PullCredentials
	}{
		{name: "nothing", creds: nil, want: PullCredentials{Secrets: []SecretCredential{secretA}}},
		{name: "the same secret", creds: &PullCredentials{Secrets: []SecretCredential{secretA}}, want: PullCredentials{Secrets: []SecretCredential{secretA}}},
		{name: "another secret", creds: &PullCredentials{Secrets: []SecretCredential{secretB}}, changed: true,
			want: PullCredentials{Secrets: []SecretCredential{secretA, secretB}}},
		{name: "rotated", creds: &PullCredentials{Secrets: []SecretCredential{rotatedA}}, changed: true,
			want: PullCredentials{Secrets: []SecretCredential{rotatedA}}},
		{name: "pulled anonymously since", creds: &PullCredentials{NodeWide: true}, changed: true, want: PullCredentials{NodeWide: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, changed := mergeCredentials(base, repo, tc.creds, now)
			if changed != tc.changed {
				t.Fatalf("changed = %v", changed)
			}
			c := got.Credentials[repo]
			if c.NodeWide != tc.want.NodeWide || len(c.Secrets) != len(tc.want.Secrets) {
				t.Fatalf("got %+v, want %+v", c, tc.want)
			}
			for i := range c.Secrets {
				if c.Secrets[i] != tc.want.Secrets[i] {
					t.Fatalf("got %+v, want %+v", c, tc.want)
				}
			}
			if changed && !got.Updated.Equal(now) {
				t.Errorf("updated %v", got.Updated)
			}
		})
	}
	if base.Credentials[repo].Secrets[0] != secretA || len(base.Credentials[repo].Secrets) != 1 {
		t.Errorf("the original record changed: %+v", base)
	}
}

func TestVerificationConfig(t *testing.T) {
	if p, err := ParseVerificationPolicy(""); err != nil || p != NeverVerifyPreloadedImages {
		t.Errorf("default: %v %v", p, err)
	}
	if _, err := ParseVerificationPolicy("Sometimes"); err == nil {
		t.Error("Sometimes accepted")
	}
	for _, ok := range []string{"registry.k8s.io/pause", "registry.k8s.io/*", "localhost:5000/*", "localhost:5000/app", "busybox"} {
		if err := ValidateAllowlist([]string{ok}); err != nil {
			t.Errorf("%s: %v", ok, err)
		}
	}
	for _, bad := range []string{"busybox:1.36", "quay.io/x@sha256:abcd", "quay.io/*/x", ""} {
		if err := ValidateAllowlist([]string{bad}); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

// The manager with records on disk: a private image pulled with one
// namespace's secret is pulled again (and refused) for a pod without it,
// is ErrImageNeverPull under Never for that pod, is used by a pod with the
// same secret, and an anonymous pull opens it to all; the records survive a
// new manager (an agent restart).
func TestEnsureChecksThePodsCredentialsForAPulledImage(t *testing.T) {
	dir := t.TempDir()
	store := runtimetest.NewImages()
	good := runtime.RegistryAuth{Username: "good", Password: "pw-good"}
	private := runtime.Image{ID: "sha256:p", RepoTags: []string{repo + ":v1"}}
	store.AddRemote(repo+":v1", private, &good)
	clock := clocktesting.NewFakeClock(time.Unix(1e9, 0))
	newManager := func() (*Manager, *record.FakeRecorder) {
		recs, err := OpenPullRecords(dir)
		if err != nil {
			t.Fatal(err)
		}
		rec := record.NewFakeRecorder(100)
		m, err := New(Config{Images: store, Recorder: rec, Clock: clock, Records: recs})
		if err != nil {
			t.Fatal(err)
		}
		return m, rec
	}
	m, rec := newManager()
	pull := secret("pull", `{"quay.io": `+entry("good")+`}`)
	pull.UID, pull.Namespace = "s1", "ns1"
	req := func(uid string, policy v1.PullPolicy, secrets ...v1.Secret) Request {
		r := request(uid, repo+":v1", policy)
		r.PullSecrets = func(context.Context) []v1.Secret { return secrets }
		return r
	}
	ensure := func(m *Manager, r Request) (string, *Failure) {
		img, err := m.Ensure(context.Background(), r)
		if err != nil {
			return "", err.(*Failure)
		}
		return img.ID, nil
	}
	if id, fail := ensure(m, req("1", v1.PullIfNotPresent, pull)); fail != nil || id != private.ID {
		t.Fatalf("first pull: %q %v", id, fail)
	}
	if _, fail := ensure(m, req("2", v1.PullIfNotPresent)); fail == nil || fail.Reason != ReasonErrImagePull {
		t.Fatalf("a pod without the secret: %v, want ErrImagePull (pulled again, refused)", fail)
	}
	if _, fail := ensure(m, req("3", v1.PullNever)); fail == nil || fail.Reason != ReasonErrImageNeverPull {
		t.Fatalf("a pod without the secret, Never: %v, want ErrImageNeverPull", fail)
	}
	pulls := len(store.Pulls())
	m, rec = newManager() // a restart keeps the records
	same := pull
	same.UID, same.Name, same.Namespace = "s2", "copy", "ns2"
	if id, fail := ensure(m, req("4", v1.PullIfNotPresent, same)); fail != nil || id != private.ID {
		t.Fatalf("a pod with a copy of the credential: %q %v", id, fail)
	}
	if len(store.Pulls()) != pulls {
		t.Errorf("a pod with the credential pulled again: %+v", store.Pulls()[pulls:])
	}
	if ev := <-rec.Events; ev != `Normal Pulled Container image "`+repo+`:v1" already present on machine and can be accessed by the pod` {
		t.Errorf("event %q", ev)
	}
	b, err := os.ReadFile(filepath.Join(dir, "pulled", fileName(private.ID)))
	if err != nil || !strings.Contains(string(b), `"uid":"s1"`) || !strings.Contains(string(b), `"uid":"s2"`) {
		t.Errorf("record %s %v: want both secrets", b, err)
	}
	// An image present before the agent pulled anything is not checked.
	preloaded := runtime.Image{ID: "sha256:pre", RepoTags: []string{"quay.io/team/pre:1"}}
	store.AddLocal("quay.io/team/pre:1", preloaded)
	r := request("5", "quay.io/team/pre:1", v1.PullNever)
	if id, fail := ensure(m, r); fail != nil || id != preloaded.ID {
		t.Fatalf("preloaded: %q %v", id, fail)
	}
}
