// Package adapter runs gpuplane's pure scheduling core (internal/scheduler)
// on a live Kubernetes cluster. Informers keep an incrementally maintained
// cache of nodes, pods, Queues, PodGroups, PriorityClasses,
// PodDisruptionBudgets and namespaces; each cycle turns the cache into a
// model.Snapshot, runs the core and carries out its decisions: binds through
// the pods/binding subresource (a gang's pods only once the whole gang has a
// placement), evictions through the Eviction API so PodDisruptionBudgets
// hold, pod conditions and events that say why a pod waits, and PodGroup and
// Queue status. Run adds leader election on a Lease, /metrics, /healthz and
// /readyz, and the start-up reconcile that leaves no gang half-bound.
//
// The package must not make scheduling decisions of its own beyond the
// standard predicates the core's model cannot express (required node
// affinity and taint effects, which it folds into a per-pod node class), and
// it must not call the API server from inside the core's cycle: the core
// sees only the snapshot.
package adapter
