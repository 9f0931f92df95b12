// Package scheduler is gpuplane's pure scheduling core. Cycle reads an
// immutable model.Snapshot (nodes, running allocations, pending pod groups,
// queues, a disruption budget) and returns model.Decisions: binds with node
// and GPU indexes and shares, and evictions. The Kubernetes adapter and the
// trace simulator both drive it; it never talks to the API server, reads
// clocks for decisions or keeps hidden global state. It imports nothing of
// k8s.io, of the adapter or the simulator, nor any GPU backend: `make lint`
// enforces this (the scheduling-core rule of .golangci.yml's depguard).
//
// A cycle runs these actions, each as statements over a checkpointed
// placement.State so that what-if work is rolled back exactly:
//
//  0. holds: a group placed by evicting others waits for its victims to
//     exit before it is bound (model.Hold): the decision where it goes is
//     taken once, in the cycle that evicts, and carried in
//     Snapshot.Holds/Decisions.Holds until it is bound. Each cycle first
//     binds the holds whose victims are gone, exactly on their plan (when
//     it still fits and the queue still admits the group), and keeps for
//     those still waiting the room their victims have freed, counted in
//     their queue's usage, out of reach of every later action. A hold past
//     Snapshot.HoldTimeout, or whose plan no longer fits, ends and its
//     group competes afresh in the same cycle.
//  0. disruption: a node about to go away (model.Node.Disrupted: a spot
//     instance reclaimed, an autoscaler's consolidation) takes no new pods,
//     and every group with a pod on it is evicted whole
//     (model.EvictDisruption), counted against no budget, so that a gang
//     is placed again as one rather than run on without a member; an
//     elastic group that keeps its declared gang size on the other nodes
//     loses only its pods on the node (Eviction.Shrink) and runs on
//     (disruption.go). Its pods keep their room until the snapshot shows
//     them gone.
//  1. allocate: queues take turns, the branch of higher Queue.Priority
//     first (priorities compare siblings, where two queues' paths part),
//     then by weighted dominant share, the largest
//     usage/(capacity*weight) over resources, lowest first (a queue may
//     weigh each resource differently, model.Queue.Weights), equal shares
//     by the share once the queue's next group runs, so that between
//     queues using nothing the larger weight, tilted by the usage over
//     time, goes first; within a
//     queue groups go by priority, then age, then name. A gang is
//     placed whole (at least minMember pods) or not at all, and only when
//     its queue and every ancestor stay within their limits after taking
//     its pods' requests, or its MinResources where larger. A queue whose
//     head group does not fit stops there for this phase.
//  2. backfill: later groups of a blocked queue may use free capacity, but
//     never the nodes the blocked head would get once lower-priority and
//     borrowed work made room (its reservation). A head that its queue's
//     quota holds back reserves nothing: capacity would not start it.
//  3. preempt: within one leaf queue, a group may evict preemptible groups
//     of strictly lower priority, cheapest first (lowest priority, then
//     the fewest GPU-hours lost, then newest).
//  4. reclaim: a queue that stays at or below its fair share after placing
//     a group may evict groups of queues outside its own branch that stay at
//     or above their fair share after the eviction. A group this does not
//     place may still reclaim its queue's guarantee (Kueue's reclaim within
//     a cohort): a leaf queue that stays within its GPU guarantee may evict
//     GPU-using groups of leaf queues outside its branch that stay at or
//     above their GPU guarantee. Fair shares are cluster-wide, so without
//     this a guarantee only a pool of nodes can serve (a node selector,
//     taints) is never taken back while GPUs the queue cannot use idle
//     elsewhere.
//
// Minimum runtime. No eviction action takes a group that has run for less
// than its minimum runtime at Snapshot.Now (since its latest member
// started): the largest of its allocations' MinRuntime (their priority
// class's) and the MinRuntime of its queue and of every queue above it.
// Such a group is neither a victim nor counted as movable, and a blocked
// head's reservation does not count on its room. A group that would fit
// only by evicting such groups waits with UnplacedVictimsTooYoung and
// when the first of them comes of age (Unplaced.OfAge); the core finds
// that out by the same search with them counted, changing nothing, and
// only for a group whose search refused one (minruntime.go).
//
// Checkpoint-aware victims. Among the groups an action may evict, the
// cheapest come first: the lowest priority, then the least work lost,
// GPUs (milli-GPU) times the time since the group's restart point, the
// earliest over its members of the later of its start and its
// LastCheckpoint (a member that never checkpointed loses everything since
// it started), then the newest. Reclaim merges the queues that may give
// in this order too, so the cheapest victim of any of them comes first
// (the queue furthest above its share breaks ties). The reprieve gives
// victims back from the most valuable in the same order, so what stays
// evicted is, greedily, what loses the least. Work lost grows with Now, so the order a queue keeps of
// its groups is sorted again when Now has moved since it was (victimOrder);
// Snapshot.VictimsByAge orders by age alone, to compare.
//
// Fairness over time. A queue with a UsageHalfLife has a usage over time
// (model.QueueUsage): its usage averaged with weight 2^(-age/halfLife),
// carried from cycle to cycle in Decisions.Usage and Snapshot.Usage like
// holds, and advanced to Now by queue.Decay with the usage the queue holds
// now. Among siblings that have one, a queue's share p of their usage over
// time against its share w of their weights tilts its weights by
// 2^(1-p/w), within [1/16, 2] (Tree.tilts), for its fair share (what is
// left over guarantees) and for its turn in allocate; reclaim reads those
// fair shares. A queue that used nothing lately counts twice its weight,
// one that used twice its share half of it.
//
// A queue's policy is the core's too: a queue with NoPreemption never
// preempts, one with NoReclaim never reclaims, and a group marked
// NeverEvicts (its pods' preemptionPolicy: Never) does neither. For a group such a policy
// keeps waiting, the core still finds out whether the eviction would have
// placed it (and rolls that back), so that its Unplaced entry says so
// (UnplacedPreemptionDisabled, UnplacedReclaimDisabled).
//
// What a cycle returns besides binds, evictions and holds: every group left
// pending, with a code and a reason (a held one as
// UnplacedWaitingForVictims; one that can never start as it is, because
// what it needs admitted exceeds a queue limit on its own or its minMember
// smallest pods need more than all nodes together, as
// UnplacedAboveQueueLimit or UnplacedAboveCapacity with the need and the
// limit; a gang with fewer pods than its MinMember, placed, finished and
// waiting together, as UnplacedMissingMembers: it is never placed in part);
// what each waits for (Unplaced.Wait, one rule, waitFor): capacity, which
// more nodes would cure, or its queue's quota, its gang's missing members,
// its victims' exit or its own spec, which they would not, so that a
// driver can hold the latter back from autoscalers; for those the driver marked
// PodGroup.Explain, which filter refused how many nodes (unschedulable,
// selector or taints, a host port, the pods allowance, a scalar resource by
// name, cpu, memory, volumes, GPU, pod constraints) for its first pod and how many of
// its pods fit at once; and every queue's usage, fair share and guarantee
// as the cycle leaves them. Drivers render these; they never look into
// the core's state. model.Apply carries the decisions out on a snapshot
// for the simulator and the tests, and PodGroup.Min is the one rule for
// what a partly placed gang still needs.
//
// Each eviction action considers only victims that hold something on a
// node where a pod of the group could run at all (placement.StaticFits):
// room freed anywhere else is of no use to it. It takes victims one at a
// time until the group fits, then gives back, from the most valuable
// (highest priority, then oldest) to the cheapest, every victim without
// which the group still fits (kube-scheduler's reprieve), and holds the
// group where it fits with exactly the evictions left. Evictions take whole
// groups, at most 64 per placed group, and never exceed Snapshot.Budget.
// A pod evicted in a cycle (preempted, reclaimed, shrunk or moved) runs
// until it exits. The room its evictor did not take stays free to place
// in, so one eviction's room is not paid for with another, but a group
// placed there in the same cycle is held, not bound: it waits for the
// evicted pods on each node where the free room no longer covers what
// they had left (placement.State.Rest; vacatedUnder in holds.go). Their
// labels and affinity stay in the state for the cycle, so that other
// pods' affinity and anti-affinity still see them, as kube-scheduler sees
// a pod being deleted. A group that fits in room that pods being deleted
// still hold (Terminating: evicted in an earlier cycle, or deleted by
// anyone) is held there too, waiting for the pods whose room it takes,
// before it may evict anything (waitExiting); those pods keep the rest
// of their room meanwhile. Once such a hold times out
// (Snapshot.HoldTimeout) the group may evict again. A pod being deleted
// is never a victim itself.
//
// ResourceClaims. A pod that asks for GPUs through claims asks for whole
// GPUs of a device set (model.Request.DeviceSet): the GPUs its driver found
// to satisfy the claims' selectors (and not tainted against them), or, when
// the claims ask for one MIG device, a MIG instance of that device's
// compute slices (model.Request.MIGSlices) on a GPU in MIG mode of the
// set. The core places it like any GPU
// request, among those GPUs only, with the same filters and scores, and
// says "no device satisfies the claims" of a node that has none of them:
// the node and the devices are its decision, which the Kubernetes adapter
// writes into the claims and the simulator replays. Claims that ask for
// devices with admin access take none: the adapter narrows the pod's
// nodes to those that have the devices and asks the core for no GPU.
// Claims that ask for all the devices that match (allocationMode: All)
// ask for every GPU of their set on the node they get
// (model.Request.AllOfSet): a node takes them only when all of those are
// free, and queues count the largest set any node has until the pod is
// placed, then the GPUs it got. Claims with firstAvailable subrequests
// come as alternatives (model.Request.FirstOf), most preferred first: the
// cycle places the first that places on some node (placeOne), so on the
// node the pod gets no earlier alternative fits, and the bind says which
// it chose (model.Bind.Alternative), which the preemption what-if, holds
// and model.Apply follow.
//
// Pod affinity, anti-affinity and topology spread. A request may carry
// its pod's namespace and labels, inter-pod affinity and spread
// constraints (model.PodAffinity, model.SpreadConstraint), which the core
// checks with kube-scheduler's rules (PodTopologySpread, then
// InterPodAffinity) after the node-local filters, with reasons of their
// own ("topology spread", "pod affinity", "pod anti-affinity", "existing
// pods' anti-affinity"). placement.State counts pods by topology domain as
// Assign and Release go (podaffinity.go), so Rollback undoes them with
// the rest: pods placed earlier in the cycle, victims released in a
// preemption what-if and the room a waiting preemptor holds (with its
// labels and affinity) all count, and a hold's plan is checked again when
// it is bound. A constrained request cannot use the placer's memo by node
// signature alone, since whether a node is allowed depends on its domains:
// it walks the shape's max-tree from the best node down to the first one
// its constraints allow, so its cost grows with the constrained requests,
// not with pods times nodes, and unconstrained requests keep their path.
// Preferred terms and ScheduleAnyway spread only choose among the allowed
// nodes the policy scores alike. Node labels that only name topology
// reach the core in model.Node.Domains, so they do not split nodes into
// classes.
//
// Gangs placed by the network (topology.go, topology_evict.go). A gang
// with model.PodGroup.Topology names levels (node label keys, widest
// first; a node's value is read from Node.Domains, then Node.Labels) and a
// required level, a preferred one, a slice level or several. A domain of a
// level is the nodes that share their value of its key and of every wider
// level's (absence included), so domains nest. GangTopology.Check refuses a
// topology that means nothing (UnplacedBadTopology, the field named); the
// group waits and the queue goes on past it. Otherwise the core chooses the
// domains:
//   - required: every pod the gang places in one cycle lands inside one
//     domain of the level, or none does; pods a partly running gang still
//     needs join its running members' domain.
//   - the domain: among those whose nodes have room for the gang (a per-node
//     estimate from the free CPU, memory and GPUs, kept with the placer's
//     shape caches, that never says less than the truth), the best fit,
//     the one with the least room, so the emptiest domains stay whole for
//     the next large gang; up to maxDomainTries domains are tried in that
//     order, each a placement rolled back when it falls short. Inside a
//     domain the placer picks each pod's node among the domain's nodes by
//     the policy (Placer.PlaceIn reads the nodes' cached best options).
//   - preferred: one domain of the preferred level if one holds the gang
//     (best fit); else one domain of the next wider level, its
//     sub-domains filled largest first down to the preferred level (as few
//     of them as it can); and so on up to the required level, or the whole
//     cluster when none is required.
//   - slices: each slice (the pods that share Pod.Slice, a pod with no
//     name in no slice; with a SliceSize and a pending pod with no name,
//     SliceSize pods in pod order) lands whole in one domain of the slice
//     level, chosen by best fit inside the set the gang is filling, while
//     the gang keeps its own level; a named slice's pending pods join the
//     domain its running members (Allocation.Slice) sit in.
//   - small pods: once a gang has named levels, ties between nodes the
//     policy scores alike go by the nodes' domains, widest level first,
//     rather than by index (Placer.SetTieOrder), so that pods without a
//     topology fill one domain before the next and leave whole domains for
//     gangs; it costs one array read per comparison.
//   - evictions: for a gang with a required level, preemption and reclaim
//     look for victims inside one domain at a time (their nodes only, the
//     domains where free room and victims together could hold the gang,
//     those with room for most of it first) and place it there; a hold's
//     plan is bound only while its pods still share one domain of the
//     required level and each slice one of the slice level, else the hold
//     ends and the gang competes afresh.
//   - why it waits: UnplacedNoDomain names the level, the domain that came
//     closest and how many of the gang's pods it has room for ("no rack has
//     room for the gang's 4 pods of 8 GPUs each; the best rack, r3, has room
//     for 3"). When a domain would hold the gang were movable work gone
//     from it (groups the gang may preempt or reclaim: lower priority in its
//     queue, or borrowed), UnplacedFragmentedDomain names that domain and
//     those pods (Unplaced.Movable, at most 16 named); nothing is moved. The
//     look clears nodes that would gain the most room per group first, after
//     an estimate without clearing any shows the domain could hold the gang,
//     and is bounded per gang and per cycle.
//
// A gang without a topology takes the path it always did.
//
// Resources besides CPU, memory and GPUs (model/resources.go). A node with
// model.Node.Allocatable takes a pod only within its pods allowance and
// with every scalar resource the pod asks for (model.Request.Scalars:
// ephemeral storage, hugepages, extended resources) free, against what its
// pods already hold, as kube-scheduler's NodeResourcesFit counts; on every
// node a pod's host ports must not conflict with those its pods hold
// (NodePorts: 0.0.0.0 against any address, an address against itself and
// 0.0.0.0, per protocol). Running pods hold them through their
// allocations' requests, binds of the same cycle as they are placed, and
// what-if work rolls them back with the rest. A request for GPUs through
// the resource a node time-slices its GPUs under (model.GPU.InReplicas) is
// in that node's unit: replicas of one GPU there, whole GPUs elsewhere; a
// request for replicas of a renamed resource (nvidia.com/gpu.shared) is
// replicas of one GPU shared under it, and fits no other. A placed pod
// counts in its queue by the shares it took (model.Request.UsageOn), in
// the cycle that places it as in those after.
//
// Volumes. A pod's volumes take what other pods of the cycle then lack
// (model.PodVolumes): an unbound claim of a WaitForFirstConsumer class
// takes one of its candidate PVs that may be used on the chosen node (the
// first left, the smallest as the driver lists them), or is provisioned
// there when its class provisions; a ReadWriteOncePod claim is used by one
// pod; a node's CSI attach limit (model.Node.Volumes) caps the distinct
// volumes of a driver attached to it. The placement state counts them
// with the rest and rolls them back with it (placement/volumes.go); the
// PV each claim takes is part of the bind (model.Bind.Volumes), which
// model.Apply carries out by taking it from the claims still waiting.
// What a pod's volumes allow of nodes once and for all (a bound PV's node
// affinity or zone) reaches the core through the node selector, like
// node affinity.
//
// MIG layouts that follow demand. After the other actions, for the nodes
// that opt in (model.Node.MIG) the core proposes new MIG layouts in
// Decisions.Layouts (layouts.go): the MIG instances asked for by groups
// left pending for want of room turn idle whole GPUs into all instances of
// that profile, and whole GPUs asked for turn idle MIG GPUs whole. Only
// GPUs with nothing on them are chosen, so a proposal never evicts; the
// hysteresis (Snapshot.Layouts) keeps layouts from flapping: demand must
// have waited, a GPU proposed for is left alone for a dwell time, a node
// gets a bounded number per cycle and none while one of its proposals is
// pending, whose supply counts against the demand. A pending GPU
// (GPU.Repartitioning) serves nothing until its node reports the layout;
// model.Apply records proposals as pending and model.CompleteLayouts has
// the node report them, so the simulator replays them.
//
// State between cycles. A Scheduler keeps the free state, the running pods
// by node, their groups (model.Allocation.Group, else the pod alone) and
// each queue's usage, and brings them in line with each snapshot by its
// difference (sync). The snapshot holds its running pods by node
// (model.Snapshot.RunningByNode), and sync compares only the nodes whose
// chunk is not the slice it applied last time (a driver never modifies a
// chunk it passed, and the core keeps pointers into them), plus the nodes
// its own last decisions changed: binds and evictions are applied when
// decided, as though carried out, so the next sync releases a bind the
// driver did not carry out and assigns again a pod it did not evict, even
// on a node whose chunk is unchanged. On those nodes every pod that went
// or changed is released before any that came is assigned, so a pod moving
// between nodes, or a bind replaced by its real allocation, never looks
// like over-allocation. Queue usage is then added per queue, and evictions
// read running groups by queue: preemption only the pending group's queue,
// and only when it runs a preemptible group of lower priority; reclaim
// only queues outside the group's branch above their fair share or GPU
// guarantee. Each queue keeps its groups cheapest first, and a victim
// search merges them lazily, so it costs the victims it looks at. A cycle
// with nothing changed and nothing pending thus costs a look at each node
// and at the address of its chunk; one with changes costs what changed. A
// snapshot that lists a pod twice (among the nodes compared), lists it
// under a node it does not name, or over-allocates a node is an error, and
// the next cycle starts over from nothing.
//
// Elastic groups (elastic.go). A running group whose members declare a gang
// size below its members (Allocation.MinMember) may lose members down to
// that size: preemption and reclaim first try to place a group by evicting
// only such members (Eviction.Shrink), under the same rules a whole victim
// meets for the part it gives up, and evict whole groups only when that
// cannot make room. The members given up wait again in their group and
// rejoin it as room appears (PodGroup.Min asks for one at a time).
// Running members count toward a gang's minimum only while they run: a
// group's pods still waiting are placed (or held room for) as many as
// PodGroup.Min asks less the members the same cycle evicts, and wait whole
// when those are too few; and a group whose waiting pods the cycle placed
// counting its running members is not evicted whole in it.
//
// Defragmentation (defrag.go). With Snapshot.Defrag set, a group still
// pending after reclaim, admitted by its queue, whose GPUs are free in
// total on the nodes it could use, may have running groups that opted in
// (Allocation.Movable) moved out of its way: each is evicted
// (EvictDefragment) and placed again elsewhere in the same plan, held
// there (Hold.Moved), and the group is held in the room they leave.
// Decisions.Moves lists them; DefragPolicy bounds them per window and
// keeps a group moved within the window in place.
//
// Draining (drain.go). With DefragPolicy.DrainAfter set as well, a group
// with pods that need a whole node (they ask for as many GPUs as the
// largest node has), admitted by its queue and waiting DrainAfter since it
// was created, has nodes drained for it at the start of the cycle, after
// the holds and before allocation, the oldest two groups first: if it fits
// as the nodes stand it is placed at once; otherwise, for each such pod,
// the node cheapest to empty (the fewest GPUs held by work that may not
// move, then the most free; of the 64 nodes with the most GPUs free that
// the pod fits) is kept from every other group for the cycle: its free
// room is taken out of the state as a hold's room is, and the node is
// closed to placement (placement.State.Close), so that room an eviction or
// a move frees there later in the cycle is kept too, and no victim there
// is weighed for another group; and once only movable groups stand on
// those nodes they are moved off, under the rules of a move, and the group
// is held in the room they leave. Where DefragPolicy.MaxLostWork keeps
// some of those groups in place until they checkpoint, the others are
// moved off ahead of them, for the group but without placing it, and the
// room they leave is kept with the node's. A drained node is no decision:
// each cycle chooses again from what runs. It is said, though: a group
// left waiting with nodes kept for it (code UnplacedNoFit, as it waits for
// capacity) names them in Unplaced.Kept, with the GPUs held on each by
// work that may not move and by movable work, and its reason says what it
// waits for there, unless coming nodes would start it (UnplacedNodesComing
// says that instead).
//
// Why preemption cannot cycle. Fair shares and guarantees stay fixed while
// work moves between running and pending, every reclaim strictly lowers the
// pair (excess over fair share in scarce resources, GPUs borrowed beyond
// guarantees) lexicographically, and every preemption raises the running
// priorities of one queue; both orders are well founded, so an unchanged
// workload reaches a fixed point with no evictions. The argument in full is
// in docs/concepts/preemption.md; TestPropertyInvariantsAndFixedPoint checks
// it on random workloads, with minimum runtimes, checkpoints and usage over
// time.
//
// The policies over time keep it. Fair shares now also depend on the
// queues' usage over time, but that is a function of the carried
// Snapshot.Usage and of Now alone: queue.Decay returns its input unchanged
// when Now has not moved, so for one Now every cycle sees the same tilts
// and the same fair shares, and the argument above applies as it is. A
// minimum runtime only removes victims, and the victim order only chooses
// among allowed victims; neither enters the measures. Over time the
// workload is not unchanged (tilts move, groups come of age), but the
// evictions time can cause are bounded: a tilt is a continuous function of
// the usage over time, which moves at a rate of at most
// capacity*ln2/halfLife, so between two reclaims of the same queues in
// opposite directions the fair shares must move by at least the smaller
// victim's size, which takes a time bounded below; and a group evicted and
// placed again is protected for its minimum runtime.
//
// A shrink is an eviction of part of a group under the same rule as a
// whole one: a preemption takes members of strictly lower priority in the
// preemptor's queue, so that queue's multiset of running priorities still
// grows (a member of priority p goes, the preemptor's higher priority
// comes in); a reclaim takes members whose queue stays at or above its
// fair share (or guarantee) without them, so Φ (or Ψ) falls by what they
// held, exactly as for a whole victim. The members given up return as
// demand of the same queue and priority, which the argument already
// covers: they wait behind their preemptor, and can take nothing back
// from a queue at or below its share.
//
// Why moves cannot loop. A move changes no queue's usage but the waiting
// group's: the moved group is evicted and placed again in the same plan
// with the same requests, so its queue's usage, every fair share and
// guarantee, and every queue's multiset of running priorities are what
// they were; only the waiting group is added, as the allocate phase would
// add it had its room been whole. A move thus acts on Φ, Ψ and the
// priority multisets exactly as allocation does, and the preemption
// argument above holds with moves as it does with allocation. What is
// left is the arrangement of groups on nodes, which could in principle
// cycle were moves made for nothing. They are not: a move is made only
// when the waiting group then fits, and every move of it is undone that
// it can do without (spareMoves), so each cycle that moves places at
// least one more group than it leaves pending, and moves no group that
// was not running. Nothing a move does makes a group pending: on an
// unchanged workload the groups that run or are held only grow between
// evictions for preemption and reclaim, while the GPUs they hold are
// bounded by the cluster. So, between two such evictions, of which the
// argument above allows only finitely many, there are finitely many
// moves, and the whole sequence reaches a fixed point with no moves,
// however large the budget and whatever the window: the window only
// slows moves further (no group is moved twice within it).
//
// Drains keep it. Keeping a node for a cycle evicts nothing,
// changes no queue's usage and no fair share, and is given back when the
// cycle ends; it only leaves some groups pending that would have been
// placed, which the argument allows (it counts placements, and nothing a
// drain does makes a running group pending); evictions it leads to (a
// group that would have fit in the kept room preempts or reclaims
// instead) are made under their own rules, which the argument bounds
// whatever room is free. A drain places its group at once only where
// allocation would place it, an allocation under its queue's admission
// like any other, which acts on Φ and Ψ as allocation does. The moves off a drained node are moves as above: made only when
// the drained-for group then fits, every one it can do without put back
// (spareMoves, through commitMoves), within the window and the budget,
// and counted with the defragment phase's moves in the same window
// (movesLeft). So a cycle that drains with moves places at least one more
// group than it leaves pending, as a cycle that moves does, and the
// count above bounds it too; a cycle that only keeps room decides
// nothing, and on an unchanged workload a cycle that decides nothing is
// the fixed point, whatever it kept. DefragPolicy.MaxLostWork takes
// groups out of what may move (those too far from their restart point),
// so it removes moves from every cycle; the one kind of move it adds is
// the move ahead of a drain (moveAhead), which places no group, so the
// count above does not bound it. What does: it takes a group off a node
// kept in the cycle, and places it off every node kept so far. The node
// it leaves keeps its fixed work and gains free room, and the node it
// goes to loses room, so neither change makes another node cheaper to
// empty than the one it left, and on an unchanged workload the next
// cycle keeps the same nodes. No placement lands on a kept node (its free
// room is out of the state), so a group moved ahead never stands on a
// kept node again, and the kept nodes hold finitely many groups: there
// are finitely many moves ahead.
// TestPropertyDefragmentFixedPoint checks it with a window of one cycle,
// where only this argument bounds the moves, with drains from the first
// cycle, after some cycles or never, while groups that may not move leave
// the drained nodes one at a time, and with moves of any work or only of
// groups that started or checkpointed a few cycles before, movable groups
// checkpointing one at a time.
package scheduler
