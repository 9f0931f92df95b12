package sharing

import (
	"fmt"
	"slices"
	"sort"

	configv1 "github.com/gpuplane/gpuplane/api/config/v1"
	"github.com/gpuplane/gpuplane/internal/gpu"
)

// maxCombinations bounds the exhaustive search for the best-connected set of
// whole GPUs; beyond it the choice is greedy.
const maxCombinations = 50000

// Preferred chooses size devices among available, always including
// mustInclude, the way GetPreferredAllocation answers:
//   - whole GPUs: the set with the best NVLink (then PCIe) connectivity;
//     GPUs whose links are unknown are used only when nothing else is left;
//   - replicas and MIG devices: distinct physical GPUs whenever they exist,
//     taken from the least used GPUs first (distributed) or the most used
//     (packed).
//
// topo may be nil. Unknown IDs in available or mustInclude are an error.
func (r *Resource) Preferred(available, mustInclude []string, size int, topo *gpu.Topology) ([]string, error) {
	for _, list := range [][]string{available, mustInclude} {
		for _, id := range list {
			if _, ok := r.Device(id); !ok {
				return nil, fmt.Errorf("resource %s has no device %q", r.Name, id)
			}
		}
	}
	if size <= 0 {
		return nil, nil
	}
	if len(mustInclude) >= size {
		return slices.Clone(mustInclude[:size]), nil
	}
	if r.HasReplicas() || r.HasMIG() {
		return r.preferShared(available, mustInclude, size), nil
	}
	return r.preferWhole(available, mustInclude, size, topo), nil
}

func without(list, drop []string) []string {
	out := make([]string, 0, len(list))
	for _, id := range list {
		if !slices.Contains(drop, id) {
			out = append(out, id)
		}
	}
	return out
}

// preferWhole picks whole GPUs by connectivity.
func (r *Resource) preferWhole(available, must []string, size int, topo *gpu.Topology) []string {
	idx := func(id string) int { d, _ := r.Device(id); return d.GPUIndex }
	candidates := without(available, must)
	sort.Slice(candidates, func(i, j int) bool { return idx(candidates[i]) < idx(candidates[j]) })
	need := size - len(must)
	if topo == nil || topo.Len() == 0 {
		return append(slices.Clone(must), candidates[:min(need, len(candidates))]...)
	}
	known, unknown := []string{}, []string{}
	for _, id := range candidates {
		if hasKnownLinks(topo, idx(id)) {
			known = append(known, id)
		} else {
			unknown = append(unknown, id)
		}
	}
	if len(known) < need {
		// Too few GPUs with readable links: use the rest by index rather
		// than fail the request.
		return append(append(slices.Clone(must), known...), unknown[:min(need-len(known), len(unknown))]...)
	}
	mustIdx := make([]int, len(must))
	for i, id := range must {
		mustIdx[i] = idx(id)
	}
	candIdx := make([]int, len(known))
	for i, id := range known {
		candIdx[i] = idx(id)
	}
	chosen := bestSet(topo, mustIdx, candIdx, need)
	out := slices.Clone(must)
	for _, c := range chosen {
		out = append(out, known[c])
	}
	return out
}

func hasKnownLinks(topo *gpu.Topology, i int) bool {
	for j := range topo.Len() {
		if _, ok := topo.Between(i, j); ok {
			return true
		}
	}
	return false
}

// setScore sums the link scores of every pair in the set. Between sets
// whose links score the same (all NVLink through NVSwitch, as on a DGX
// H100), the one whose pairs are closer on PCIe wins, which keeps a set on
// one NUMA node when it fits there: the PCIe term of all pairs together
// stays below one step of the link score.
func setScore(topo *gpu.Topology, set []int) int {
	links, pcie := 0, 0
	for a := range set {
		for b := a + 1; b < len(set); b++ {
			if l, ok := topo.Between(set[a], set[b]); ok {
				links += l.Score()
				pcie += int(gpu.PCIeSystem - l.PCIe)
			}
		}
	}
	pairs := len(set) * (len(set) - 1) / 2
	return links*(int(gpu.PCIeSystem)*pairs+1) + pcie
}

// bestSet returns positions in cand of the need GPUs that, with must, have
// the highest total link score; ties go to the lowest indexes.
func bestSet(topo *gpu.Topology, must, cand []int, need int) []int {
	if need >= len(cand) {
		out := make([]int, len(cand))
		for i := range out {
			out[i] = i
		}
		return out
	}
	if binomial(len(cand), need) > maxCombinations {
		return greedySet(topo, must, cand, need)
	}
	best, bestScore := []int(nil), -1
	pick := make([]int, 0, need)
	set := make([]int, 0, len(must)+need)
	var walk func(start int)
	walk = func(start int) {
		if len(pick) == need {
			set = append(set[:0], must...)
			for _, p := range pick {
				set = append(set, cand[p])
			}
			if s := setScore(topo, set); s > bestScore {
				best, bestScore = slices.Clone(pick), s
			}
			return
		}
		for i := start; i <= len(cand)-(need-len(pick)); i++ {
			pick = append(pick, i)
			walk(i + 1)
			pick = pick[:len(pick)-1]
		}
	}
	walk(0)
	return best
}

func greedySet(topo *gpu.Topology, must, cand []int, need int) []int {
	set := slices.Clone(must)
	used := make([]bool, len(cand))
	var out []int
	for len(out) < need {
		bi, bs := -1, -1
		for i, c := range cand {
			if used[i] {
				continue
			}
			s := setScore(topo, append(set, c))
			if s > bs {
				bi, bs = i, s
			}
		}
		used[bi] = true
		out = append(out, bi)
		set = append(set, cand[bi])
	}
	sort.Ints(out)
	return out
}

func binomial(n, k int) int {
	if k > n-k {
		k = n - k
	}
	r := 1
	for i := 1; i <= k; i++ {
		r = r * (n - k + i) / i
		if r > maxCombinations {
			return r
		}
	}
	return r
}

// preferShared picks replicas or MIG devices: one per physical GPU first,
// GPUs ordered by the policy, then more from the same GPUs if needed.
func (r *Resource) preferShared(available, must []string, size int) []string {
	avail := map[string]bool{}
	for _, id := range available {
		avail[id] = true
	}
	// Load of a GPU: its devices in this resource that are not available
	// (already allocated), plus those this request must include.
	load := map[int]int{}
	freeOn := map[int][]string{}
	for i := range r.Devices {
		d := &r.Devices[i]
		if !avail[d.ID] {
			load[d.GPUIndex]++
		}
	}
	taken := map[int]int{}
	for _, id := range must {
		d, _ := r.Device(id)
		taken[d.GPUIndex]++
	}
	for _, id := range without(available, must) {
		d, _ := r.Device(id)
		freeOn[d.GPUIndex] = append(freeOn[d.GPUIndex], id)
	}
	gpus := make([]int, 0, len(freeOn))
	for g := range freeOn {
		gpus = append(gpus, g)
		sort.Slice(freeOn[g], func(i, j int) bool {
			a, _ := r.Device(freeOn[g][i])
			b, _ := r.Device(freeOn[g][j])
			return a.Index < b.Index || (a.Index == b.Index && a.Replica < b.Replica)
		})
	}
	packed := r.Policy == configv1.AllocationPacked
	sort.Slice(gpus, func(i, j int) bool {
		a, b := gpus[i], gpus[j]
		la, lb := load[a], load[b]
		if la != lb {
			if packed {
				return la > lb
			}
			return la < lb
		}
		return a < b
	})
	out := slices.Clone(must)
	// Round one: GPUs this request does not use yet, one device each.
	// Later rounds: again one device per GPU, in the same order.
	for round := 0; len(out) < size; round++ {
		progress := false
		for _, g := range gpus {
			if len(out) == size {
				break
			}
			if round == 0 && taken[g] > 0 {
				continue
			}
			if len(freeOn[g]) == 0 {
				continue
			}
			out = append(out, freeOn[g][0])
			freeOn[g] = freeOn[g][1:]
			progress = true
		}
		if !progress && round > 0 {
			break
		}
	}
	return out
}
