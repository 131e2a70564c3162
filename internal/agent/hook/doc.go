// Package hook runs container lifecycle hook handlers (docs/lifecycle.md §7):
// postStart and preStop, each one of exec, httpGet or sleep.
//
// The Runner only runs a handler and reports how it went; what happens next is
// the pod worker's part, as upstream:
//
//   - postStart fails: record FailedEvent(PostStart) on the container
//     (Warning FailedPostStartHook "PostStartHook failed"), kill the container
//     with the Normal Killing event whose message is PostStartKillMessage
//     (running its preStop as for any kill), and let the restart policy
//     decide. Until the next start the container is Waiting with
//     PostStartWaiting(msg), msg being what Run returned.
//   - preStop fails: record FailedEvent(PreStop) (Warning FailedPreStopHook
//     "PreStopHook failed") and go on stopping: the stop signal follows with
//     the rest of the grace period, never less than 2 s (§8).
//   - preStop runs out of its budget (errors.Is(err, ErrBudgetExceeded)):
//     upstream records no event, it only logs; go on stopping.
//
// Run's msg is never put into an event: upstream keeps hook output out of
// events so that secrets printed by a hook do not leak from the node.
//
// Delivery is at least once (§7): after an agent restart a hook may run again;
// the Runner keeps no state that would prevent it.
package hook
