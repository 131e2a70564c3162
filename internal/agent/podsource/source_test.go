package podsource

import (
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
)

type recorder struct{ calls []string }

func (r *recorder) UpdatePod(p *v1.Pod) { r.calls = append(r.calls, "update "+string(p.UID)) }
func (r *recorder) RemovePod(p *v1.Pod) { r.calls = append(r.calls, "remove "+string(p.UID)) }

// A relist after a broken watch turns "deleted, then recreated under the
// same name" into one update: the old UID must still be removed, or its
// containers would run on with nobody to stop them.
func TestSameNameNewUIDRemovesTheOldPod(t *testing.T) {
	r := &recorder{}
	h := handlerFuncs(r)
	old := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p", UID: "a"}}
	recreated := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p", UID: "b"}}
	h.OnUpdate(old, old)
	h.OnUpdate(old, recreated)
	h.OnDelete(cache.DeletedFinalStateUnknown{Key: "ns/p", Obj: recreated})
	want := []string{"update a", "remove a", "update b", "remove b"}
	if len(r.calls) != len(want) {
		t.Fatalf("calls %v, want %v", r.calls, want)
	}
	for i := range want {
		if r.calls[i] != want[i] {
			t.Fatalf("calls %v, want %v", r.calls, want)
		}
	}
}
