package simulator

import (
	"fmt"
	"slices"
	"strings"

	"github.com/gpuplane/gpuplane/internal/scheduler/model"
)

// TopologyStats say where the gangs placed by the network landed in an
// event run: gangs of two or more pods whose trace states a topology,
// whatever the run's TopologyPolicy did with it.
type TopologyStats struct {
	// Policy is the run's topology policy (aware, blind, kueue-tas).
	Policy string `json:"policy"`
	// Gangs have a topology; Started of them ran (all their pods placed
	// together at least once).
	Gangs   int `json:"gangs"`
	Started int `json:"started"`
	// Required and Preferred measure the started gangs against their
	// required and their preferred level.
	Required  LevelStats `json:"required"`
	Preferred LevelStats `json:"preferred"`
	// GPUAllocation is the cluster's milli-GPU allocation ratio averaged
	// over the gangs' window: from the first gang's arrival to the last
	// one's.
	GPUAllocation float64 `json:"gpuAllocation"`
	// Wait is the gangs' queueing delay (first start - creation, trace
	// seconds) over the started ones.
	WaitMean float64 `json:"waitMean"`
	WaitP50  float64 `json:"waitP50"`
	WaitP90  float64 `json:"waitP90"`
}

// LevelStats measure started gangs against one of their levels.
type LevelStats struct {
	// Level is the level's label key, "mixed" when the gangs name
	// different ones, "" when none names one.
	Level string `json:"level,omitempty"`
	// Gangs name the level and started; InOne of them have every pod
	// inside one domain of it; InOneShare is InOne/Gangs.
	Gangs      int     `json:"gangs"`
	InOne      int     `json:"inOne"`
	InOneShare float64 `json:"inOneShare"`
	// MeanDomains and MaxDomains are the domains of the level a gang's
	// pods span.
	MeanDomains float64 `json:"meanDomains"`
	MaxDomains  int     `json:"maxDomains"`
	// CanFit counts the gangs that one domain of the level could hold
	// were the cluster empty; CanFitInOne of them got one, and
	// CanFitShare is CanFitInOne/CanFit: the share of the gangs that can
	// fit in one domain that get one.
	CanFit      int     `json:"canFit"`
	CanFitInOne int     `json:"canFitInOne"`
	CanFitShare float64 `json:"canFitShare"`
	// FitAtStart counts the gangs one domain of the level could hold,
	// with what it had free, when they were placed (the pods placed
	// before them in the same cycle counted); FitAtStartInOne of them got
	// one, and FitAtStartShare is FitAtStartInOne/FitAtStart: of the
	// gangs that could have had one domain, the share that did.
	FitAtStart      int     `json:"fitAtStart"`
	FitAtStartInOne int     `json:"fitAtStartInOne"`
	FitAtStartShare float64 `json:"fitAtStartShare"`
}

// gangRecord is what a run learns of one gang with a topology.
type gangRecord struct {
	topo    *model.GangTopology
	shape   model.Request
	size    int
	created int64
	started int64 // -1 before
	// nodeOf is the node index each of its pods was last bound to.
	nodeOf map[string]int
	// fitAtStart says, for its required and preferred level, whether one
	// domain of it could hold the gang when it was first placed.
	fitAtStart map[string]bool
}

// fitsOneDomain reports whether one domain of levels[depth] holds size
// pods of shape with what the nodes have free.
func fitsOneDomain(nodes []model.Node, free []nodeFree, levels []string, depth int, shape *model.Request, size int) bool {
	counts := make([]int, len(nodes))
	all := make([]int, len(nodes))
	for i := range nodes {
		counts[i] = podsFit(&nodes[i], &free[i], shape)
		all[i] = i
	}
	for _, d := range domainsAt(nodes, levels, depth, counts, all) {
		if d.count >= size {
			return true
		}
	}
	return false
}

// spanned is how many domains of level (its id by the levels down to it)
// the nodes span; a node lacking the level's label counts as a domain of
// its own, as it is in none.
func spanned(nodes []model.Node, levels []string, depth int, at []int) int {
	seen := map[string]bool{}
	var b strings.Builder
	for _, i := range at {
		b.Reset()
		for _, l := range levels[:depth+1] {
			v := domainOf(&nodes[i], l)
			if v == "" {
				v = "\x01" + nodes[i].Name
			}
			b.WriteString(v)
			b.WriteByte(0)
		}
		seen[b.String()] = true
	}
	return len(seen)
}

// fitCache answers whether one domain of a level could hold a gang in an
// empty cluster, once per (levels, depth, shape, size).
type fitCache struct {
	nodes []model.Node
	empty []nodeFree
	memo  map[string]bool
}

func newFitCache(nodes []model.Node) *fitCache {
	return &fitCache{nodes: nodes, empty: freeOf(&model.Snapshot{Nodes: nodes}), memo: map[string]bool{}}
}

func (c *fitCache) canFit(levels []string, depth int, shape *model.Request, size int) bool {
	key := fmt.Sprintf("%q/%d/%d/%d/%d/%d/%v/%v/%d", levels, depth, shape.MilliCPU, shape.MemoryMiB, shape.GPUs, shape.GPUMilli, shape.GPUModels, shape.NodeSelector, size)
	if v, ok := c.memo[key]; ok {
		return v
	}
	fit := fitsOneDomain(c.nodes, c.empty, levels, depth, shape, size)
	c.memo[key] = fit
	return fit
}

// topologyStats measures the gangs of a run on nodes (the trace's, before
// any label the run added).
func topologyStats(policy TopologyPolicy, nodes []model.Node, gangs map[string]*gangRecord) *TopologyStats {
	st := &TopologyStats{Policy: string(policy)}
	fits := newFitCache(nodes)
	var waits []float64
	names := make([]string, 0, len(gangs))
	for n := range gangs {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, name := range names {
		g := gangs[name]
		st.Gangs++
		if g.started < 0 {
			continue
		}
		st.Started++
		waits = append(waits, float64(g.started-g.created))
		at := make([]int, 0, len(g.nodeOf))
		for _, i := range g.nodeOf {
			at = append(at, i)
		}
		for _, lv := range []struct {
			key string
			s   *LevelStats
		}{{g.topo.Required, &st.Required}, {g.topo.Preferred, &st.Preferred}} {
			depth := g.topo.Level(lv.key)
			if depth < 0 {
				continue
			}
			s := lv.s
			switch {
			case s.Level == "":
				s.Level = lv.key
			case s.Level != lv.key:
				s.Level = "mixed"
			}
			s.Gangs++
			d := spanned(nodes, g.topo.Levels, depth, at)
			s.MeanDomains += float64(d)
			s.MaxDomains = max(s.MaxDomains, d)
			if d == 1 {
				s.InOne++
			}
			if fits.canFit(g.topo.Levels, depth, &g.shape, g.size) {
				s.CanFit++
				if d == 1 {
					s.CanFitInOne++
				}
			}
			if g.fitAtStart[lv.key] {
				s.FitAtStart++
				if d == 1 {
					s.FitAtStartInOne++
				}
			}
		}
	}
	for _, s := range []*LevelStats{&st.Required, &st.Preferred} {
		if s.Gangs > 0 {
			s.MeanDomains /= float64(s.Gangs)
			s.InOneShare = float64(s.InOne) / float64(s.Gangs)
		}
		if s.CanFit > 0 {
			s.CanFitShare = float64(s.CanFitInOne) / float64(s.CanFit)
		}
		if s.FitAtStart > 0 {
			s.FitAtStartShare = float64(s.FitAtStartInOne) / float64(s.FitAtStart)
		}
	}
	for _, w := range waits {
		st.WaitMean += w
	}
	if len(waits) > 0 {
		st.WaitMean /= float64(len(waits))
	}
	st.WaitP50, st.WaitP90 = percentile(waits, 0.5), percentile(waits, 0.9)
	return st
}
