package placement

import (
	"encoding/binary"
	"fmt"
	"slices"
	"strings"

	"github.com/gpuplane/gpuplane/internal/scheduler/model"
)

// NodeState is the free state of one node.
type NodeState struct {
	Node      *model.Node
	FreeCPU   int64
	FreeMem   int64
	GPUFree   []int64 // milli-GPU free per GPU
	GPUMem    []int64 // GPU memory free per GPU (MiB)
	SliceFree []int   // free MIG slices per GPU
	// Pods counts pods on the node; ShareSizes counts them by the
	// milli-GPU each asked for of one GPU (1000 for whole GPUs).
	Pods       int
	ShareSizes map[int64]int
	// res counts pods, scalar resources and host ports (resources.go).
	res nodeResources

	class int32
	// ordered: the node's GPUs are not interchangeable (a topology, or
	// device sets or claim-only marks that differ between them), so its
	// signature keeps them in index order.
	ordered bool
	sig     int32 // -1 when stale
	sigMix  int32 // sig plus the pod mix; -1 when stale
	// vol counts attached volumes on a node with attach limits
	// (volumes.go).
	vol *nodeVolumes
	// closed: no placement may use the node (State.Close).
	closed bool
}

// GPUUsed reports whether GPU g holds any allocation.
func (n *NodeState) GPUUsed(g int) bool {
	gp := &n.Node.GPUs[g]
	return n.GPUFree[g] < gp.Capacity() || (gp.MIGSlices > 0 && n.SliceFree[g] < gp.MIGSlices) ||
		(gp.MemoryMiB > 0 && n.GPUMem[g] < gp.MemoryMiB)
}

// FreeMilli is the milli-GPU free on non-MIG GPUs.
func (n *NodeState) FreeMilli() int64 {
	var s int64
	for g := range n.GPUFree {
		if n.Node.GPUs[g].MIGSlices == 0 {
			s += n.GPUFree[g]
		}
	}
	return s
}

// CapMilli is the milli-GPU capacity of the node's GPUs.
func (n *NodeState) CapMilli() int64 {
	var s int64
	for g := range n.Node.GPUs {
		s += n.Node.GPUs[g].Capacity()
	}
	return s
}

// change is one journalled Assign or Release. It keeps the request by
// reference, not by value: a request is some hundred bytes (its pod
// constraints) of which apply reads few, and a cycle journals every pod it
// syncs, tries and binds.
type change struct {
	node   int
	req    *model.Request
	shares []model.GPUShare
	add    bool
	pvs    []string // the PVs Assign took for req's claims
}

// Mark is a checkpoint in a State's journal.
type Mark int

// State is the mutable free state of a cluster. Assign and Release journal
// every change so Rollback can undo what-if work exactly. The journal keeps
// the request each was given, not a copy of it: a request passed to Assign
// or Release must stay unchanged until the next Commit (the core's come
// from its snapshot and its running index, which it never modifies).
type State struct {
	Nodes   []NodeState
	journal []change
	// journalPeak is the journal's longest since the last Commit;
	// journalIdle counts the commits in a row that used little of it.
	journalPeak, journalIdle int
	// commits counts Commit's calls: a scheduling cycle is the time
	// between two.
	commits uint64
	// changed logs node indexes in change order; placers read it to
	// re-score only what changed. Positions count from the State's start:
	// changed[0] is position changedBase (Commit trims the log).
	changed     []int
	changedBase int
	classes     map[string]int32
	sigs        map[string]int32
	buf         []byte
	// sigLimit bounds sigs (signatureLimit; tests lower it), and sigEpoch
	// counts the times sigs started over: readers that key anything by a
	// signature drop it when the epoch moves.
	sigLimit int
	sigEpoch uint64
	// classLimit bounds classes (classMin, classPerNode; tests lower it).
	classLimit int
	// aff counts pods by topology domain for pod affinity and spread
	// (podaffinity.go).
	aff *podIndex
	// vol counts what pods' volumes take (volumes.go).
	vol volumeState
	// roomBuf is RoomFreed's scratch space.
	roomBuf struct {
		free, mem []int64
		slices    []int
	}
	// comingUp reads coming nodes (model.Node.Coming) as they will be
	// once they register their GPUs (SetComingUp).
	comingUp bool
	// closed lists the nodes Close closed, for Open.
	closed []int
}

// SetComingUp makes Options and Why read coming nodes
// (model.Node.Coming) as they will be once they register their GPUs (up)
// or as they are (!up), for a what-if: would a group fit once the nodes
// already bought are up? A Placer must not run meanwhile: its memo knows
// coming nodes as taking nothing.
func (s *State) SetComingUp(up bool) { s.comingUp = up }

// NewState builds the free state of nodes (which it keeps a reference to)
// with nothing allocated.
func NewState(nodes []model.Node) *State {
	s := &State{Nodes: make([]NodeState, len(nodes)), classes: map[string]int32{}, sigs: map[string]int32{}, sigLimit: signatureLimit, aff: newPodIndex(),
		classLimit: max(classMin, classPerNode*len(nodes))}
	for i := range nodes {
		n := &nodes[i]
		ns := &s.Nodes[i]
		ns.Node = n
		ns.FreeCPU, ns.FreeMem = n.MilliCPU, n.MemoryMiB
		ns.GPUFree = make([]int64, len(n.GPUs))
		ns.GPUMem = make([]int64, len(n.GPUs))
		ns.SliceFree = make([]int, len(n.GPUs))
		for g := range n.GPUs {
			ns.GPUFree[g] = n.GPUs[g].Capacity()
			ns.GPUMem[g] = n.GPUs[g].MemoryMiB
			ns.SliceFree[g] = n.GPUs[g].MIGSlices
		}
		ns.ShareSizes = map[int64]int{}
		ns.res.init(n)
		ns.class = s.classOf(n)
		ns.ordered = n.Topology != nil || slices.ContainsFunc(n.GPUs, func(g model.GPU) bool {
			return g.ClaimOnly != n.GPUs[0].ClaimOnly || g.DeviceSets != n.GPUs[0].DeviceSets
		})
		ns.sig, ns.sigMix = -1, -1
	}
	return s
}

// Relabel takes node i's labels and domains as they now are: the caller
// changed those fields, and no other, of the node the State reads, with
// none of the node's pods applied (it releases them first and assigns
// them again after). The node's class and signature are worked out again,
// placers re-score it, and the pod constraints' counts follow its domains.
func (s *State) Relabel(i int) error {
	ns := &s.Nodes[i]
	if ns.Pods != 0 {
		return fmt.Errorf("relabelling node %q: %d pods are applied to it", ns.Node.Name, ns.Pods)
	}
	ns.class = s.classOf(ns.Node)
	ns.sig, ns.sigMix = -1, -1
	s.changed = append(s.changed, i)
	s.aff.relabel(s, i)
	return nil
}

// classOf interns everything static about a node that placement reads.
func (s *State) classOf(n *model.Node) int32 {
	key := classKey(n)
	if id, ok := s.classes[key]; ok {
		return id
	}
	if len(s.classes) >= s.classLimit {
		s.forgetClasses()
	}
	return s.internClass(key)
}

// classKey is what classOf interns of n.
func classKey(n *model.Node) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d/%d/%v/%v/%v|", n.MilliCPU, n.MemoryMiB, n.Unschedulable, n.Disrupted, n.Coming)
	for _, g := range n.GPUs {
		fmt.Fprintf(&b, "%s:%d:%d:%d:%d:%d:%t:%t:%s:%d:%t:%s:%t,", g.Model, g.MemoryMiB, g.Capacity(), g.MIGSlices, g.MIGInstanceSlices, g.NUMANode, g.SharesOnly, g.WholeOnly, g.ShareResource, g.MinShareMilli, g.ClaimOnly, g.DeviceSets, g.Repartitioning)
	}
	keys := make([]string, 0, len(n.Labels))
	for k := range n.Labels {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		fmt.Fprintf(&b, "|%s=%s", k, n.Labels[k])
	}
	for _, t := range n.Taints {
		fmt.Fprintf(&b, "|t:%s=%s:%s", t.Key, t.Value, t.Effect)
	}
	if t := n.Topology; t != nil {
		b.WriteString("|topo")
		for i := 0; i < t.Len(); i++ {
			for j := i + 1; j < t.Len(); j++ {
				l, _ := t.Between(i, j)
				fmt.Fprintf(&b, ",%d", l.Score())
			}
		}
	}
	return b.String()
}

// internClass returns the id of the class key, new ones numbered on.
func (s *State) internClass(key string) int32 {
	id, ok := s.classes[key]
	if !ok {
		id = int32(len(s.classes))
		s.classes[key] = id
	}
	return id
}

// A node's class changes with its labels and taints, and the scheduler
// relabels nodes for as long as it runs, so the classes would pile up:
// past classMin, or classPerNode classes a node, the table starts over.
const (
	classMin     = 4096
	classPerNode = 4
)

// forgetClasses starts the class table over with the classes of the
// nodes as they are now. A class id is part of every signature, so the
// signatures start over too.
func (s *State) forgetClasses() {
	s.classes = make(map[string]int32)
	for i := range s.Nodes {
		if n := s.Nodes[i].Node; n != nil {
			s.Nodes[i].class = s.internClass(classKey(n))
		}
	}
	s.forgetSignatures()
}

// signature interns a node's class plus its free state. Nodes whose GPUs
// are interchangeable (no topology, no device sets) sort their GPUs, so
// nodes that differ only in which GPU is busy share a signature.
func (s *State) signature(i int) int32 {
	ns := &s.Nodes[i]
	if ns.sig >= 0 {
		return ns.sig
	}
	s.boundSignatures()
	b := s.buf[:0]
	b = binary.AppendVarint(b, int64(ns.class))
	b = binary.AppendVarint(b, ns.FreeCPU)
	b = binary.AppendVarint(b, ns.FreeMem)
	var room [16][3]int64 // a node's GPUs, on the stack for all but the largest
	gpus := room[:0]
	for g := range ns.GPUFree {
		gpus = append(gpus, [3]int64{ns.GPUFree[g], ns.GPUMem[g], int64(ns.SliceFree[g])})
	}
	if !ns.ordered {
		sortFree(gpus)
	}
	for _, g := range gpus {
		b = binary.AppendVarint(b, g[0])
		b = binary.AppendVarint(b, g[1])
		b = binary.AppendVarint(b, g[2])
	}
	if ns.res.counted || len(ns.res.ports) > 0 {
		b = ns.res.appendSignature(b, ns.Pods)
	}
	s.buf = b
	id, ok := s.sigs[string(b)]
	if !ok {
		id = int32(len(s.sigs))
		s.sigs[string(b)] = id
	}
	ns.sig = id
	return id
}

// signatureLimit bounds the signatures a State keeps. Free CPU and memory
// take many values over a long run: 200,000 placements and exits of pods
// of a few sizes on 100 nodes leave near 90,000 states behind, each
// interned for good without a bound. Past it the table starts over.
const signatureLimit = 1 << 17

// boundSignatures starts the signature table over when it is full: every
// node's signature is worked out again when next read, and sigEpoch moves
// so that a Placer drops its memo, which is keyed by them. Called before a
// new signature is worked out, so that none in the making holds an id of
// the table dropped.
func (s *State) boundSignatures() {
	if len(s.sigs) < s.sigLimit {
		return
	}
	s.forgetSignatures()
}

// forgetSignatures drops every signature; see boundSignatures.
func (s *State) forgetSignatures() {
	s.sigs = make(map[string]int32) // a cleared map would keep its room
	for i := range s.Nodes {
		s.Nodes[i].sig, s.Nodes[i].sigMix = -1, -1
	}
	s.sigEpoch++
}

// sortFree sorts GPUs' free amounts in increasing order, by each amount
// in turn. The few GPUs of a node take an insertion sort; this runs for
// every node that changed before a placement reads it.
func sortFree(gpus [][3]int64) {
	less := func(a, b *[3]int64) bool {
		if a[0] != b[0] {
			return a[0] < b[0]
		}
		if a[1] != b[1] {
			return a[1] < b[1]
		}
		return a[2] < b[2]
	}
	if len(gpus) > 32 {
		slices.SortFunc(gpus, func(a, b [3]int64) int { return slices.Compare(a[:], b[:]) })
		return
	}
	for i := 1; i < len(gpus); i++ {
		for j := i; j > 0 && less(&gpus[j], &gpus[j-1]); j-- {
			gpus[j], gpus[j-1] = gpus[j-1], gpus[j]
		}
	}
}

// signatureMix is signature plus the node's pod mix (ShareSizes), for
// scorers that read it.
func (s *State) signatureMix(i int) int32 {
	ns := &s.Nodes[i]
	if ns.sigMix >= 0 {
		return ns.sigMix
	}
	s.boundSignatures() // before the node's signature is written into b
	sizes := make([]int64, 0, len(ns.ShareSizes))
	for k := range ns.ShareSizes {
		sizes = append(sizes, k)
	}
	slices.Sort(sizes)
	b := binary.AppendVarint(s.buf[:0], -1)
	b = binary.AppendVarint(b, int64(s.signature(i)))
	for _, k := range sizes {
		b = binary.AppendVarint(b, k)
		b = binary.AppendVarint(b, int64(ns.ShareSizes[k]))
	}
	s.buf = b
	id, ok := s.sigs[string(b)]
	if !ok {
		id = int32(len(s.sigs))
		s.sigs[string(b)] = id
	}
	ns.sigMix = id
	return id
}

// Checkpoint returns a mark to Rollback to.
func (s *State) Checkpoint() Mark { return Mark(len(s.journal)) }

// Rollback undoes every Assign and Release since m, newest first.
func (s *State) Rollback(m Mark) {
	for i := len(s.journal) - 1; i >= int(m); i-- {
		c := &s.journal[i]
		s.apply(c.node, c.req, c.shares, !c.add)
		s.takePVs(c.pvs, false)
	}
	s.journal = s.journal[:m]
}

// Commit forgets the journal up to now; earlier marks become invalid. Once
// the change log is long it is trimmed: a reader behind it then sees every
// node as changed (Changes).
func (s *State) Commit() {
	s.commits++
	// The journal's array is reused from cycle to cycle, cleared as far as
	// it was used, so that its entries keep no shares or requests alive.
	// A cycle that placed a large backlog leaves a long array behind
	// (about 85,000 entries of 72 bytes after 40,000 pods), which the
	// cycles after it hardly use: once it has
	// been used to less than a quarter for journalIdle commits running,
	// it goes.
	clear(s.journal[:s.journalPeak])
	s.journal = s.journal[:0]
	if cap(s.journal) > journalKeep && s.journalPeak < cap(s.journal)/4 {
		s.journalIdle++
		if s.journalIdle >= journalIdle {
			s.journal, s.journalIdle = nil, 0
		}
	} else {
		s.journalIdle = 0
	}
	s.journalPeak = 0
	s.aff.commit()
	s.vol.pvTaken = nil
	if len(s.changed) > changeLogMin+changeLogPerNode*len(s.Nodes) {
		s.changedBase += len(s.changed)
		s.changed = s.changed[:0]
	}
}

// Fits reports whether shares can be taken on node i for req without
// over-allocating anything, on a node open to placement (Close).
func (s *State) Fits(i int, req *model.Request, shares []model.GPUShare) bool {
	return !s.Nodes[i].closed && s.fitsHeld(i, req, shares) && (req.Volumes == nil || s.volumeWhy(i, req) == "")
}

// Close keeps node i out of every placement until Open: Options, Fits
// (and so Assign), Room and every Placer find no place there, whatever
// room frees on it. Hold and Release go on as before, so the pods running
// there can be released and put back by what-ifs. A scheduling cycle
// closes the nodes it keeps free for a group: room an eviction or a move
// frees there later in the cycle stays kept with the rest. Close is not
// journalled (Rollback leaves it), so it is called outside what-ifs.
func (s *State) Close(i int) {
	ns := &s.Nodes[i]
	if ns.closed {
		return
	}
	ns.closed = true
	s.closed = append(s.closed, i)
	s.changed = append(s.changed, i) // placers score it again
}

// Closed reports whether node i is closed to placement (Close).
func (s *State) Closed(i int) bool { return s.Nodes[i].closed }

// Open opens every node Close closed.
func (s *State) Open() {
	for _, i := range s.closed {
		s.Nodes[i].closed = false
		s.changed = append(s.changed, i)
	}
	s.closed = s.closed[:0]
}

// fitsHeld is Fits without the volume filters.
func (s *State) fitsHeld(i int, req *model.Request, shares []model.GPUShare) bool {
	ns := &s.Nodes[i]
	pods := ns.Pods
	if req.NotPod {
		// Takes no slot of the pod limit: below any limit, even none.
		pods = -1
	}
	if ns.FreeCPU < req.MilliCPU || ns.FreeMem < req.MemoryMiB || !ns.res.fits(req, pods) {
		return false
	}
	for _, sh := range shares {
		if sh.Index < 0 || sh.Index >= len(ns.GPUFree) {
			return false
		}
		if ns.GPUFree[sh.Index] < sh.Milli || ns.SliceFree[sh.Index] < sh.MIGSlices {
			return false
		}
		if ns.Node.GPUs[sh.Index].MemoryMiB > 0 && ns.GPUMem[sh.Index] < sh.MemoryMiB {
			return false
		}
	}
	return true
}

// Assign takes req's resources and shares on node i. It returns an error,
// changing nothing, if they do not fit. req must not change until the
// next Commit (State).
func (s *State) Assign(i int, req *model.Request, shares []model.GPUShare) error {
	if i < 0 || i >= len(s.Nodes) {
		return fmt.Errorf("assigning to node %d: no such node", i)
	}
	if !s.Fits(i, req, shares) {
		return fmt.Errorf("assigning to node %s: request does not fit", s.Nodes[i].Node.Name)
	}
	var pvs []string
	if req.Volumes != nil {
		pvs, _ = s.choosePVs(i, req.Volumes)
		s.takePVs(pvs, true)
	}
	s.apply(i, req, shares, true)
	s.vol.lastPVs = pvs
	s.record(change{node: i, req: req, shares: shares, add: true, pvs: pvs})
	return nil
}

// Hold is Assign for a pod that runs on node i already: its resources and
// shares must fit, but its volumes are facts, not choices. Volumes it
// attaches count against the node's attach limits however many the node
// has attached (a node's limit may be lower than what its pods attach:
// the limit changed, or another scheduler placed them), and its exclusive
// uses count though another pod has one; neither refuses it. A running
// pod takes no PV (its claims are bound).
func (s *State) Hold(i int, req *model.Request, shares []model.GPUShare) error {
	if i < 0 || i >= len(s.Nodes) {
		return fmt.Errorf("holding on node %d: no such node", i)
	}
	if !s.fitsHeld(i, req, shares) {
		return fmt.Errorf("holding on node %s: request does not fit", s.Nodes[i].Node.Name)
	}
	s.apply(i, req, shares, true)
	s.vol.lastPVs = nil
	s.record(change{node: i, req: req, shares: shares, add: true})
	return nil
}

// Rest is the part of req and shares, a pod's on node i, that is free
// there: each amount (CPU, memory, each share's milli-GPU, GPU memory and
// MIG slices, each scalar resource) at most what the node has free, the
// host ports no pod holds, and a pod's slot while the node has one left
// (else the part is NotPod). The part keeps the pod's namespace, labels,
// affinity and whether it is being deleted, which other pods' terms see. A pod that will run there
// once its victims are gone holds its rest; a pod released from the
// state that still runs (evicted, not gone yet) shows by its rest whether
// what was placed since took some of its room.
func (s *State) Rest(i int, req *model.Request, shares []model.GPUShare) (model.Request, []model.GPUShare) {
	ns := &s.Nodes[i]
	out := model.Request{
		MilliCPU: clampFree(req.MilliCPU, ns.FreeCPU), MemoryMiB: clampFree(req.MemoryMiB, ns.FreeMem),
		Namespace: req.Namespace, Labels: req.Labels, Affinity: req.Affinity, Terminating: req.Terminating,
		NotPod: req.NotPod || (ns.res.counted && ns.Pods >= ns.res.maxPods),
	}
	if ns.res.counted {
		for k, v := range req.Scalars {
			if v = clampFree(v, ns.res.free[k]); v > 0 {
				if out.Scalars == nil {
					out.Scalars = map[string]int64{}
				}
				out.Scalars[k] = v
			}
		}
	}
	for _, p := range req.HostPorts {
		if !ns.res.portTaken(p) {
			out.HostPorts = append(out.HostPorts, p)
		}
	}
	var part []model.GPUShare
	for _, sh := range shares {
		g := sh.Index
		if g < 0 || g >= len(ns.GPUFree) {
			continue
		}
		r := model.GPUShare{Index: g, Milli: clampFree(sh.Milli, ns.GPUFree[g]), MIGSlices: int(clampFree(int64(sh.MIGSlices), int64(ns.SliceFree[g])))}
		if ns.Node.GPUs[g].MemoryMiB > 0 {
			r.MemoryMiB = clampFree(sh.MemoryMiB, ns.GPUMem[g])
		}
		if r.Milli > 0 || r.MIGSlices > 0 || r.MemoryMiB > 0 {
			part = append(part, r)
		}
	}
	return out, part
}

// clampFree is want, at most free, at least 0.
func clampFree(want, free int64) int64 { return max(0, min(want, free)) }

// Release returns req's resources and shares on node i. req must not
// change until the next Commit (State).
func (s *State) Release(i int, req *model.Request, shares []model.GPUShare) {
	s.apply(i, req, shares, false)
	s.record(change{node: i, req: req, shares: shares, add: false})
}

func (s *State) record(c change) {
	s.journal = append(s.journal, c)
	s.journalPeak = max(s.journalPeak, len(s.journal))
}

func (s *State) apply(i int, req *model.Request, shares []model.GPUShare, add bool) {
	ns := &s.Nodes[i]
	sign := int64(1)
	if !add {
		sign = -1
	}
	ns.FreeCPU -= sign * req.MilliCPU
	ns.FreeMem -= sign * req.MemoryMiB
	for _, sh := range shares {
		ns.GPUFree[sh.Index] -= sign * sh.Milli
		if ns.Node.GPUs[sh.Index].MemoryMiB > 0 {
			ns.GPUMem[sh.Index] -= sign * sh.MemoryMiB
		}
		ns.SliceFree[sh.Index] -= int(sign) * sh.MIGSlices
	}
	if !req.NotPod {
		ns.Pods += int(sign)
	}
	if ns.res.touches(req) {
		ns.res.apply(req, sign)
	}
	if req.UsesGPU() {
		size := req.GPUMilli
		if req.Replicas > 0 && len(shares) == 1 {
			size = shares[0].Milli
		}
		if req.GPUs > 0 && (req.Replicas == 0 || len(shares) != 1) {
			size = model.MilliPerGPU
		}
		ns.ShareSizes[size] += int(sign)
		if ns.ShareSizes[size] == 0 {
			delete(ns.ShareSizes, size)
		}
	}
	if req.Volumes != nil {
		s.applyVolumes(i, req, add)
	}
	ns.sig, ns.sigMix = -1, -1
	s.changed = append(s.changed, i)
	s.aff.apply(s, i, req, int32(sign))
}

// Changes returns the node indexes changed since position from, and the new
// position. When the log no longer reaches back to from (Commit trimmed
// it), every node counts as changed.
func (s *State) Changes(from int) ([]int, int) {
	end := s.changedBase + len(s.changed)
	if from < s.changedBase || from > end {
		all := make([]int, len(s.Nodes))
		for i := range all {
			all[i] = i
		}
		return all, end
	}
	return s.changed[from-s.changedBase:], end
}

// changeLogLimit is how long the change log may grow, per node and in all,
// before Commit trims it: a scheduler running for days would otherwise keep
// every change it ever made.
const (
	changeLogPerNode = 16
	changeLogMin     = 1 << 16
)

// A journal array of more than journalKeep changes (72 bytes each) goes after journalIdle commits in a row that used less than a
// quarter of it.
const (
	journalKeep = 4096
	journalIdle = 8
)

// MilliTotals returns allocated and total milli-GPU and the number of GPUs
// in use and in all, over the whole cluster.
func (s *State) MilliTotals() (alloc, total int64, used, gpus int) {
	for i := range s.Nodes {
		ns := &s.Nodes[i]
		for g := range ns.GPUFree {
			c := ns.Node.GPUs[g].Capacity()
			total += c
			gpus++
			if ns.Node.GPUs[g].MIGSlices > 0 {
				alloc += c * int64(ns.Node.GPUs[g].MIGSlices-ns.SliceFree[g]) / int64(ns.Node.GPUs[g].MIGSlices)
			} else {
				alloc += c - ns.GPUFree[g]
			}
			if ns.GPUUsed(g) {
				used++
			}
		}
	}
	return alloc, total, used, gpus
}
