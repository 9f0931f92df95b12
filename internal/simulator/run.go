package simulator

import (
	"context"
	"fmt"
	"sync"

	"github.com/gpuplane/gpuplane/internal/scheduler/model"
)

// Mode is how a trace is replayed.
type Mode string

// Modes.
const (
	ModePacking Mode = "packing"
	ModeEvent   Mode = "event"
)

// Spec is a set of runs: every policy with every seed.
type Spec struct {
	Mode      Mode
	Policies  []string
	Seeds     []uint64
	Tune      float64
	TunedLast bool
	// KeepNodeOrder: see PackingConfig.
	KeepNodeOrder bool
	Popularity    float64
	// Layouts and LayoutDelay: see EventConfig (event mode).
	Layouts     model.LayoutPolicy
	LayoutDelay int64
	// Defrag: see EventConfig (event mode).
	Defrag model.DefragPolicy
	// NodeLoss: see EventConfig (event mode).
	NodeLoss NodeLoss
	// TopologyPolicies are the topology policies every event-mode run is
	// repeated with (none: TopologyAware only, unreported when the trace
	// has no gang with a topology).
	TopologyPolicies []TopologyPolicy
	// Configs, in event mode, are scheduler configurations run in place
	// of Policies (each names its placement policy).
	Configs []SchedulerConfig
	// Generate, when set, makes each seed's trace, which every policy or
	// configuration of that seed replays, in place of RunAll's trace.
	Generate func(seed uint64) (*Trace, error)
	// Parallel is how many runs execute at once (at least 1).
	Parallel int
	// Progress, if set, is called (from any goroutine, serialised) with
	// runs done, runs in all, and the fraction of the current runs' pods
	// done.
	Progress func(done, total int, frac float64)
}

// RunAll runs every (policy, topology policy, seed) of spec on tr and
// returns the results in that order, policy-major and seed-minor.
func RunAll(ctx context.Context, tr *Trace, spec Spec) ([]*Result, error) {
	type job struct {
		i, p, s int
		topo    TopologyPolicy
	}
	topos := spec.TopologyPolicies
	if len(topos) == 0 {
		topos = []TopologyPolicy{""}
	}
	policies := spec.Policies
	if len(spec.Configs) > 0 {
		if spec.Mode != ModeEvent {
			return nil, fmt.Errorf("scheduler configurations run in event mode only")
		}
		policies = nil
		for _, c := range spec.Configs {
			policies = append(policies, c.Name)
		}
	}
	traces := make([]*Trace, len(spec.Seeds))
	for i, seed := range spec.Seeds {
		traces[i] = tr
		if spec.Generate != nil {
			var err error
			if traces[i], err = spec.Generate(seed); err != nil {
				return nil, fmt.Errorf("seed %d: %w", seed, err)
			}
		}
	}
	n := len(policies) * len(topos) * len(spec.Seeds)
	results := make([]*Result, n)
	errs := make([]error, n)
	jobs := make(chan job)
	var mu sync.Mutex
	done := 0
	partial := make([]float64, n)
	report := func(i int, f float64) {
		if spec.Progress == nil {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		if f >= 1 && partial[i] < 1 {
			done++
		}
		partial[i] = f
		sum := 0.0
		for _, v := range partial {
			sum += v
		}
		spec.Progress(done, n, sum/float64(max(n, 1)))
	}
	var wg sync.WaitGroup
	for range max(spec.Parallel, 1) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range jobs {
				pol, seed, tr := policies[j.p], spec.Seeds[j.s], traces[j.s]
				var conf *SchedulerConfig
				if len(spec.Configs) > 0 {
					conf = &spec.Configs[j.p]
				}
				var r *Result
				var err error
				switch spec.Mode {
				case ModeEvent:
					r, err = RunEvent(ctx, tr, EventConfig{Policy: pol, Seed: seed, Popularity: spec.Popularity, Layouts: spec.Layouts, LayoutDelay: spec.LayoutDelay, Defrag: spec.Defrag, NodeLoss: spec.NodeLoss, Topology: j.topo,
						Config: conf, Progress: func(d, t int) { report(j.i, float64(d)/float64(max(t, 1))) }})
				default:
					r, err = RunPacking(ctx, tr, PackingConfig{Policy: pol, Seed: seed, Tune: spec.Tune, TunedLast: spec.TunedLast, KeepNodeOrder: spec.KeepNodeOrder,
						Popularity: spec.Popularity, Progress: func(d, t int) { report(j.i, float64(d)/float64(max(t, 1))) }})
				}
				if err != nil {
					err = fmt.Errorf("policy %s seed %d: %w", pol, seed, err)
					if j.topo != "" {
						err = fmt.Errorf("topology %s: %w", j.topo, err)
					}
				}
				results[j.i], errs[j.i] = r, err
				report(j.i, 1)
			}
		}()
	}
	i := 0
	for p := range policies {
		for _, t := range topos {
			for s := range spec.Seeds {
				jobs <- job{i, p, s, t}
				i++
			}
		}
	}
	close(jobs)
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	return results, nil
}
