package simulator

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"github.com/gpuplane/gpuplane/internal/scheduler/model"
	"github.com/gpuplane/gpuplane/internal/scheduler/placement"
)

// TopologyPolicy says who places gangs by the network in an event run.
type TopologyPolicy string

// Topology policies.
const (
	// TopologyAware hands the core each gang's GangTopology: gpuplane's
	// own placement by the network.
	TopologyAware TopologyPolicy = "aware"
	// TopologyBlind strips every gang's topology: the same core placing
	// by packing alone, the baseline for GPU allocation.
	TopologyBlind TopologyPolicy = "blind"
	// TopologyKueueTAS is a baseline outside the core that follows
	// Kueue's published Topology Aware Scheduling (KEP-2724, the BestFit
	// profile): before each cycle it admits gangs in Kueue's order,
	// assigns each pod a node as Kueue's TopologyAssignment does, and the
	// core then places every pod on its assigned node, as kube-scheduler
	// does once Kueue ungates the pods with a node selector.
	TopologyKueueTAS TopologyPolicy = "kueue-tas"
)

// TopologyPolicyNames lists the topology policies.
func TopologyPolicyNames() []string {
	return []string{string(TopologyAware), string(TopologyBlind), string(TopologyKueueTAS)}
}

// ParseTopologyPolicies parses a comma-separated list of topology
// policies.
func ParseTopologyPolicies(s string) ([]TopologyPolicy, error) {
	var out []TopologyPolicy
	for part := range strings.SplitSeq(s, ",") {
		p := TopologyPolicy(strings.TrimSpace(part))
		if p == "" {
			continue
		}
		if !slices.Contains(TopologyPolicyNames(), string(p)) {
			return nil, fmt.Errorf("%q: want one of %s", p, strings.Join(TopologyPolicyNames(), ", "))
		}
		if !slices.Contains(out, p) {
			out = append(out, p)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%q: no topology policy", s)
	}
	return out, nil
}

// nodeFree is what a node has left: CPU, memory, and per GPU the milli-GPU
// no pod holds.
type nodeFree struct {
	cpu, mem int64
	gpuMilli []int64
}

// freeOf is what every node of snap has left after its running pods.
func freeOf(snap *model.Snapshot) []nodeFree {
	free := make([]nodeFree, len(snap.Nodes))
	for i := range snap.Nodes {
		n := &snap.Nodes[i]
		f := nodeFree{cpu: n.MilliCPU, mem: n.MemoryMiB, gpuMilli: make([]int64, len(n.GPUs))}
		for g := range n.GPUs {
			f.gpuMilli[g] = n.GPUs[g].Capacity()
		}
		if i < len(snap.RunningByNode) {
			for _, a := range snap.RunningByNode[i] {
				f.cpu -= a.Request.MilliCPU
				f.mem -= a.Request.MemoryMiB
				for _, sh := range a.GPUs {
					if sh.Index >= 0 && sh.Index < len(f.gpuMilli) {
						f.gpuMilli[sh.Index] -= sh.Milli
					}
				}
			}
		}
		free[i] = f
	}
	return free
}

// podsFit is how many pods of req fit in what node n has left, counted as
// Kueue counts a node's free capacity in pods: each resource's free amount
// over the pod's request, the least of them. A whole GPU counts only when
// no pod holds any of it (nvidia.com/gpu is an integer resource); a share
// counts in milli-GPU. Nodes the pod may not use (cordoned, another GPU
// model, a node selector it fails, a taint it does not tolerate) fit none.
func podsFit(n *model.Node, f *nodeFree, req *model.Request) int {
	if !placement.StaticFits(n, req) {
		return 0
	}
	const many = 1 << 30
	fit := many
	if req.MilliCPU > 0 {
		fit = min(fit, int(max(f.cpu, 0)/req.MilliCPU))
	}
	if req.MemoryMiB > 0 {
		fit = min(fit, int(max(f.mem, 0)/req.MemoryMiB))
	}
	if req.GPUs > 0 || req.GPUMilli > 0 {
		whole, share := 0, 0
		for g := range n.GPUs {
			if !placement.ModelAllowed(req, &n.GPUs[g]) {
				continue
			}
			if f.gpuMilli[g] == n.GPUs[g].Capacity() && f.gpuMilli[g] > 0 {
				whole++
			}
			if req.GPUMilli > 0 {
				share += int(max(f.gpuMilli[g], 0) / req.GPUMilli)
			}
		}
		if req.GPUs > 0 {
			fit = min(fit, whole/req.GPUs)
		} else {
			fit = min(fit, share)
		}
	}
	if fit == many {
		// A pod that asks for nothing Kueue counts: one per node, as a
		// node's pods limit would allow at least.
		fit = 1
	}
	return fit
}

// take subtracts k pods of req from what node n has left: their CPU and
// memory, and for each pod its whole GPUs or its share, lowest index
// first.
func (f *nodeFree) take(n *model.Node, req *model.Request, k int) {
	f.cpu -= int64(k) * req.MilliCPU
	f.mem -= int64(k) * req.MemoryMiB
	for ; k > 0; k-- {
		need := req.GPUs
		for g := range n.GPUs {
			if !placement.ModelAllowed(req, &n.GPUs[g]) {
				continue
			}
			if need > 0 && f.gpuMilli[g] == n.GPUs[g].Capacity() {
				f.gpuMilli[g] = 0
				if need--; need == 0 {
					break
				}
			}
			if req.GPUs == 0 && req.GPUMilli > 0 && f.gpuMilli[g] >= req.GPUMilli {
				f.gpuMilli[g] -= req.GPUMilli
				break
			}
		}
	}
}

// gangShape is one pod's request that covers every pod of g: the largest
// of each quantity, Kueue's view of a PodSet (one template for all).
func gangShape(g *model.PodGroup) model.Request {
	r := g.Pods[0].Request
	for _, p := range g.Pods[1:] {
		q := &p.Request
		r.MilliCPU, r.MemoryMiB = max(r.MilliCPU, q.MilliCPU), max(r.MemoryMiB, q.MemoryMiB)
		r.GPUs, r.GPUMilli = max(r.GPUs, q.GPUs), max(r.GPUMilli, q.GPUMilli)
	}
	if r.GPUs > 0 {
		r.GPUMilli = 0
	}
	return r
}

// tasDomain is one domain of a level: its id (the values of every level
// down to it), the nodes under it and how many pods fit in them.
type tasDomain struct {
	id    string
	nodes []int
	count int
}

// domainsAt groups the nodes by their values of levels[:depth+1]; a node
// lacking any of them is in no domain, as Kueue leaves such nodes out.
func domainsAt(nodes []model.Node, levels []string, depth int, counts []int, within []int) []tasDomain {
	byID := map[string]int{}
	var out []tasDomain
	var b strings.Builder
	for _, i := range within {
		b.Reset()
		ok := true
		for _, l := range levels[:depth+1] {
			v := domainOf(&nodes[i], l)
			if v == "" {
				ok = false
				break
			}
			b.WriteString(v)
			b.WriteByte(0)
		}
		if !ok {
			continue
		}
		id := b.String()
		k, seen := byID[id]
		if !seen {
			k = len(out)
			byID[id] = k
			out = append(out, tasDomain{id: id})
		}
		out[k].nodes = append(out[k].nodes, i)
		out[k].count += counts[i]
	}
	return out
}

// sortDomains orders domains as Kueue does before choosing: the most free
// pods first, then by id.
func sortDomains(ds []tasDomain) {
	slices.SortFunc(ds, func(a, b tasDomain) int { return cmp.Or(cmp.Compare(b.count, a.count), cmp.Compare(a.id, b.id)) })
}

// bestFitCover picks from sorted domains (most free first) the fewest that
// hold n pods: greedily the largest, the last one swapped for the smallest
// domain that still holds what remains (Kueue's BestFit). nil when all of
// them together cannot.
func bestFitCover(sorted []tasDomain, n int) []tasDomain {
	var out []tasDomain
	left := n
	for k := 0; k < len(sorted) && left > 0; k++ {
		if sorted[k].count >= left {
			// The last domain: the smallest of the rest that holds what
			// remains (the rest are sorted, so scan from the end).
			best := k
			for j := len(sorted) - 1; j > k; j-- {
				if sorted[j].count >= left {
					best = j
					break
				}
			}
			return append(out, sorted[best])
		}
		if sorted[k].count == 0 {
			break
		}
		out = append(out, sorted[k])
		left -= sorted[k].count
	}
	return nil
}

// kueueAssign assigns n pods to nodes as Kueue's TAS does with the BestFit
// profile, counts[i] being how many fit on node i: it looks for one domain
// of the preferred level (else the required one) that holds all n, the
// fitting domain with the fewest free pods; with no such domain a
// preferred placement tries the next wider level, up to the required
// level or the widest, where it may take several domains, the fewest that
// hold n. Then, level by level down to the nodes, it takes the fewest
// children of the chosen domains that hold n (bestFitCover).
//
// With a slice level (t.SliceRequired, t.SliceSize pods a slice), it
// counts as Kueue's two-level TAS does: down to the
// slice level a domain holds as many slices as its slice-level domains
// hold whole ones (each one's free pods over the slice size, rounded
// down), and the gang needs n / SliceSize of them, rounded up; each chosen slice-level
// domain then takes its slices' pods down to the nodes on its own, so that
// every slice of consecutive pods sits inside one.
//
// The result is the node of each pod, nil when the gang does not fit.
func kueueAssign(t *model.GangTopology, nodes []model.Node, counts []int, n int) []int {
	levels := t.Levels
	if levels[len(levels)-1] != hostnameLabel {
		levels = append(slices.Clip(levels), hostnameLabel)
	}
	start := t.Level(t.Preferred)
	if start < 0 {
		start = t.Level(t.Required)
	}
	ceiling := max(t.Level(t.Required), 0)
	sliceLevel, size := -1, 1
	if t.SliceRequired != "" && t.SliceSize > 0 {
		sliceLevel, size = t.Level(t.SliceRequired), t.SliceSize
	}
	all := make([]int, len(nodes))
	for i := range all {
		all[i] = i
	}
	// The slices each node's slice-level domain holds, and which domain
	// that is, so that a wider domain's slices are its slice-level
	// domains' summed.
	var sliceDom []int
	var sliceCap []int
	if sliceLevel >= 0 {
		sliceDom = make([]int, len(nodes))
		for i := range sliceDom {
			sliceDom[i] = -1
		}
		for k, d := range domainsAt(nodes, levels, sliceLevel, counts, all) {
			for _, i := range d.nodes {
				sliceDom[i] = k
			}
			sliceCap = append(sliceCap, d.count/size)
		}
	}
	// units counts what a domain of level holds in the units the gang is
	// counted in there: slices down to the slice level, pods below it.
	units := func(level int, ds []tasDomain) []tasDomain {
		if sliceLevel < 0 || level > sliceLevel {
			return ds
		}
		for k := range ds {
			seen := map[int]bool{}
			ds[k].count = 0
			for _, i := range ds[k].nodes {
				if sd := sliceDom[i]; sd >= 0 && !seen[sd] {
					seen[sd] = true
					ds[k].count += sliceCap[sd]
				}
			}
		}
		return ds
	}
	need := n
	if sliceLevel >= 0 {
		// A gang partly running already has some of its pods placed: the
		// last of its slices left may be short.
		need = (n + size - 1) / size
	}
	var chosen []tasDomain
	level := start
	for {
		ds := units(level, domainsAt(nodes, levels, level, counts, all))
		var fit []tasDomain
		for _, d := range ds {
			if d.count >= need {
				fit = append(fit, d)
			}
		}
		if len(fit) > 0 {
			// BestFit: the fitting domain with the fewest free pods.
			chosen = []tasDomain{slices.MinFunc(fit, func(a, b tasDomain) int { return cmp.Or(cmp.Compare(a.count, b.count), cmp.Compare(a.id, b.id)) })}
			break
		}
		if level > ceiling {
			level--
			continue
		}
		if t.Required != "" {
			return nil
		}
		sortDomains(ds)
		if chosen = bestFitCover(ds, need); chosen == nil {
			return nil
		}
		break
	}
	// Down to the slice level (the nodes without slices), over the chosen
	// domains together.
	last := len(levels) - 1
	if sliceLevel >= 0 {
		last = sliceLevel
	}
	for level < last {
		var within []int
		for _, d := range chosen {
			within = append(within, d.nodes...)
		}
		level++
		ds := units(level, domainsAt(nodes, levels, level, counts, within))
		sortDomains(ds)
		if chosen = bestFitCover(ds, need); chosen == nil {
			return nil
		}
	}
	if sliceLevel < 0 {
		return fill(chosen, counts, n)
	}
	// Each slice-level domain takes its whole slices, the last what
	// remains, and places their pods within itself.
	out := make([]int, 0, n)
	left := need
	for _, d := range chosen {
		take := min(d.count, left)
		left -= take
		pods := kueueDescend(nodes, levels, counts, d.nodes, sliceLevel, min(take*size, n-len(out)))
		if pods == nil {
			return nil
		}
		out = append(out, pods...)
	}
	if left > 0 {
		return nil
	}
	return out
}

// kueueDescend assigns n pods to the nodes within, a domain of level
// from: level by level down to the nodes, the fewest children that hold
// them (bestFitCover).
func kueueDescend(nodes []model.Node, levels []string, counts []int, within []int, from, n int) []int {
	chosen := []tasDomain{{nodes: within}}
	for level := from; level < len(levels)-1; {
		var in []int
		for _, d := range chosen {
			in = append(in, d.nodes...)
		}
		level++
		ds := domainsAt(nodes, levels, level, counts, in)
		sortDomains(ds)
		if chosen = bestFitCover(ds, n); chosen == nil {
			return nil
		}
	}
	return fill(chosen, counts, n)
}

// fill takes n pods from the nodes of the chosen domains in order, as
// many on each as fit; nil when they hold fewer.
func fill(chosen []tasDomain, counts []int, n int) []int {
	out := make([]int, 0, n)
	for _, d := range chosen {
		for _, i := range d.nodes {
			for k := 0; k < counts[i] && len(out) < n; k++ {
				out = append(out, i)
			}
		}
	}
	if len(out) < n {
		return nil
	}
	return out
}

// kueueTAS is the Kueue-style baseline's admission: the simulator's,
// outside the core, labelled as such in every report.
type kueueTAS struct {
	// topo is each group's topology as the trace states it, and orig each
	// pod's request before a node was assigned to it.
	topo map[string]*model.GangTopology
	orig map[string]model.Request
}

// admit runs before a cycle: every pending group with a topology is
// admitted in Kueue's order (priority, then creation) on the capacity the
// groups admitted before it leave, and its pods are pinned to their
// assigned nodes (a node selector on kubernetes.io/hostname, which the
// snapshot's nodes carry as a label in this mode); the groups that do not
// fit are taken out of snap.Pending and returned, to wait.
func (k *kueueTAS) admit(snap *model.Snapshot) []model.PodGroup {
	free := freeOf(snap)
	// A new Pending, and new pods for every group it pins: the last
	// snapshot's keep their own.
	pending := make([]model.PodGroup, 0, len(snap.Pending))
	var order []int
	for i := range snap.Pending {
		g := snap.Pending[i]
		if k.topo[g.Name] != nil {
			g.Pods = slices.Clone(g.Pods)
			for j := range g.Pods {
				g.Pods[j].Request = k.orig[g.Pods[j].Name]
			}
			order = append(order, len(pending))
		}
		pending = append(pending, g)
	}
	slices.SortStableFunc(order, func(a, b int) int {
		ga, gb := &pending[a], &pending[b]
		return cmp.Or(cmp.Compare(gb.Priority, ga.Priority), cmp.Compare(ga.CreatedAt, gb.CreatedAt))
	})
	held := map[int]bool{}
	counts := make([]int, len(snap.Nodes))
	for _, gi := range order {
		g := &pending[gi]
		req := gangShape(g)
		for i := range snap.Nodes {
			counts[i] = podsFit(&snap.Nodes[i], &free[i], &req)
		}
		at := kueueAssign(k.topo[g.Name], snap.Nodes, counts, len(g.Pods))
		if at == nil {
			held[gi] = true
			continue
		}
		order := sliceOrder(g)
		for x, i := range at {
			free[i].take(&snap.Nodes[i], &req, 1)
			r := &g.Pods[order[x]].Request
			sel := make(map[string]string, len(r.NodeSelector)+1)
			for key, v := range r.NodeSelector {
				sel[key] = v
			}
			sel[hostnameLabel] = snap.Nodes[i].Name
			r.NodeSelector = sel
		}
	}
	var out []model.PodGroup
	keep := pending[:0]
	for i := range pending {
		if held[i] {
			out = append(out, pending[i])
		} else {
			keep = append(keep, pending[i])
		}
	}
	snap.Pending = keep
	return out
}

// kueueTopology is a gang's topology as the Kueue-style baseline counts
// it, slices being Kueue's podset-slice-size pods each: a slice size must
// divide the gang (Kueue's validation), and slices by sub-group (slice
// size 0, the pods' Slice) must all be of one size, which becomes the
// slice size, as Kueue defaults a JobSet's slice to one Job's pods. slices
// are the gang's pods' Slice values.
func kueueTopology(t *model.GangTopology, slices []string) (*model.GangTopology, error) {
	if t.SliceRequired == "" {
		return t, nil
	}
	n := len(slices)
	if t.SliceSize > 0 {
		if n%t.SliceSize != 0 {
			return nil, fmt.Errorf("the kueue-tas baseline places whole slices, as Kueue does: %d pods are not a whole number of slices of %d", n, t.SliceSize)
		}
		return t, nil
	}
	size := map[string]int{}
	for _, s := range slices {
		size[s]++
	}
	per := 0
	for s, k := range size {
		switch {
		case per == 0:
			per = k
		case k != per:
			return nil, fmt.Errorf("the kueue-tas baseline places slices of one size, as Kueue's podset-slice-size says: sub-group %q has %d pods, another %d", s, k, per)
		}
	}
	c := *t
	c.SliceSize = per
	return &c, nil
}

// sliceOrder lists the indices of g's pods with each slice's together:
// in pod order for slices by size, each sub-group's pods in the order its
// first pod comes for slices by sub-group. kueueAssign's pods are placed
// in this order.
func sliceOrder(g *model.PodGroup) []int {
	out := make([]int, len(g.Pods))
	for i := range out {
		out[i] = i
	}
	first := map[string]int{}
	for i, p := range g.Pods {
		if _, ok := first[p.Slice]; !ok {
			first[p.Slice] = i
		}
	}
	slices.SortStableFunc(out, func(a, b int) int { return cmp.Compare(first[g.Pods[a].Slice], first[g.Pods[b].Slice]) })
	return out
}
