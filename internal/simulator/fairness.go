package simulator

import (
	"slices"

	"github.com/gpuplane/gpuplane/internal/scheduler/queue"
)

// Fairness over time. At every moment each queue is entitled to a share
// of the cluster's GPUs: the capacity divided among the queues that want
// GPUs in proportion to their entitlement weights (guarantees), no queue
// given more than it asks for (running and waiting pods), what one cannot
// use going to the others (weighted max-min fairness, water-filling). A
// queue's deviation is the time average of |used - entitled| over the
// capacity; Jain's index is taken at every moment over the queues
// entitled to something, of used/entitled, and averaged over time. Only
// moments when some queue wants GPUs count.

// entitled divides capacity among the queues by weight, none given more
// than its demand (weighted water-filling). A queue with weight 0 gets
// only what the others leave.
func entitled(capacity float64, weight, demand []float64) []float64 {
	out := make([]float64, len(weight))
	left := capacity
	open := make([]int, 0, len(weight))
	for i := range weight {
		if demand[i] > 0 {
			open = append(open, i)
		}
	}
	for len(open) > 0 && left > 1e-9 {
		var w float64
		for _, i := range open {
			w += weight[i]
		}
		wt := func(i int) float64 { return weight[i] / w }
		if w <= 0 {
			// Only weightless queues remain: they split what is left evenly.
			n := float64(len(open))
			wt = func(int) float64 { return 1 / n }
		}
		// The queues whose demand their split would meet are served in
		// full; if none is, the split is final.
		var next []int
		for _, i := range open {
			if demand[i]-out[i] > left*wt(i) {
				next = append(next, i)
			}
		}
		if len(next) == len(open) {
			for _, i := range open {
				out[i] += left * wt(i)
			}
			return out
		}
		for _, i := range open {
			if !slices.Contains(next, i) {
				left -= demand[i] - out[i]
				out[i] = demand[i]
			}
		}
		open = next
	}
	return out
}

// fairness accumulates the deviation and Jain's index over time.
type fairness struct {
	capacity float64
	weight   []float64
	devArea  []float64
	jainArea float64
	time     float64
}

func newFairness(capacity float64, weight []float64) *fairness {
	return &fairness{capacity: capacity, weight: weight, devArea: make([]float64, len(weight))}
}

// observe counts dt of time with the queues using used and wanting demand
// (both in the capacity's unit).
func (f *fairness) observe(dt float64, used, demand []float64) {
	if dt <= 0 || f.capacity <= 0 {
		return
	}
	want := false
	for _, d := range demand {
		want = want || d > 0
	}
	if !want {
		return
	}
	ent := entitled(f.capacity, f.weight, demand)
	var sum, sumSq float64
	n := 0
	for i := range ent {
		d := used[i] - ent[i]
		if d < 0 {
			d = -d
		}
		f.devArea[i] += dt * d / f.capacity
		if ent[i] > 0 {
			x := used[i] / ent[i]
			sum += x
			sumSq += x * x
			n++
		}
	}
	jain := 1.0 // nobody is entitled to anything: nobody is treated unfairly
	if sumSq > 0 {
		jain = sum * sum / (float64(n) * sumSq)
	} else if n > 0 {
		jain = 0 // entitled queues, none served
	}
	f.jainArea += dt * jain
	f.time += dt
}

// deviation is queue i's mean absolute deviation from its entitlement, a
// share of the capacity.
func (f *fairness) deviation(i int) float64 {
	if f.time == 0 {
		return 0
	}
	return f.devArea[i] / f.time
}

// meanDeviation is the queues' deviations averaged.
func (f *fairness) meanDeviation() float64 {
	if len(f.devArea) == 0 {
		return 0
	}
	var s float64
	for i := range f.devArea {
		s += f.deviation(i)
	}
	return s / float64(len(f.devArea))
}

// jain is Jain's index averaged over time.
func (f *fairness) jain() float64 {
	if f.time == 0 {
		return 0
	}
	return f.jainArea / f.time
}

// runTeams are the queues results are kept for: the trace's leaf queues,
// then any other queue a pod names (the default queue for none), with
// their entitlement weights: guaranteed GPUs when any queue has some,
// else the queues' weights. teamOf maps a pod's queue field to its index.
type runTeamSet struct {
	names  []string
	weight []float64
	lost   []float64 // milli-GPU seconds lost to evictions
}

func runTeams(tr *Trace) (*runTeamSet, map[string]int) {
	parent := map[string]bool{}
	for _, q := range tr.Queues {
		if q.Parent != "" {
			parent[q.Parent] = true
		}
	}
	ts := &runTeamSet{}
	teamOf := map[string]int{}
	var guarantees, weights []float64
	add := func(name string, g, w float64) {
		teamOf[name] = len(ts.names)
		ts.names = append(ts.names, name)
		if w == 0 {
			w = 1
		}
		guarantees, weights = append(guarantees, g), append(weights, w)
	}
	for _, q := range tr.Queues {
		if !parent[q.Name] {
			add(q.Name, float64(q.GPUMilliGuaranteed()), q.Weight)
		}
	}
	for i := range tr.Pods {
		q := tr.Pods[i].Queue
		if q == "" {
			q = queue.DefaultQueue
		}
		if _, ok := teamOf[q]; !ok {
			add(q, 0, 1)
		}
	}
	ts.weight = weights
	for _, g := range guarantees {
		if g > 0 {
			ts.weight = guarantees
			break
		}
	}
	ts.lost = make([]float64, len(ts.names))
	if k, ok := teamOf[queue.DefaultQueue]; ok {
		teamOf[""] = k
	}
	return ts, teamOf
}
