package bootstrap

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
)

// Verdict is what the serving-certificate approver does with a CSR.
type Verdict int

const (
	Skip    Verdict = iota // not ours to decide (another signer, already decided)
	Wait                   // the node is not registered yet: ask again later
	Approve                // a node asking for a certificate for its own names and addresses
	Deny                   // anything else for the kubelet-serving signer
)

// Decision is a verdict and the message recorded with it.
type Decision struct {
	Verdict Verdict
	Message string
}

// ServingDecision decides a kubernetes.io/kubelet-serving CSR as the
// kubelet's serving-certificate bootstrap expects an approver to: the
// requester is the node the certificate names (user system:node:NAME in
// group system:nodes, subject CN system:node:NAME, O system:nodes), for
// server authentication only, and every name and address in it is one the
// Node reports. getNode returns the Node, or nil when it does not exist.
func ServingDecision(csr *certificatesv1.CertificateSigningRequest, getNode func(name string) (*v1.Node, error)) Decision {
	if csr.Spec.SignerName != certificatesv1.KubeletServingSignerName || decided(csr) {
		return Decision{Verdict: Skip}
	}
	deny := func(format string, args ...any) Decision {
		return Decision{Verdict: Deny, Message: "podvisor: " + fmt.Sprintf(format, args...)}
	}
	nodeName, ok := strings.CutPrefix(csr.Spec.Username, "system:node:")
	if !ok || nodeName == "" || !slices.Contains(csr.Spec.Groups, "system:nodes") {
		return deny("requested by %q, not by a node (user system:node:NAME in group system:nodes)", csr.Spec.Username)
	}
	block, _ := pem.Decode(csr.Spec.Request)
	if block == nil || block.Type != "CERTIFICATE REQUEST" {
		return deny("spec.request is not a PEM certificate request")
	}
	req, err := x509.ParseCertificateRequest(block.Bytes)
	if err != nil {
		return deny("spec.request: %v", err)
	}
	if req.Subject.CommonName != csr.Spec.Username || !slices.Equal(req.Subject.Organization, []string{"system:nodes"}) {
		return deny("subject CN=%q O=%q: a node may only ask for CN=%q O=[system:nodes]", req.Subject.CommonName, req.Subject.Organization, csr.Spec.Username)
	}
	if !slices.Contains(csr.Spec.Usages, certificatesv1.UsageServerAuth) {
		return deny("usages %v lack %q", csr.Spec.Usages, certificatesv1.UsageServerAuth)
	}
	for _, u := range csr.Spec.Usages {
		if u != certificatesv1.UsageServerAuth && u != certificatesv1.UsageDigitalSignature && u != certificatesv1.UsageKeyEncipherment {
			return deny("usage %q is not for a serving certificate", u)
		}
	}
	if len(req.EmailAddresses) > 0 || len(req.URIs) > 0 {
		return deny("email and URI names are not allowed in a node's serving certificate")
	}
	if len(req.IPAddresses) == 0 && len(req.DNSNames) == 0 {
		return deny("the request names no address or DNS name")
	}
	node, err := getNode(nodeName)
	if err != nil {
		return Decision{Verdict: Wait, Message: fmt.Sprintf("reading node %s: %v", nodeName, err)}
	}
	if node == nil {
		return Decision{Verdict: Wait, Message: fmt.Sprintf("node %s is not registered yet", nodeName)}
	}
	ips, names := map[string]bool{}, map[string]bool{nodeName: true}
	for _, a := range node.Status.Addresses {
		switch a.Type {
		case v1.NodeInternalIP, v1.NodeExternalIP:
			ips[a.Address] = true
		case v1.NodeHostName, v1.NodeInternalDNS, v1.NodeExternalDNS:
			names[a.Address] = true
		}
	}
	for _, ip := range req.IPAddresses {
		if !ips[ip.String()] {
			if len(node.Status.Addresses) == 0 {
				return Decision{Verdict: Wait, Message: fmt.Sprintf("node %s reports no addresses yet", nodeName)}
			}
			return deny("IP address %s is not one of node %s's addresses", ip, nodeName)
		}
	}
	for _, n := range req.DNSNames {
		if !names[n] {
			return deny("DNS name %q is not one of node %s's names", n, nodeName)
		}
	}
	return Decision{Verdict: Approve, Message: fmt.Sprintf("podvisor: serving certificate of node %s for its own names and addresses", nodeName)}
}

func decided(csr *certificatesv1.CertificateSigningRequest) bool {
	for _, c := range csr.Status.Conditions {
		if c.Type == certificatesv1.CertificateApproved || c.Type == certificatesv1.CertificateDenied || c.Type == certificatesv1.CertificateFailed {
			return true
		}
	}
	return false
}

// RunServingApprover approves or denies kubelet-serving CSRs (ServingDecision)
// until ctx ends.
func RunServingApprover(ctx context.Context, c kubernetes.Interface, log *slog.Logger) {
	factory := informers.NewSharedInformerFactory(c, 0)
	csrs := factory.Certificates().V1().CertificateSigningRequests()
	nodes := factory.Core().V1().Nodes()
	queue := workqueue.NewTypedRateLimitingQueue(workqueue.NewTypedItemExponentialFailureRateLimiter[string](200*time.Millisecond, 5*time.Second))
	defer queue.ShutDown()
	enqueue := func(obj any) {
		if csr, ok := obj.(*certificatesv1.CertificateSigningRequest); ok && csr.Spec.SignerName == certificatesv1.KubeletServingSignerName {
			queue.Add(csr.Name)
		}
	}
	_, _ = csrs.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: enqueue, UpdateFunc: func(_, obj any) { enqueue(obj) },
	})
	nodeLister := nodes.Lister()
	_ = nodes.Informer()
	factory.Start(ctx.Done())
	factory.WaitForCacheSync(ctx.Done())
	go func() { <-ctx.Done(); queue.ShutDown() }()
	getNode := func(name string) (*v1.Node, error) {
		n, err := nodeLister.Get(name)
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return n, err
	}
	for {
		name, quit := queue.Get()
		if quit {
			return
		}
		csr, err := csrs.Lister().Get(name)
		d := Decision{Verdict: Skip}
		if err == nil {
			d = ServingDecision(csr, getNode)
		}
		switch d.Verdict {
		case Wait:
			queue.AddRateLimited(name)
		case Approve, Deny:
			if err := decide(ctx, c, csr, d); err != nil && !apierrors.IsNotFound(err) {
				log.Warn("serving certificate approver", "csr", name, "err", err)
				queue.AddRateLimited(name)
			} else {
				log.Info("serving certificate request decided", "csr", name, "approved", d.Verdict == Approve, "message", d.Message)
				queue.Forget(name)
			}
		default:
			queue.Forget(name)
		}
		queue.Done(name)
	}
}

func decide(ctx context.Context, c kubernetes.Interface, csr *certificatesv1.CertificateSigningRequest, d Decision) error {
	csr = csr.DeepCopy()
	cond := certificatesv1.CertificateSigningRequestCondition{
		Type: certificatesv1.CertificateApproved, Status: v1.ConditionTrue,
		Reason: "PodvisorAutoApproved", Message: d.Message, LastUpdateTime: metav1.Now(),
	}
	if d.Verdict == Deny {
		cond.Type, cond.Reason = certificatesv1.CertificateDenied, "PodvisorNotANodesOwnServingCertificate"
	}
	csr.Status.Conditions = append(csr.Status.Conditions, cond)
	_, err := c.CertificatesV1().CertificateSigningRequests().UpdateApproval(ctx, csr.Name, csr, metav1.UpdateOptions{})
	return err
}
