// Package placement decides where one pod goes: it keeps the free state of
// every node and GPU (State, with checkpoint/rollback for what-if work),
// filters the nodes and GPUs a request fits on, and ranks the options with
// weighted score plugins (first-fit, best-fit, GPU packing, dot-product, GPU
// clustering, FGD, topology, spread, random).
//
// Scores of plugins that depend only on a node's static class and free state
// are memoised by node signature, and a Placer re-scores only the nodes that
// changed since its last call, so one placement costs far less than a scan
// of the cluster. The signatures, the memo and the caches per request
// shape are bounded: a long-running scheduler sees ever new free states
// and request shapes, and past its bound each starts over or drops what
// was used longest ago, deciding nothing differently.
//
// GPUs a DRA driver publishes join the same books: a request through
// ResourceClaims (model.Request.DeviceSet) is served only by GPUs of its
// device set, any other request never by a claim-only GPU, and a node with
// device sets keeps its GPUs in index order in its signature, since they
// are no longer interchangeable.
//
// Besides CPU, memory and GPUs, the State counts each node's pods, its
// scalar resources and its host ports (resources.go), in the signature too,
// so the memo never answers for a node whose ports or resources differ.
//
// It must not know about queues, gangs, priorities or preemption (the cycle
// in package scheduler does), and must not read the outside world.
package placement
