// Package probe runs the startup, liveness and readiness probes of running
// containers (docs/lifecycle.md §6) and reports each container's verdict as a
// lifecycle.ProbeState through Config.OnUpdate.
//
// One scheduler goroutine keeps every active probe in a min-heap ordered by its
// next run; due probes go to a bounded pool of executors. No goroutine sleeps
// per probe.
//
// A probe of one container instance moves through:
//
//	            AddContainer
//	                 │
//	   gated ◄───────┼───────► scheduled ◄──────┐
//	(liveness and    │        (in the heap)     │ next period
//	 readiness until │              │ due       │
//	 startup passes) │              ▼           │
//	   │             │          running ────────┘
//	   └─ startup ───┘              │ liveness/startup reached failureThreshold,
//	      succeeded                 │ startup succeeded, pod terminating,
//	                                ▼ RemoveContainer
//	                             stopped
//
// Results only change the container's ProbeState after successThreshold or
// failureThreshold consecutive equal results, as upstream.
package probe
