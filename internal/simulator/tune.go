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
		// demand is within it, keeping the rest in order.
		for total > limit && len(out) > 0 {
			k := rng.IntN(len(out))
			total -= out[k].Request.GPUMilliTotal()
			out = slices.Delete(out, k, k+1)
		}
		return out, nil
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
