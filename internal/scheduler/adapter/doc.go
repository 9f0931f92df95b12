// Package adapter runs gpuplane's pure scheduling core (internal/scheduler)
// on a live Kubernetes cluster. Informers keep an incrementally maintained
// cache of nodes, pods, Queues, PodGroups, PriorityClasses,
// PodDisruptionBudgets and namespaces; each cycle turns the cache into a
// model.Snapshot, runs the core and carries out its decisions.
//
// The parts, each owning its state behind its own methods:
//   - clusterCache (cache.go): the informers' objects, converted once, and
//     the indexes by group and node, with the binds in flight assumed on
//     their nodes; read and written only through its methods, under its
//     own lock.
//   - builder (snapshot.go): turns the cache into a snapshot, keeping its
//     memos (node classes, per-node allocations) from cycle to cycle and
//     recomputing only what changed.
//   - binder (binder.go): carries decisions out through a clusterWriter
//     (apiWriter, or an in-memory fake in the unit tests) and owns what it
//     is waiting for: the core's holds, refused evictions, gangs to resume.
//   - loop (cycle.go): runs the cycles in order, and reports (report.go,
//     status.go) through a statusSink.
//
// It carries out binds through
// the pods/binding subresource (a gang's pods only once the whole gang has a
// placement), evictions through the Eviction API so PodDisruptionBudgets
// hold, pod conditions and events that say why a pod waits, and PodGroup and
// Queue status. A group placed by evictions is the core's hold
// (model.Hold): the adapter keeps the holds the last cycle returned and
// passes them back in the next snapshot, with a one-minute HoldTimeout,
// and ends one itself only when the API server refuses one of its
// evictions (a PodDisruptionBudget); when and where the group binds is the
// core's decision. Run adds leader election on a Lease, /metrics, /healthz and
// /readyz, and the start-up reconcile that leaves no gang half-bound.
//
// What it says of waiting groups and queues it renders from the core's
// decisions (model.Unplaced, model.QueueStatus): it asks the core to
// explain a bounded number of groups per cycle and words the answer, never
// re-deriving it. Every Node, Pod, Queue and PodGroup is read through
// bounded parsers (api/gpunode, api/gpupod, convert.go): a bad one is left
// out with an event naming the field, never trusted, never fatal.
//
// The package must not make scheduling decisions of its own beyond the
// standard predicates the core's model cannot express (required node
// affinity and taint effects, which it folds into a per-pod node class), and
// it must not call the API server from inside the core's cycle: the core
// sees only the snapshot.
package adapter
