package ui

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/gpuplane/gpuplane/api/gpupod"
	"github.com/gpuplane/gpuplane/api/scheduling/v1alpha1"
	"github.com/gpuplane/gpuplane/internal/adapter"
	"github.com/gpuplane/gpuplane/internal/cli/status"
	"github.com/gpuplane/gpuplane/internal/scheduler/model"
)

// State is what the page shows, sent whole on every change. Its field
// names are short: at 5,000 nodes it is the bulk of what the page reads.
type State struct {
	// Seq counts the states built since start; Built is when (Unix ms).
	Seq   int64 `json:"seq"`
	Built int64 `json:"built"`
	// Cluster is the API server's address.
	Cluster string `json:"cluster"`
	// Unreadable names the kinds gpuplane ui may not list.
	Unreadable []string   `json:"unreadable,omitempty"`
	Nodes      []NodeView `json:"nodes"`
	// Totals sum the map: GPUs, held (in thousandths), withdrawn.
	Totals Totals      `json:"totals"`
	Queues []QueueView `json:"queues"`
	// Waiting and Running list at most maxWaiting and maxRunning entries
	// (the first by namespace and name, and those holding the most GPUs);
	// the totals say how many there are.
	WaitingTotal int        `json:"waitingTotal"`
	RunningTotal int        `json:"runningTotal"`
	Waiting      []WaitView `json:"waiting"`
	Running      []RunView  `json:"running"`
	Cost         CostView   `json:"cost"`
	Pools        []string   `json:"pools"`
	Products     []string   `json:"products"`
	Price        float64    `json:"price,omitempty"`
	// CostFromPrometheus says the Cost view asks /api/cost (--prometheus).
	CostFromPrometheus bool     `json:"costFromPrometheus,omitempty"`
	Problems           []string `json:"problems,omitempty"`
}

// Totals sums the GPU map.
type Totals struct {
	Nodes     int   `json:"nodes"`
	GPUs      int   `json:"gpus"`
	HeldMilli int64 `json:"heldMilli"`
	Withdrawn int   `json:"withdrawn"`
}

// NodeView is one node of the GPU map.
type NodeView struct {
	Name    string `json:"n"`
	Pool    string `json:"pool,omitempty"`
	Product string `json:"prod,omitempty"`
	Ready   bool   `json:"ready"`
	// Problem says why the node is unhealthy or left out of scheduling:
	// not ready, cordoned, tainted, quarantined, or what it states that
	// the scheduler refuses.
	Problem string `json:"prob,omitempty"`
	// Labels are the labels that name the node's place (zone, rack,
	// NVLink clique); NVLink its NVLink islands.
	Labels map[string]string `json:"lab,omitempty"`
	NVLink string            `json:"nvl,omitempty"`
	GPUs   []GPUView         `json:"g"`
	// Free describes the free fragments: whole GPUs, parts of GPUs and
	// MIG slices nobody holds on a GPU in service.
	Free string `json:"free"`
	// Queues holding GPUs on the node, for the queue filter.
	Queues []string `json:"q,omitempty"`
}

// GPUView is one GPU: its index, what holds it and what is free.
type GPUView struct {
	Index int `json:"i"`
	// MIG is the GPU's MIG compute slices, 0 when MIG is off.
	MIG int `json:"mig,omitempty"`
	// FreeMilli is the part nobody holds (thousandths), FreeSlices the
	// MIG slices.
	FreeMilli  int64  `json:"fm"`
	FreeSlices int    `json:"fs,omitempty"`
	Withdrawn  string `json:"w,omitempty"`
	Holders    []Held `json:"h,omitempty"`
}

// Held is a pod's part of a GPU.
type Held struct {
	Pod   string `json:"p"`
	Queue string `json:"q,omitempty"`
	// Part is a fraction ("0.50 GPU, 20Gi"), a replica ("replica, 1/4")
	// or a MIG instance ("MIG 3g.40gb"); empty for a whole GPU.
	Part string `json:"part,omitempty"`
}

// QueueView is one Queue: status's row, its place in the tree, and how
// far its usage is over its guarantee (borrowed).
type QueueView struct {
	status.Queue
	Depth int `json:"depth"`
	// UsageGPUs and the rest are the GPU columns as numbers, for the
	// history and the bars.
	UsageGPUs      float64 `json:"usageGPUs"`
	FairShareGPUs  float64 `json:"fairShareGPUs"`
	GuaranteedGPUs float64 `json:"guaranteedGPUs"`
	BorrowedGPUs   float64 `json:"borrowedGPUs"`
}

// WaitView is a waiting entry of `gpuplane status`, with the core's group
// name for the what-if (empty when none can be found).
type WaitView struct {
	status.Gang
	Group string `json:"group,omitempty"`
}

// RunView is a running workload: its group, its placement, age and GPU
// time so far.
type RunView struct {
	Group     string  `json:"group"`
	Namespace string  `json:"namespace"`
	Queue     string  `json:"queue,omitempty"`
	Pods      int     `json:"pods"`
	GPUs      float64 `json:"gpus"`
	Nodes     string  `json:"nodes"`
	AgeSec    int64   `json:"ageSec"`
	GPUHours  float64 `json:"gpuHours"`
	Cost      float64 `json:"cost,omitempty"`
	// EndsInSec is the time left before the pods' activeDeadlineSeconds,
	// -1 when they have none.
	EndsInSec int64 `json:"endsInSec"`
}

// CostView is GPU time by namespace and by queue: from Prometheus as
// `gpuplane cost` computes it when --prometheus is given (fetched apart,
// /api/cost), else here from the running pods since each started.
type CostView struct {
	ByNamespace []CostRow `json:"byNamespace"`
	ByQueue     []CostRow `json:"byQueue"`
}

// CostRow is one row of CostView.
type CostRow struct {
	Name     string  `json:"name"`
	GPUs     float64 `json:"gpus"`
	GPUHours float64 `json:"gpuHours"`
	Cost     float64 `json:"cost,omitempty"`
}

// The most waiting and running entries the page is sent: a table longer
// than this is read through its totals, the map and the filters.
const (
	maxWaiting = 1000
	maxRunning = 500
)

// build turns the core's view and the stores into the page's state.
func (c *cluster) build(v *adapter.View, now time.Time, price float64) *State {
	st := &State{Built: now.UnixMilli(), Nodes: []NodeView{}, Queues: []QueueView{}, Waiting: []WaitView{}, Running: []RunView{},
		Unreadable: c.unreadable, Price: price}
	c.mu.Lock()
	extras := c.nodeExtras
	pods := c.podExtras
	defer c.mu.Unlock()

	pools, products := map[string]bool{}, map[string]bool{}
	snap := &v.Snapshot
	type runAcc struct {
		r *RunView
		// nodes are few per group: a slice, not a map per group.
		nodes   []string
		started int64
		endsAt  time.Time
	}
	runs := map[string]*runAcc{}
	byNS, byQ := map[string]*CostRow{}, map[string]*CostRow{}
	for i := range snap.Nodes {
		n := &snap.Nodes[i]
		var allocs []model.Allocation
		if i < len(snap.RunningByNode) {
			allocs = snap.RunningByNode[i]
		}
		for _, a := range allocs {
			ns, _, _ := strings.Cut(a.Pod, "/")
			g := gpusOf(n, &a)
			acc := runs[a.Group]
			if acc == nil {
				acc = &runAcc{r: &RunView{Group: a.Group, Namespace: ns, Queue: a.Queue, EndsInSec: -1}, started: a.StartedAt}
				runs[a.Group] = acc
			}
			acc.r.Pods++
			acc.r.GPUs += g
			if len(acc.nodes) == 0 || acc.nodes[len(acc.nodes)-1] != n.Name {
				acc.nodes = append(acc.nodes, n.Name)
			}
			started := time.UnixMilli(a.StartedAt)
			if x := pods[a.Pod]; x != nil && !x.started.IsZero() {
				started = x.started
				if x.deadline > 0 {
					if end := started.Add(x.deadline); acc.endsAt.IsZero() || end.After(acc.endsAt) {
						acc.endsAt = end
					}
				}
			}
			acc.started = min(acc.started, started.UnixMilli())
			hours := g * max(0, now.Sub(started).Hours())
			acc.r.GPUHours += hours
			if g > 0 {
				for _, row := range []*CostRow{costRow(byNS, ns), costRow(byQ, a.Queue)} {
					row.GPUs += g
					row.GPUHours += hours
				}
			}
		}
		if len(n.GPUs) == 0 {
			continue
		}
		st.Nodes = append(st.Nodes, nodeView(n, allocs, extras[n.Name]))
	}
	for name, msg := range v.LeftOut {
		nv := NodeView{Name: name, Problem: "left out of scheduling: " + msg, GPUs: []GPUView{}}
		if x := extras[name]; x != nil {
			nv.Ready, nv.Pool, nv.Product, nv.Labels = x.ready, x.pool, x.product, x.labels
		}
		st.Nodes = append(st.Nodes, nv)
	}
	slices.SortFunc(st.Nodes, func(a, b NodeView) int { return cmp.Compare(a.Name, b.Name) })
	for i := range st.Nodes {
		n := &st.Nodes[i]
		st.Totals.Nodes++
		st.Totals.GPUs += len(n.GPUs)
		for _, g := range n.GPUs {
			if g.Withdrawn != "" {
				st.Totals.Withdrawn++
			}
			st.Totals.HeldMilli += model.MilliPerGPU - g.FreeMilli
		}
		pools[n.Pool] = true
		products[n.Product] = true
	}
	st.Pools, st.Products = sortedKeys(pools), sortedKeys(products)

	for _, acc := range runs {
		r := acc.r
		// Nodes come in snapshot order (by name), each group's allocations
		// on one node together.
		names := acc.nodes
		if len(names) > 4 {
			r.Nodes = strings.Join(names[:4], ", ") + fmt.Sprintf(" and %d more", len(names)-4)
		} else {
			r.Nodes = strings.Join(names, ", ")
		}
		r.AgeSec = int64(now.Sub(time.UnixMilli(acc.started)).Seconds())
		if !acc.endsAt.IsZero() {
			r.EndsInSec = max(0, int64(acc.endsAt.Sub(now).Seconds()))
		}
		r.GPUHours = round2(r.GPUHours)
		r.Cost = round2(r.GPUHours * price)
		st.Running = append(st.Running, *r)
	}
	slices.SortFunc(st.Running, func(a, b RunView) int {
		return cmp.Or(cmp.Compare(b.GPUs, a.GPUs), cmp.Compare(b.AgeSec, a.AgeSec), cmp.Compare(a.Group, b.Group))
	})
	st.RunningTotal = len(st.Running)
	st.Running = st.Running[:min(len(st.Running), maxRunning)]
	st.Cost = CostView{ByNamespace: costRows(byNS, price), ByQueue: costRows(byQ, price)}

	st.Queues = c.queueViews()
	st.Waiting = c.waiting(v)
	st.WaitingTotal = len(st.Waiting)
	st.Waiting = st.Waiting[:min(len(st.Waiting), maxWaiting)]
	return st
}

func costRow(m map[string]*CostRow, name string) *CostRow {
	if name == "" {
		name = "(none)"
	}
	r := m[name]
	if r == nil {
		r = &CostRow{Name: name}
		m[name] = r
	}
	return r
}

func costRows(m map[string]*CostRow, price float64) []CostRow {
	out := make([]CostRow, 0, len(m))
	for _, r := range m {
		r.GPUHours = round2(r.GPUHours)
		r.Cost = round2(r.GPUHours * price)
		out = append(out, *r)
	}
	slices.SortFunc(out, func(a, b CostRow) int {
		return cmp.Or(cmp.Compare(b.GPUHours, a.GPUHours), cmp.Compare(a.Name, b.Name))
	})
	return out
}

func round2(x float64) float64 { return math.Round(x*100) / 100 }

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// gpusOf is the physical GPUs allocation a holds on n: whole GPUs count 1,
// shares their part, MIG instances their slices over the GPU's.
func gpusOf(n *model.Node, a *model.Allocation) float64 {
	var sum float64
	for _, s := range a.GPUs {
		if s.Index < 0 || s.Index >= len(n.GPUs) {
			continue
		}
		g := &n.GPUs[s.Index]
		switch {
		case s.MIGSlices > 0 && g.MIGSlices > 0:
			sum += float64(s.MIGSlices) / float64(g.MIGSlices)
		default:
			sum += float64(s.Milli) / float64(g.Capacity())
		}
	}
	return sum
}

func nodeView(n *model.Node, allocs []model.Allocation, x *nodeExtra) NodeView {
	nv := NodeView{Name: n.Name, GPUs: make([]GPUView, len(n.GPUs)), Ready: true}
	var problems []string
	if x != nil {
		nv.Ready, nv.Pool, nv.Product, nv.Labels, nv.NVLink = x.ready, x.pool, x.product, x.labels, x.nvlink
		if !x.ready {
			problems = append(problems, "not ready")
		}
		if x.quarantine != "" {
			problems = append(problems, "quarantine: "+x.quarantine)
		}
	}
	if n.Unschedulable {
		problems = append(problems, "cordoned")
	}
	for _, t := range n.Taints {
		if t.Effect == string(corev1.TaintEffectNoSchedule) || t.Effect == string(corev1.TaintEffectNoExecute) {
			problems = append(problems, "taint "+t.Key+"="+t.Value+":"+t.Effect)
		}
	}
	nv.Problem = strings.Join(problems, "; ")
	if nv.Product == "" && len(n.GPUs) > 0 {
		nv.Product = n.GPUs[0].Model
	}
	for i, g := range n.GPUs {
		gv := GPUView{Index: g.Index, MIG: g.MIGSlices, FreeMilli: g.Capacity(), FreeSlices: g.MIGSlices}
		if g.Withdrawn {
			gv.Withdrawn = "withdrawn"
			if x != nil && x.quarantined[g.Index] != "" {
				gv.Withdrawn = "quarantined: " + x.quarantined[g.Index]
			}
		}
		nv.GPUs[i] = gv
	}
	queues := map[string]bool{}
	for _, a := range allocs {
		for _, s := range a.GPUs {
			if s.Index < 0 || s.Index >= len(nv.GPUs) {
				continue
			}
			gv := &nv.GPUs[s.Index]
			g := &n.GPUs[s.Index]
			gv.FreeMilli -= s.Milli
			gv.FreeSlices -= s.MIGSlices
			gv.Holders = append(gv.Holders, Held{Pod: a.Pod, Queue: a.Queue, Part: partOf(g, &a.Request, s)})
			if a.Queue != "" {
				queues[a.Queue] = true
			}
		}
	}
	nv.Queues = sortedKeys(queues)
	// Shares may be counted in replicas above the GPU's milli; what is
	// left is never below nothing.
	var whole, slices int
	var parts []string
	for i := range nv.GPUs {
		gv := &nv.GPUs[i]
		gv.FreeMilli = max(0, gv.FreeMilli)
		gv.FreeSlices = max(0, gv.FreeSlices)
		if gv.Withdrawn != "" {
			continue
		}
		switch {
		case gv.MIG > 0:
			slices += gv.FreeSlices
		case gv.FreeMilli >= n.GPUs[i].Capacity():
			whole++
		case gv.FreeMilli > 0:
			parts = append(parts, strconv.FormatFloat(float64(gv.FreeMilli)/float64(n.GPUs[i].Capacity()), 'f', 2, 64))
		}
	}
	var free []string
	if whole > 0 {
		free = append(free, fmt.Sprintf("%d whole", whole))
	}
	if len(parts) > 0 {
		free = append(free, "parts "+strings.Join(parts, "+"))
	}
	if slices > 0 {
		free = append(free, fmt.Sprintf("%d MIG slices", slices))
	}
	nv.Free = strings.Join(free, ", ")
	if nv.Free == "" {
		nv.Free = "none"
	}
	return nv
}

// partOf says what part of GPU g a share s of request r is.
func partOf(g *model.GPU, r *model.Request, s model.GPUShare) string {
	switch {
	case s.MIGSlices > 0:
		if r.MIGProfile != "" {
			return "MIG " + r.MIGProfile
		}
		return fmt.Sprintf("MIG %d slices", s.MIGSlices)
	case r.Replicas > 0 && g.MinShareMilli > 0 && g.MinShareMilli < g.Capacity():
		return fmt.Sprintf("replica, 1/%d", g.Capacity()/g.MinShareMilli)
	case s.Milli >= g.Capacity():
		return ""
	}
	part := strconv.FormatFloat(float64(s.Milli)/float64(g.Capacity()), 'f', 2, 64) + " GPU"
	if s.MemoryMiB > 0 {
		part += ", " + resource.NewQuantity(s.MemoryMiB<<20, resource.BinarySI).String()
	}
	return part
}

// queueViews lists the Queues as `gpuplane status` shows them, in tree
// order (each parent before its children, siblings by name).
func (c *cluster) queueViews() []QueueView {
	children := map[string][]*v1alpha1.Queue{}
	known := map[string]bool{}
	for _, o := range c.queues.List() {
		q, ok := o.(*v1alpha1.Queue)
		if !ok {
			continue
		}
		known[q.Name] = true
		children[q.Spec.Parent] = append(children[q.Spec.Parent], q)
	}
	out := []QueueView{}
	var walk func(parent string, depth int)
	walk = func(parent string, depth int) {
		kids := children[parent]
		slices.SortFunc(kids, func(a, b *v1alpha1.Queue) int { return cmp.Compare(a.Name, b.Name) })
		for _, q := range kids {
			row := status.QueueOf(q)
			qv := QueueView{Queue: row, Depth: depth, UsageGPUs: quantity(row.Usage), FairShareGPUs: quantity(row.FairShare), GuaranteedGPUs: quantity(row.Guaranteed)}
			qv.BorrowedGPUs = max(0, qv.UsageGPUs-qv.GuaranteedGPUs)
			out = append(out, qv)
			if depth < 32 {
				walk(q.Name, depth+1)
			}
		}
	}
	walk("", 0)
	// Queues whose parent does not exist hang off the root, marked.
	for parent, kids := range children {
		if parent == "" || known[parent] {
			continue
		}
		for _, q := range kids {
			row := status.QueueOf(q)
			if row.Problem == "" {
				row.Problem = "parent " + parent + " does not exist"
			}
			out = append(out, QueueView{Queue: row, UsageGPUs: quantity(row.Usage), FairShareGPUs: quantity(row.FairShare), GuaranteedGPUs: quantity(row.Guaranteed)})
		}
	}
	return out
}

func quantity(s string) float64 {
	if s == "" {
		return 0
	}
	q, err := resource.ParseQuantity(s)
	if err != nil {
		return 0
	}
	return q.AsApproximateFloat64()
}

// waiting lists what waits, as `gpuplane status` does, each with the
// core's group to ask the what-if about, and the pods the adapter holds
// back from the core with its reason.
func (c *cluster) waiting(v *adapter.View) []WaitView {
	out := []WaitView{}
	for _, o := range c.groups.List() {
		g, ok := o.(*v1alpha1.PodGroup)
		if !ok {
			continue
		}
		if gang, waits := status.PodGroupWaiting(g); waits {
			out = append(out, WaitView{Gang: gang, Group: "pg/" + g.Namespace + "/" + g.Name})
		}
	}
	var pods []*corev1.Pod
	firstByOwner := map[string]string{}
	for _, o := range c.pods.List() {
		p, ok := o.(*corev1.Pod)
		if !ok {
			continue
		}
		pods = append(pods, p)
		if p.Spec.NodeName == "" {
			k := p.Namespace + "/" + ownerOf(p)
			if cur, ok := firstByOwner[k]; !ok || p.Name < cur {
				firstByOwner[k] = p.Name
			}
		}
	}
	for _, g := range status.WaitingPods(pods, c.schedulerName) {
		wv := WaitView{Gang: g}
		if first, ok := firstByOwner[g.Namespace+"/"+g.Name]; ok {
			wv.Group = gpupod.LonePodGroupPrefix + g.Namespace + "/" + first
		}
		out = append(out, wv)
	}
	// Pods the scheduler holds back from the core: a gang's reason goes
	// on its PodGroup's row (when the scheduler wrote none), a lone pod's
	// on its own.
	for key, why := range v.Held {
		ns, name, _ := strings.Cut(key, "/")
		why = "held back by the scheduler: " + why
		group := ""
		if o, ok, _ := c.pods.GetByKey(key); ok {
			if p, ok := o.(*corev1.Pod); ok {
				if g, err := v1alpha1.PodGroupName(p.Labels, p.Annotations); err == nil {
					group = g.Value
				}
			}
		}
		found := false
		for i := range out {
			w := &out[i]
			switch {
			case group != "" && w.Kind == status.KindPodGroup && w.Namespace == ns && w.Name == group:
				if w.Why == "" {
					w.Why = why
				}
				found = true
			case group == "" && w.Kind == status.KindPods && w.Group == gpupod.LonePodGroupPrefix+key:
				w.Why = why
				found = true
			}
		}
		if !found {
			out = append(out, WaitView{Gang: status.Gang{Kind: status.KindPods, Namespace: ns, Name: name, Phase: string(corev1.PodPending), MinMember: 1, Count: 1, Why: why},
				Group: gpupod.LonePodGroupPrefix + key})
		}
	}
	slices.SortFunc(out, func(a, b WaitView) int {
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name), cmp.Compare(a.Why, b.Why))
	})
	return out
}

// ownerOf names a pod's controller as `gpuplane status` does (kind/name),
// or the pod itself.
func ownerOf(p *corev1.Pod) string {
	for _, r := range p.OwnerReferences {
		if r.Controller != nil && *r.Controller {
			return strings.ToLower(r.Kind) + "/" + r.Name
		}
	}
	return p.Name
}
