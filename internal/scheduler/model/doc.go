// Package model holds the scheduler's snapshot and decision types: nodes with
// their GPUs and topology, running allocations, pending pod groups, queues,
// and the decisions a scheduling cycle returns (binds and evictions).
//
// It is plain data plus validation. It must not schedule, talk to the API
// server, read files or keep state between cycles; the Kubernetes adapter and
// the trace simulator both fill these types and hand them to the core.
package model
