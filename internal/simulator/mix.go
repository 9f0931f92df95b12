package simulator

import (
	"cmp"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
)

// Mix reshapes a trace's workload by kind of pod, to test placement on
// workloads the trace did not show: each kind's share of pods is scaled by
// its factor (1 keeps it, 0 removes the kind, 3 triples it). Kinds:
// cpu-only (no GPU), share (part of one GPU), whole (one GPU), multi-gpu
// (several GPUs).
type Mix struct {
	CPUOnly, Share, Whole, MultiGPU float64
}

// NoMix keeps a trace as it is.
var NoMix = Mix{CPUOnly: 1, Share: 1, Whole: 1, MultiGPU: 1}

// ParseMix reads "cpu-only=3,share=0.5": kinds not named keep factor 1.
func ParseMix(s string) (Mix, error) {
	m := NoMix
	for part := range strings.SplitSeq(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		k, v, ok := strings.Cut(part, "=")
		f, err := strconv.ParseFloat(v, 64)
		if !ok || err != nil || f < 0 || f > 100 || math.IsNaN(f) {
			return Mix{}, fmt.Errorf("mix %q: want KIND=FACTOR with a factor from 0 to 100", part)
		}
		switch k {
		case "cpu-only":
			m.CPUOnly = f
		case "share":
			m.Share = f
		case "whole":
			m.Whole = f
		case "multi-gpu":
			m.MultiGPU = f
		default:
			return Mix{}, fmt.Errorf("mix %q: unknown kind %q (want cpu-only, share, whole or multi-gpu)", part, k)
		}
	}
	return m, nil
}

// String renders m as ParseMix reads it, naming only factors other than 1.
func (m Mix) String() string {
	var parts []string
	for _, kv := range []struct {
		k string
		f float64
	}{{"cpu-only", m.CPUOnly}, {"share", m.Share}, {"whole", m.Whole}, {"multi-gpu", m.MultiGPU}} {
		if kv.f != 1 {
			parts = append(parts, kv.k+"="+strconv.FormatFloat(kv.f, 'g', -1, 64))
		}
	}
	if len(parts) == 0 {
		return "as traced"
	}
	return strings.Join(parts, ",")
}

// kind names the kind of pod p is.
func (Mix) kind(p *TracePod) string {
	r := &p.Request
	switch {
	case !r.UsesGPU():
		return "cpu-only"
	case r.GPUs > 1:
		return "multi-gpu"
	case r.GPUs == 1 || r.MIGSlices > 0:
		return "whole"
	}
	return "share"
}

func (m Mix) factor(p *TracePod) float64 {
	switch m.kind(p) {
	case "cpu-only":
		return m.CPUOnly
	case "multi-gpu":
		return m.MultiGPU
	case "whole":
		return m.Whole
	}
	return m.Share
}

// Apply returns pods reshaped by m, seeded: a kind scaled down keeps a
// random subset of its pods; one scaled up keeps all and adds copies of
// its pods drawn at random (named NAME-mN, arriving when their original
// does). The result is in creation order. Linear in the pods, plus a sort.
func (m Mix) Apply(pods []TracePod, seed uint64) []TracePod {
	if m == NoMix {
		return slices.Clone(pods)
	}
	rng := rand.New(rand.NewPCG(seed, 0x313))
	byKind := map[string][]int{}
	for i := range pods {
		k := m.kind(&pods[i])
		byKind[k] = append(byKind[k], i)
	}
	var out []TracePod
	copies := 0
	for _, k := range []string{"cpu-only", "share", "whole", "multi-gpu"} {
		idx := byKind[k]
		if len(idx) == 0 {
			continue
		}
		f := m.factor(&pods[idx[0]])
		want := int(math.Round(f * float64(len(idx))))
		if want <= len(idx) {
			rng.Shuffle(len(idx), func(a, b int) { idx[a], idx[b] = idx[b], idx[a] })
			kept := slices.Clone(idx[:want])
			slices.Sort(kept)
			for _, i := range kept {
				out = append(out, pods[i])
			}
			continue
		}
		for _, i := range idx {
			out = append(out, pods[i])
		}
		for range want - len(idx) {
			p := pods[idx[rng.IntN(len(idx))]]
			p.Name = fmt.Sprintf("%s-m%d", p.Name, copies)
			copies++
			out = append(out, p)
		}
	}
	slices.SortStableFunc(out, func(a, b TracePod) int { return cmp.Compare(a.CreatedAt, b.CreatedAt) })
	return out
}
