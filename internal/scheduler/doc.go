// Package scheduler is gpuplane's pure scheduling core. Cycle reads an
// immutable model.Snapshot (nodes, running allocations, pending pod groups,
// queues, a disruption budget) and returns model.Decisions: binds with node
// and GPU indexes and shares, and evictions. The Kubernetes adapter and the
// trace simulator both drive it; it never talks to the API server, reads
// clocks for decisions or keeps hidden global state.
//
// A cycle runs these actions, each as statements over a checkpointed
// placement.State so that what-if work is rolled back exactly:
//
//  1. allocate: queues take turns by weighted dominant share (lowest first);
//     within a queue groups go by priority, then age, then name. A gang is
//     placed whole (at least minMember pods) or not at all. A queue whose
//     head group does not fit stops there for this phase.
//  2. backfill: later groups of a blocked queue may use free capacity, but
//     never the nodes the blocked head would get once lower-priority and
//     borrowed work made room (its reservation).
//  3. preempt: within one leaf queue, a group may evict preemptible groups
//     of strictly lower priority, fewest first (lowest priority, newest).
//  4. reclaim: a queue that stays at or below its fair share after placing
//     a group may evict groups of queues outside its own branch that stay at
//     or above their fair share after the eviction.
//
// Evictions take whole groups and never exceed Snapshot.Budget.
//
// Why preemption cannot cycle. Fair shares depend only on each queue's
// usage plus pending demand, which an eviction does not change (the evicted
// pods become demand again), so they are fixed while work moves between
// running and pending. Call a resource scarce when the queues want more of
// it than the cluster has. The rule: a reclaim needs a scarce resource; the
// reclaiming queue must end at or below its fair share in every scarce
// resource its group uses, and every victim's queue must stay at or above
// its fair share in every scarce resource the victim uses. So each reclaim
// strictly lowers
//
//	Phi = sum over queues q and scarce resources r of max(0, usage(q,r) - fair(q,r))
//
// (the victim's excess shrinks by what it gave up, the reclaimer gains no
// excess), and a victim's queue can never reclaim back: it would have to
// take from a queue that is not above its fair share. A preemption happens
// inside one queue, for strictly higher priority only, so the multiset of
// running priorities in that queue grows in the lexicographic order and the
// victim can never preempt its preemptor. Both orders are well founded on a
// finite workload, so repeated cycles on an unchanged workload reach a
// fixed point with no evictions; TestPropertyInvariantsAndFixedPoint checks
// this on random workloads (an earlier rule that compared only dominant
// shares failed it).
package scheduler
