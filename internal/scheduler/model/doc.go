// Package model holds the scheduler's snapshot and decision types: nodes with
// their GPUs and topology, running allocations, pending pod groups, queues,
// and the decisions a scheduling cycle returns (binds and evictions).
//
// GPUs asked for through Dynamic Resource Allocation are the same GPUs: a
// driver of the core names the device sets each GPU belongs to (the GPUs
// that satisfy one shape of ResourceClaims), and a request names its set
// (Request.DeviceSet); GPU.ClaimOnly marks GPUs no device plugin offers.
//
// It is plain data plus validation. It must not schedule, talk to the API
// server, read files or keep state between cycles; the Kubernetes adapter and
// the trace simulator both fill these types and hand them to the core.
package model
