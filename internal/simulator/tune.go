package simulator

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"slices"
)

func sortByCreation(pods []TracePod) {
	slices.SortStableFunc(pods, func(a, b TracePod) int { return cmp.Compare(a.CreatedAt, b.CreatedAt) })
}

// Tune returns the trace's pods plus pods drawn uniformly at random, with
// replacement, from the trace (seeded), until the next draw would push the
// requested milli-GPU over ratio x capacity. Drawn pods get a "-tN" name
// suffix. With first, the drawn pods arrive before the trace's pods (as in
// the FGD paper's simulator, whose drawn copies carry no creation time and
// sort ahead of every timed pod); otherwise after the last one. A trace
// already above the target loses pods drawn at random instead. With ratio
// 0 the pods are returned as they are.
func Tune(pods []TracePod, capacityMilli int64, ratio float64, seed uint64, first bool) ([]TracePod, error) {
	out := slices.Clone(pods)
	if ratio == 0 {
		return out, nil
	}
	if ratio < 0 {
		return nil, fmt.Errorf("tuning trace: --tune must be >= 0, got %g", ratio)
	}
	if len(pods) == 0 {
		return out, nil
	}
	var total, last int64
	anyGPU := false
	for i := range pods {
		total += pods[i].Request.GPUMilliTotal()
		last = max(last, pods[i].CreatedAt)
		anyGPU = anyGPU || pods[i].Request.GPUMilliTotal() > 0
	}
	if !anyGPU {
		return out, nil
	}
	limit := int64(ratio * float64(capacityMilli))
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	if total > limit {
		// Over the target already: drop pods at random (seeded) until the
		// demand is within it, keeping the rest in order. Each draw picks
		// the k-th pod still present; an order-statistics tree finds it in
		// O(log n), so dropping costs O(n log n), not the O(n^2) of
		// deleting from a slice.
		present := newOrderTree(len(out))
		dropped := make([]bool, len(out))
		for left := len(out); total > limit && left > 0; left-- {
			i := present.take(rng.IntN(left))
			dropped[i] = true
			total -= out[i].Request.GPUMilliTotal()
		}
		kept := out[:0]
		for i := range out {
			if !dropped[i] {
				kept = append(kept, out[i])
			}
		}
		return kept, nil
	}
	for n := 0; ; n++ {
		p := pods[rng.IntN(len(pods))]
		m := p.Request.GPUMilliTotal()
		if total+m > limit {
			if first {
				out = append(out[len(pods):], out[:len(pods)]...)
			}
			return out, nil
		}
		total += m
		p.Name = fmt.Sprintf("%s-t%d", p.Name, n)
		run := p.RunTime()
		p.CreatedAt = last + int64(n) + 1
		if p.DeletedAt > 0 {
			p.DeletedAt = p.CreatedAt + run
		}
		out = append(out, p)
	}
}

// orderTree is a Fenwick tree over n positions, each present or taken,
// that finds the k-th present position in O(log n).
type orderTree struct {
	sum  []int // 1-based Fenwick sums of present positions
	high int   // the largest power of two <= n
}

func newOrderTree(n int) *orderTree {
	t := &orderTree{sum: make([]int, n+1), high: 1}
	for i := 1; i <= n; i++ {
		t.sum[i]++
		if j := i + i&-i; j <= n {
			t.sum[j] += t.sum[i]
		}
	}
	for t.high*2 <= n {
		t.high *= 2
	}
	return t
}

// take removes the k-th (0-based) present position and returns it.
func (t *orderTree) take(k int) int {
	pos := 0
	for step := t.high; step > 0; step /= 2 {
		if next := pos + step; next < len(t.sum) && t.sum[next] <= k {
			pos = next
			k -= t.sum[next]
		}
	}
	// pos is the 1-based position just before the k-th present one.
	for i := pos + 1; i < len(t.sum); i += i & -i {
		t.sum[i]--
	}
	return pos
}
