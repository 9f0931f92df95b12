package scheduler_test

import (
	"fmt"
	"reflect"
	"slices"
	"testing"

	"pgregory.net/rapid"

	"github.com/gpuplane/gpuplane/internal/scheduler"
	"github.com/gpuplane/gpuplane/internal/scheduler/model"
	"github.com/gpuplane/gpuplane/internal/scheduler/placement"
	"github.com/gpuplane/gpuplane/internal/scheduler/schedtest"
)

// chunkDriver plays a cluster that hands the core its running pods node
// by node (model.Snapshot.RunningByNode), as the Kubernetes adapter does:
// a node whose pods changed gets a new slice, every other node keeps the
// slice it had.
type chunkDriver struct {
	t      *rapid.T
	snap   model.Snapshot
	chunks [][]model.Allocation
	next   int
	queues []string
}

// set replaces node n's chunk with a new slice.
func (d *chunkDriver) set(n int, chunk []model.Allocation) {
	d.chunks[n] = slices.Clip(chunk)
}

// without returns node n's chunk less its k-th pod, in a new slice.
func (d *chunkDriver) without(n, k int) []model.Allocation {
	c := d.chunks[n]
	return append(slices.Clone(c[:k]), c[k+1:]...)
}

// free returns what node n has left by its chunk: milli-CPU and, per GPU,
// milli-GPU and MIG slices.
func (d *chunkDriver) free(n int) (cpu int64, milli []int64, migSlices []int) {
	node := &d.snap.Nodes[n]
	cpu = node.MilliCPU
	milli, migSlices = make([]int64, len(node.GPUs)), make([]int, len(node.GPUs))
	for g := range node.GPUs {
		milli[g], migSlices[g] = node.GPUs[g].Capacity(), node.GPUs[g].MIGSlices
	}
	for _, a := range d.chunks[n] {
		cpu -= a.Request.MilliCPU
		for _, sh := range a.GPUs {
			milli[sh.Index] -= sh.Milli
			migSlices[sh.Index] -= sh.MIGSlices
		}
	}
	return cpu, milli, migSlices
}

// fits reports whether node n has room left for req on shares.
func (d *chunkDriver) fits(n int, req *model.Request, shares []model.GPUShare) bool {
	cpu, milli, migSlices := d.free(n)
	if req.MilliCPU > cpu {
		return false
	}
	for _, sh := range shares {
		if sh.Milli > milli[sh.Index] || sh.MIGSlices > migSlices[sh.Index] {
			return false
		}
	}
	return true
}

// arrive starts pod (a new name, or one that just left another node) on a
// random node where a random request of it fits, if one does.
func (d *chunkDriver) arrive(pod string) {
	t := d.t
	n := rapid.IntRange(0, len(d.chunks)-1).Draw(t, "node")
	cpu, milli, _ := d.free(n)
	want := rapid.Int64Range(1, 8).Draw(t, "cpu") * 500
	if want > cpu {
		return
	}
	a := model.Allocation{Pod: pod, Group: rapid.SampledFrom([]string{"", "x", "y", pod}).Draw(t, "group"),
		Queue: rapid.SampledFrom(d.queues).Draw(t, "queue"), Priority: int32(rapid.IntRange(0, 3).Draw(t, "prio")),
		Node: d.snap.Nodes[n].Name, Request: model.Request{MilliCPU: want}, StartedAt: int64(rapid.IntRange(0, 50).Draw(t, "started")),
		NonPreemptible: rapid.IntRange(0, 4).Draw(t, "nonPreemptible") == 0}
	if g := rapid.IntRange(-1, len(milli)-1).Draw(t, "gpu"); g >= 0 && d.snap.Nodes[n].GPUs[g].MIGSlices == 0 && milli[g] > 0 {
		share := min(milli[g], rapid.Int64Range(1, 10).Draw(t, "milli")*100)
		a.Request.GPUMilli = share
		if share == model.MilliPerGPU {
			a.Request = model.Request{MilliCPU: want, GPUs: 1}
		}
		a.GPUs = []model.GPUShare{{Index: g, Milli: share}}
	}
	d.set(n, append(slices.Clone(d.chunks[n]), a))
}

// churn changes random nodes' pods behind the scheduler's back: pods end,
// move to another node, change in place or arrive.
func (d *chunkDriver) churn() {
	t := d.t
	for range rapid.IntRange(0, 4).Draw(t, "changes") {
		n := rapid.IntRange(0, len(d.chunks)-1).Draw(t, "at")
		switch op := rapid.IntRange(0, 3).Draw(t, "op"); {
		case op == 3 || len(d.chunks[n]) == 0:
			d.next++
			d.arrive(fmt.Sprintf("d%d", d.next))
		case op == 0:
			d.set(n, d.without(n, rapid.IntRange(0, len(d.chunks[n])-1).Draw(t, "end")))
		case op == 1:
			k := rapid.IntRange(0, len(d.chunks[n])-1).Draw(t, "move")
			pod := d.chunks[n][k].Pod
			d.set(n, d.without(n, k))
			d.arrive(pod)
		default:
			c := slices.Clone(d.chunks[n])
			k := rapid.IntRange(0, len(c)-1).Draw(t, "edit")
			c[k].Priority = int32(rapid.IntRange(0, 3).Draw(t, "newPrio"))
			c[k].Queue = rapid.SampledFrom(d.queues).Draw(t, "newQueue")
			d.set(n, c)
		}
	}
}

// execute carries out each of dec's evictions and binds, or not, as drawn:
// all, none or some of them; a bind only where it fits beside what runs
// (a bind whose evictions were not carried out may not). A victim left
// running may show as being deleted (Request.Terminating).
func (d *chunkDriver) execute(dec model.Decisions) {
	t := d.t
	mode := rapid.SampledFrom([]string{"all", "none", "some"}).Draw(t, "execute")
	do := func() bool {
		return mode == "all" || (mode == "some" && rapid.Bool().Draw(t, "do"))
	}
	index := map[string]int{}
	for i := range d.snap.Nodes {
		index[d.snap.Nodes[i].Name] = i
	}
	var back []model.PodGroup
	for _, e := range dec.Evictions {
		n := index[e.Node]
		k := slices.IndexFunc(d.chunks[n], func(a model.Allocation) bool { return a.Pod == e.Pod })
		if !do() {
			// Not gone yet: the pod may show as being deleted, holding
			// its room until it exits.
			if k >= 0 && rapid.Bool().Draw(t, "terminating") {
				c := slices.Clone(d.chunks[n])
				c[k].Request.Terminating, c[k].NonPreemptible = true, true
				d.set(n, c)
			}
			continue
		}
		a := d.chunks[n][k]
		d.set(n, d.without(n, k))
		back = append(back, model.PodGroup{Name: "back-" + a.Pod, Queue: a.Queue, Priority: a.Priority, CreatedAt: a.StartedAt,
			Pods: []model.Pod{{Name: a.Pod, Request: a.Request}}})
	}
	pods := map[string]*model.PodGroup{}
	for i := range d.snap.Pending {
		for _, p := range d.snap.Pending[i].Pods {
			pods[p.Name] = &d.snap.Pending[i]
		}
	}
	started := map[string]bool{}
	for _, b := range dec.Binds {
		if !do() {
			continue
		}
		g := pods[b.Pod]
		k := slices.IndexFunc(g.Pods, func(p model.Pod) bool { return p.Name == b.Pod })
		if !d.fits(b.NodeIndex, &g.Pods[k].Request, b.GPUs) {
			continue
		}
		started[b.Pod] = true
		d.set(b.NodeIndex, append(slices.Clone(d.chunks[b.NodeIndex]), model.Allocation{Pod: b.Pod, Group: g.Name, Queue: g.Queue,
			Priority: g.Priority, Node: b.Node, Request: g.Pods[k].Request, GPUs: b.GPUs, StartedAt: int64(d.next), NonPreemptible: g.NonPreemptible}))
	}
	var pending []model.PodGroup
	for _, g := range d.snap.Pending {
		rest := g
		rest.Pods = slices.DeleteFunc(slices.Clone(g.Pods), func(p model.Pod) bool { return started[p.Name] })
		if len(rest.Pods) > 0 {
			pending = append(pending, rest)
		}
	}
	d.snap.Pending = append(pending, back...)
}

// sameFreeState fails t unless a and b have every node equally free.
func sameFreeState(t *rapid.T, a, b *placement.State) {
	for i := range a.Nodes {
		x, y := &a.Nodes[i], &b.Nodes[i]
		if x.FreeCPU != y.FreeCPU || x.FreeMem != y.FreeMem || !slices.Equal(x.GPUFree, y.GPUFree) || !slices.Equal(x.GPUMem, y.GPUMem) ||
			!slices.Equal(x.SliceFree, y.SliceFree) || x.Pods != y.Pods || !reflect.DeepEqual(x.ShareSizes, y.ShareSizes) {
			t.Fatalf("node %s: incremental state %+v, fresh %+v", x.Node.Name, *x, *y)
		}
	}
}

// TestPropertyIncrementalMatchesFresh drives one scheduler through
// snapshots in per-node chunks while pods come, go, move and change on
// random nodes and the driver carries out all, some or none of each
// cycle's decisions; after every cycle the scheduler must hold the free
// state, and have decided, exactly what a new scheduler given the same
// snapshot does.
func TestPropertyIncrementalMatchesFresh(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		first, later := genWorkload(t)
		cfg := scheduler.Config{Policy: rapid.SampledFrom([]string{placement.DefaultPolicy, "fgd", "bestfit"}).Draw(t, "policy"),
			Targets: []placement.Target{{Req: schedtest.GPU(1, 1000), P: 0.5}, {Req: schedtest.Share(500, 1000), P: 0.5}}}
		s, err := scheduler.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		d := &chunkDriver{t: t, snap: first, chunks: make([][]model.Allocation, len(first.Nodes)), queues: []string{"a", "b", "c", "", "org", "unknown"}}
		for cycle := range rapid.IntRange(1, 10).Draw(t, "cycles") {
			if cycle > 0 {
				d.churn()
			}
			if cycle == 2 {
				d.snap.Pending = append(d.snap.Pending, later...)
			}
			d.snap.RunningByNode = slices.Clone(d.chunks)
			got, err := s.Cycle(&d.snap)
			if err != nil {
				t.Fatalf("cycle %d: %v", cycle, err)
			}
			fresh, err := scheduler.New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			want, err := fresh.Cycle(&d.snap)
			if err != nil {
				t.Fatalf("cycle %d, new scheduler: %v", cycle, err)
			}
			got.Timings, want.Timings = nil, nil
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("cycle %d: the scheduler decided\n%+v\na new one decides\n%+v", cycle, got, want)
			}
			sameFreeState(t, scheduler.StateOf(s), scheduler.StateOf(fresh))
			d.next++
			d.execute(got)
		}
	})
}
