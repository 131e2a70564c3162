package serviceproxy

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

// FailedReason is the reason of the Warning Event on the Node when the
// service proxy does not route this node's Services.
const FailedReason = "ServiceProxyFailed"

// failureEvent is the Event that tells `kubectl get events` (and `describe
// node`) what the log says: Node events live in the default namespace, as
// the kubelet's do.
func failureEvent(node, message string, now time.Time) *v1.Event {
	t := metav1.NewTime(now)
	return &v1.Event{
		ObjectMeta:     metav1.ObjectMeta{Name: fmt.Sprintf("%s.%x", node, now.UnixNano()), Namespace: metav1.NamespaceDefault},
		InvolvedObject: v1.ObjectReference{Kind: "Node", APIVersion: "v1", Name: node},
		Reason:         FailedReason,
		Message:        message,
		Type:           v1.EventTypeWarning,
		Source:         v1.EventSource{Component: "podvisor-service-proxy", Host: node},
		FirstTimestamp: t, LastTimestamp: t, Count: 1,
	}
}

// reportFailure logs why the proxy does not route and posts it as an
// Event, with the proxy's own credentials; the Event is best effort (the
// API may be what failed), the log line is not.
func reportFailure(ctx context.Context, cfg Config, log *slog.Logger, msg string, err error) {
	log.Error(msg, "err", err)
	rc, cerr := clientcmd.BuildConfigFromFlags("", cfg.Kubeconfig)
	if cerr != nil {
		log.Warn("service proxy: no Event for its failure", "err", cerr)
		return
	}
	client, cerr := kubernetes.NewForConfig(rc)
	if cerr != nil {
		log.Warn("service proxy: no Event for its failure", "err", cerr)
		return
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	ev := failureEvent(cfg.NodeName, fmt.Sprintf("%s: %v", msg, err), time.Now())
	if _, cerr := client.CoreV1().Events(ev.Namespace).Create(ctx, ev, metav1.CreateOptions{}); cerr != nil {
		log.Warn("service proxy: no Event for its failure", "err", cerr)
	}
}
