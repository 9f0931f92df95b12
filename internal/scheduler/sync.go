package scheduler

import (
	"fmt"
	"maps"
	"reflect"
	"slices"

	"github.com/gpuplane/gpuplane/internal/scheduler/model"
	"github.com/gpuplane/gpuplane/internal/scheduler/placement"
)

// chunkID tells a node's running chunk from another: its length and the
// address of its first element (model.Snapshot.RunningByNode).
type chunkID struct {
	n     int
	first *model.Allocation
}

func idOf(chunk []model.Allocation) chunkID {
	if len(chunk) == 0 {
		return chunkID{}
	}
	return chunkID{len(chunk), &chunk[0]}
}

// sync brings the free state and the running index in line with the
// snapshot. It compares only the nodes whose chunk is not the one applied
// last and the nodes the last cycle's own decisions changed (finish); on
// those it releases every pod that went or changed before it assigns any
// that came, so a pod moving between nodes, or the real allocation of a
// bind replacing the bind, never looks like over-allocation. On an error
// the scheduler starts over at the next cycle.
func (s *Scheduler) sync(snap *model.Snapshot) (err error) {
	defer func() {
		if err != nil {
			s.st = nil
		}
	}()
	chunks := snap.RunningByNode
	if chunks != nil && len(chunks) != len(snap.Nodes) {
		return fmt.Errorf("syncing snapshot: runningByNode has %d chunks for %d nodes", len(chunks), len(snap.Nodes))
	}
	if s.st == nil || !s.syncNodes(snap.Nodes) {
		if err := s.reset(snap); err != nil {
			return err
		}
	}
	if chunks == nil {
		chunks = make([][]model.Allocation, len(snap.Nodes)) // nothing runs
	}
	s.epoch++
	diff := s.diff[:0]
	for _, n := range s.touched {
		if s.mark[n] != s.epoch {
			s.mark[n] = s.epoch
			diff = append(diff, n)
		}
	}
	s.touched = s.touched[:0]
	for n := range chunks {
		if s.mark[n] != s.epoch && idOf(chunks[n]) != s.chunks[n] {
			s.mark[n] = s.epoch
			diff = append(diff, n)
		}
	}
	s.diff = diff
	for _, n := range diff {
		if err := s.releaseGone(n, chunks[n]); err != nil {
			return err
		}
	}
	for _, n := range diff {
		if err := s.assignNew(n, chunks[n]); err != nil {
			return err
		}
		s.chunks[n] = idOf(chunks[n])
	}
	s.run.settle()
	s.st.Commit()
	return nil
}

// releaseGone marks the pods on node n that chunk still lists unchanged as
// kept and releases every other pod applied on n. A pod listed here but
// applied on another node is left to assignNew, which finds it twice
// unless that node's own comparison released it.
func (s *Scheduler) releaseGone(n int, chunk []model.Allocation) error {
	for i := range chunk {
		a := &chunk[i]
		if a.Node != s.nodes[n].Name {
			return fmt.Errorf("syncing snapshot: pod %q is listed under node %q but names node %q", a.Pod, s.nodes[n].Name, a.Node)
		}
		ps := s.run.find(n, a.Pod)
		if ps == nil {
			continue // new here; assignNew looks for it elsewhere
		}
		if ps.kept == s.epoch {
			return fmt.Errorf("syncing snapshot: pod %q is running twice", a.Pod)
		}
		if sameAlloc(ps.a, a) {
			ps.kept, ps.a = s.epoch, a
		}
	}
	for k := len(s.run.onNode[n]) - 1; k >= 0; k-- {
		if ps := s.run.onNode[n][k]; ps.kept != s.epoch {
			s.st.Release(n, &ps.a.Request, ps.a.GPUs)
			s.run.drop(ps)
		}
	}
	return nil
}

// assignNew assigns the pods of chunk that releaseGone did not keep.
func (s *Scheduler) assignNew(n int, chunk []model.Allocation) error {
	for i := range chunk {
		a := &chunk[i]
		ps := s.run.find(n, a.Pod)
		if ps == nil {
			ps = s.run.pods[a.Pod]
		}
		if ps != nil {
			if ps.kept == s.epoch && ps.a == a {
				continue
			}
			return fmt.Errorf("syncing snapshot: pod %q is running twice", a.Pod)
		}
		if err := s.st.Hold(n, &a.Request, a.GPUs); err != nil {
			return fmt.Errorf("syncing snapshot: pod %q: %w (the snapshot over-allocates the node)", a.Pod, err)
		}
		s.run.add(a, n)
	}
	return nil
}

// sameAlloc reports whether y holds what x holds, in the same group, queue
// and priority, with the same start, minimum runtime and last checkpoint
// (which evictions read), namespace, labels, pod affinity and
// terminating flag (which other pods' constraints read while it runs).
// Placement constraints (node selector, tolerations, GPU models, spread)
// are not compared: they decided where the pod went and play no part once
// it runs. A driver that copies an unchanged allocation into a new chunk
// copies its slices and maps by reference, so those are compared by
// identity before their contents: a pod's labels are read only when the
// pod was rebuilt.
func sameAlloc(x, y *model.Allocation) bool {
	if x == y {
		return true
	}
	p, q := &x.Request, &y.Request
	return x.Pod == y.Pod && x.Group == y.Group && x.Queue == y.Queue && x.Priority == y.Priority && x.Node == y.Node &&
		x.StartedAt == y.StartedAt && x.NonPreemptible == y.NonPreemptible && x.MinRuntime == y.MinRuntime && x.LastCheckpoint == y.LastCheckpoint &&
		p.MilliCPU == q.MilliCPU && p.MemoryMiB == q.MemoryMiB && p.GPUs == q.GPUs && p.GPUMilli == q.GPUMilli && p.Replicas == q.Replicas &&
		p.GPUMemoryMiB == q.GPUMemoryMiB && p.MIGSlices == q.MIGSlices && (sameSlice(x.GPUs, y.GPUs) || slices.Equal(x.GPUs, y.GPUs)) &&
		p.Namespace == q.Namespace && (mapID(p.Labels) == mapID(q.Labels) || maps.Equal(p.Labels, q.Labels)) &&
		p.Terminating == q.Terminating && p.NotPod == q.NotPod && (p.Affinity == q.Affinity || reflect.DeepEqual(p.Affinity, q.Affinity)) &&
		(mapID(p.Scalars) == mapID(q.Scalars) || maps.Equal(p.Scalars, q.Scalars)) &&
		(sameSlice(p.HostPorts, q.HostPorts) || slices.Equal(p.HostPorts, q.HostPorts)) &&
		(p.Volumes == q.Volumes || reflect.DeepEqual(p.Volumes, q.Volumes))
}

// syncNodes takes the snapshot's nodes when they are the state's nodes
// but for the labels or domains of some (a labeller at work): each of
// those is patched in place (its pods released, the node relabelled, its
// pods assigned again), the rest adopted as matchNodes does. It reports
// false, having changed nothing the state reads, when any other field of
// a node differs or the node list is another; the caller then resets.
func (s *Scheduler) syncNodes(nodes []model.Node) bool {
	a := s.nodes
	if len(a) != len(nodes) {
		return false
	}
	if matchNodes(a, nodes, true) {
		return true
	}
	relabel := s.relabel[:0]
	for i := range a {
		x, y := &a[i], &nodes[i]
		if matchNode(x, y, true) {
			continue
		}
		if !sameButLabels(x, y) {
			return false
		}
		relabel = append(relabel, i)
	}
	s.relabel = relabel
	domains := false
	for _, i := range relabel {
		x, y := &a[i], &nodes[i]
		domains = domains || !maps.Equal(x.Domains, y.Domains)
		topo, mig := x.Topology, x.MIG
		*x = *y
		x.Topology, x.MIG = topo, mig
		for _, ps := range s.run.onNode[i] {
			s.st.Release(i, &ps.a.Request, ps.a.GPUs)
		}
		if err := s.st.Relabel(i); err != nil {
			return false
		}
		for _, ps := range s.run.onNode[i] {
			if err := s.st.Hold(i, &ps.a.Request, ps.a.GPUs); err != nil {
				return false
			}
		}
	}
	if domains && s.topo != nil {
		// The gangs' topology domains are worked out again when next
		// asked; the placer's tie order, taken from the first levels
		// asked, follows the new domains now.
		s.topo = nil
		if s.tieLevels != nil {
			s.topology(s.tieLevels)
		}
	}
	return true
}

// sameButLabels reports whether x and y are equal in every field the
// state reads but their labels and domains.
func sameButLabels(x, y *model.Node) bool {
	xc, yc := *x, *y
	xc.Labels, xc.Domains, yc.Labels, yc.Domains = nil, nil, nil, nil
	return sameNode(&xc, &yc)
}

// reset starts over on the snapshot's nodes with nothing running.
func (s *Scheduler) reset(snap *model.Snapshot) error {
	s.nodes = slices.Clone(snap.Nodes)
	s.index = make(map[string]int, len(s.nodes))
	s.disrupted, s.coming = s.disrupted[:0], s.coming[:0]
	for i := range s.nodes {
		if _, dup := s.index[s.nodes[i].Name]; dup {
			return fmt.Errorf("syncing snapshot: node %q listed twice", s.nodes[i].Name)
		}
		s.index[s.nodes[i].Name] = i
		if s.nodes[i].Disrupted {
			s.disrupted = append(s.disrupted, i)
		} else if s.nodes[i].Coming {
			s.coming = append(s.coming, i)
		}
	}
	s.capacity = model.CapacityOf(s.nodes)
	s.st = placement.NewState(s.nodes)
	s.topo, s.rooms, s.tieLevels = nil, nil, nil
	s.run = newRunning(len(s.nodes))
	s.chunks = make([]chunkID, len(s.nodes))
	s.mark = make([]uint64, len(s.nodes))
	s.touched = s.touched[:0]
	targets := s.cfg.Targets
	if len(targets) == 0 {
		targets = targetsOf(snap)
	}
	pol, err := placement.NewPolicy(s.cfg.Policy, placement.PolicyEnv{Targets: targets, Capacity: s.capacity, Seed: s.cfg.Seed})
	if err != nil {
		return fmt.Errorf("syncing snapshot: %w", err)
	}
	if s.placer, err = placement.NewPlacer(s.st, pol); err != nil {
		return fmt.Errorf("syncing snapshot: %w", err)
	}
	s.policy = pol
	return nil
}

func targetsOf(snap *model.Snapshot) []placement.Target {
	var reqs []model.Request
	for i := range snap.Pending {
		for _, p := range snap.Pending[i].Pods {
			// A request with alternatives is targeted as its first.
			reqs = append(reqs, *p.Request.Alt(0))
		}
	}
	for a := range snap.AllRunning() {
		reqs = append(reqs, a.Request)
	}
	if ts, err := placement.TargetsFrom(reqs, 1); err == nil {
		return ts
	}
	return []placement.Target{{Req: model.Request{GPUs: 1}, P: 1}}
}
