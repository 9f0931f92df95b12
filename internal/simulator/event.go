package simulator

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/gpuplane/gpuplane/internal/scheduler"
	"github.com/gpuplane/gpuplane/internal/scheduler/model"
	"github.com/gpuplane/gpuplane/internal/scheduler/placement"
	"github.com/gpuplane/gpuplane/internal/scheduler/queue"
)

// EventConfig is one event-mode run.
type EventConfig struct {
	Policy     string
	Seed       uint64
	Popularity float64
	// Interval is the virtual time between scheduling cycles in trace
	// seconds (0 means 60): events are batched like a real scheduler's
	// period.
	Interval int64
	Progress func(done, total int)
	// OnCycle, when set, sees every cycle's snapshot and decisions at
	// virtual time now, before they are carried out.
	OnCycle func(now int64, snap *model.Snapshot, d *model.Decisions)
	// Layouts is the hysteresis of MIG layout proposals for the nodes
	// that follow demand, in trace seconds; LayoutDelay is how long a
	// node takes to apply one (re-partitioning a GPU), after which its
	// GPU serves in the new layout (model.CompleteLayouts).
	Layouts     model.LayoutPolicy
	LayoutDelay int64
	// Topology says who places gangs by the network (TopologyAware when
	// empty); the result's Topology measures where they landed.
	Topology TopologyPolicy
	// Config, when set, is the scheduler configuration the core runs
	// (its placement policy replaces Policy); results keep the trace's
	// queues.
	Config *SchedulerConfig
	// VictimsByAge chooses victims by age alone, blind to checkpoints
	// (model.Snapshot.VictimsByAge), to compare with checkpoint-aware
	// victims.
	VictimsByAge bool
	// Defrag bounds the core's moves of Movable groups (trace pods'
	// Movable), its Window in trace seconds; the zero value moves none.
	// Decisions.Moves says what each cycle moved.
	Defrag model.DefragPolicy
	// NodeLoss makes some nodes spot instances that are reclaimed, with
	// notice, and may come back (nodeloss.go); the zero value loses none.
	NodeLoss NodeLoss
}

type simPod struct {
	tp      *TracePod
	group   string
	team    int   // index of its trace queue in the run's queues
	started int64 // first start, -1 before
	end     int64 // finish time of the current run, -1 when not running
	done    int64 // completion time, -1 before
	// runStart is when the current run began; saved is the work, in
	// seconds, kept by checkpoints of earlier runs.
	runStart, saved int64
	held            int64 // milli-GPU it holds while running
}

// lastCheckpoint is when the running pod's job last saved its progress,
// as a job reports it (the annotation scheduling.gpuplane.io/last-
// checkpoint): the last multiple of its interval since its run began, or
// the run's start when it saves nothing (it then loses the whole run).
func (p *simPod) lastCheckpoint(now int64) int64 {
	every := p.tp.CheckpointEvery
	if every <= 0 {
		return p.runStart
	}
	return p.runStart + (now-p.runStart)/every*every
}

// RunEvent replays the trace's arrivals and departures through full
// scheduling cycles on a virtual clock: pods arrive at their creation time
// (gangs by group), run for their trace duration once bound, and restart
// from scratch when evicted. Pods with no known duration run to the end.
func RunEvent(ctx context.Context, tr *Trace, cfg EventConfig) (*Result, error) {
	start := time.Now()
	if len(tr.Nodes) == 0 {
		return nil, fmt.Errorf("event run %s: the trace has no nodes", tr.Source)
	}
	if _, err := queue.New(tr.Queues); err != nil {
		return nil, fmt.Errorf("event run %s: %w", tr.Source, err)
	}
	interval := cfg.Interval
	if interval <= 0 {
		interval = 60
	}
	pop := cfg.Popularity
	if pop == 0 {
		pop = 1
	}
	var reqs []model.Request
	for i := range tr.Pods {
		reqs = append(reqs, tr.Pods[i].Request)
	}
	var targets []placement.Target
	if len(reqs) > 0 {
		var err error
		if targets, err = placement.TargetsFrom(reqs, pop); err != nil {
			return nil, fmt.Errorf("event run %s: %w", tr.Source, err)
		}
	}
	policy := cfg.Policy
	if cfg.Config != nil {
		policy = cfg.Config.Placement
		if _, err := queue.New(cfg.Config.queues(tr.Queues)); err != nil {
			return nil, fmt.Errorf("event run %s: configuration %s: %w", tr.Source, cfg.Config.Name, err)
		}
	}
	s, err := scheduler.New(scheduler.Config{Policy: policy, Targets: targets, Seed: cfg.Seed})
	if err != nil {
		return nil, err
	}
	topoPolicy := cfg.Topology
	if topoPolicy == "" {
		topoPolicy = TopologyAware
	}
	pods := make([]*simPod, len(tr.Pods))
	byName := map[string]*simPod{}
	teams, teamOf := runTeams(tr)
	gangs := map[string]*gangRecord{}
	for i := range tr.Pods {
		tp := &tr.Pods[i]
		g := tp.Group
		if g == "" {
			g = tp.Name
		}
		pods[i] = &simPod{tp: tp, group: g, team: teamOf[tp.Queue], started: -1, end: -1, done: -1}
		if _, dup := byName[tp.Name]; dup {
			return nil, fmt.Errorf("event run %s: pod %q appears twice", tr.Source, tp.Name)
		}
		byName[tp.Name] = pods[i]
		if tp.Topology == nil {
			continue
		}
		r := gangs[g]
		if r == nil {
			r = &gangRecord{topo: tp.Topology, shape: tp.Request, created: tp.CreatedAt, started: -1, nodeOf: map[string]int{}}
			gangs[g] = r
		}
		r.size++
		r.created = min(r.created, tp.CreatedAt)
		q := &tp.Request
		r.shape.MilliCPU, r.shape.MemoryMiB = max(r.shape.MilliCPU, q.MilliCPU), max(r.shape.MemoryMiB, q.MemoryMiB)
		r.shape.GPUs, r.shape.GPUMilli = max(r.shape.GPUs, q.GPUs), max(r.shape.GPUMilli, q.GPUMilli)
	}
	// The gangs' window, from the first one's arrival to the last one's:
	// GPU allocation while they arrive is measured over it.
	winFrom, winTo := int64(math.MaxInt64), int64(math.MinInt64)
	for g, r := range gangs {
		if r.size < 2 {
			delete(gangs, g) // a lone pod is inside one domain of every level
			continue
		}
		winFrom, winTo = min(winFrom, r.created), max(winTo, r.created)
	}
	var winArea float64
	slices.SortStableFunc(pods, func(a, b *simPod) int { return cmp.Compare(a.tp.CreatedAt, b.tp.CreatedAt) })
	capMilli := tr.GPUCapacityMilli()
	if c := cfg.Config; c != nil {
		cfg.VictimsByAge = cfg.VictimsByAge || c.VictimsByAge
		if c.DefragMovesPerHour > 0 {
			// The run's bound on lost work, if any, holds for the
			// configuration's moves too.
			cfg.Defrag = model.DefragPolicy{MaxMoves: c.DefragMovesPerHour, Window: 3600, DrainAfter: c.DefragDrainAfter, MaxLostWork: cfg.Defrag.MaxLostWork}
		}
	}
	if err := cfg.Defrag.Check("defrag"); err != nil {
		return nil, fmt.Errorf("event run %s: %w", tr.Source, err)
	}
	if err := cfg.NodeLoss.Check("nodeLoss"); err != nil {
		return nil, fmt.Errorf("event run %s: %w", tr.Source, err)
	}
	snap := model.Snapshot{Nodes: tr.Nodes, Queues: cfg.Config.queues(tr.Queues), Budget: model.DisruptionBudget{MaxEvictions: -1}, Layouts: cfg.Layouts,
		VictimsByAge: cfg.VictimsByAge, Defrag: cfg.Defrag}
	var tas *kueueTAS
	if topoPolicy == TopologyKueueTAS {
		// The baseline pins pods to nodes with a node selector on
		// kubernetes.io/hostname, as Kueue does: the nodes carry it as a
		// label in this mode.
		tas = &kueueTAS{topo: map[string]*model.GangTopology{}, orig: make(map[string]model.Request, len(pods))}
		slicesOf := map[string][]string{}
		for _, p := range pods {
			if gangs[p.group] != nil {
				slicesOf[p.group] = append(slicesOf[p.group], p.tp.Slice)
			}
		}
		for g, r := range gangs {
			t, err := kueueTopology(r.topo, slicesOf[g])
			if err != nil {
				return nil, fmt.Errorf("event run %s: gang %q: %w", tr.Source, g, err)
			}
			tas.topo[g] = t
		}
		for _, p := range pods {
			tas.orig[p.tp.Name] = p.tp.Request
		}
		snap.Nodes = slices.Clone(tr.Nodes)
		for i := range snap.Nodes {
			n := &snap.Nodes[i]
			l := make(map[string]string, len(n.Labels)+1)
			for k, v := range n.Labels {
				l[k] = v
			}
			l[hostnameLabel] = n.Name
			n.Labels = l
		}
	}
	res := &Result{Mode: string(ModeEvent), Policy: policy, Seed: cfg.Seed, Pods: len(pods), Event: &EventStats{}}
	if cfg.Config != nil {
		res.Policy = cfg.Config.Name
	}
	if len(gangs) > 0 || topoPolicy != TopologyAware {
		// Runs without gangs placed by the network keep their plain name.
		res.TopologyPolicy = string(topoPolicy)
	}
	ev := res.Event
	preempted := map[string]int{}
	queueOf := func(p *simPod) string {
		if p.tp.Queue == "" {
			return queue.DefaultQueue
		}
		return p.tp.Queue
	}
	usage := map[string]float64{} // milli-GPU x seconds per queue
	// Per team: milli-GPU held, and asked for by pods arrived and not done.
	used, demand := make([]float64, len(teams.names)), make([]float64, len(teams.names))
	fair := newFairness(float64(capMilli), teams.weight)
	var lostMilliSeconds, movedMilliSeconds, nodeLossMilliSeconds float64
	var allocMilli int64
	var utilArea float64
	next := 0
	now := int64(0)
	if len(pods) > 0 {
		now = pods[0].tp.CreatedAt
	}
	first := now
	loss := newNodeLoss(cfg.NodeLoss, snap.Nodes, cfg.Seed, now)
	// stop takes a's pod off its node as an eviction does, for reason
	// (model.Evict*): the work since its last checkpoint is lost (to node
	// loss, or to preemption, reclaim or a move), and its next run
	// resumes from that checkpoint.
	stop := func(a *model.Allocation, reason string) {
		for _, sh := range a.GPUs {
			allocMilli -= sh.Milli
		}
		p := byName[a.Pod]
		ck := p.lastCheckpoint(now)
		lost := float64(p.held) * float64(now-ck)
		switch reason {
		case model.EvictDisruption:
			nodeLossMilliSeconds += lost
		case model.EvictDefragment:
			movedMilliSeconds += lost
			fallthrough
		default:
			lostMilliSeconds += lost
			teams.lost[p.team] += lost
		}
		p.saved += ck - p.runStart
		used[p.team] -= float64(p.held)
		p.held = 0
	}
	queueMin, classMin := minRuntimes(snap.Queues), map[string]bool{}
	for _, p := range pods {
		if p.tp.MinRuntime > 0 {
			classMin[p.group] = true
		}
	}
	for {
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("event run %s: %w", tr.Source, err)
		}
		// Completions up to now.
		allocMilli -= complete(&snap, byName, now, func(p *simPod) {
			used[p.team] -= float64(p.held)
			demand[p.team] -= float64(p.tp.Request.GPUMilliTotal())
			p.held = 0
		})
		// Arrivals up to now join their group's pending entry.
		if next < len(pods) && pods[next].tp.CreatedAt <= now {
			at := make(map[string]int, len(snap.Pending))
			for k := range snap.Pending {
				at[snap.Pending[k].Name] = k
			}
			for next < len(pods) && pods[next].tp.CreatedAt <= now {
				p := pods[next]
				k, ok := at[p.group]
				if !ok {
					k = len(snap.Pending)
					at[p.group] = k
					pg := model.PodGroup{Name: p.group, Queue: cfg.Config.queueOf(p.tp.Queue), Priority: cfg.Config.priority(p.tp.Priority),
						MinMember: p.tp.MinMember, CreatedAt: p.tp.CreatedAt, MinRuntime: p.tp.MinRuntime, Movable: p.tp.Movable}
					if topoPolicy == TopologyAware {
						pg.Topology = p.tp.Topology
					}
					snap.Pending = append(snap.Pending, pg)
				}
				snap.Pending[k].Pods = append(snap.Pending[k].Pods, model.Pod{Name: p.tp.Name, Request: p.tp.Request, Slice: p.tp.Slice})
				demand[p.team] += float64(p.tp.Request.GPUMilliTotal())
				next++
			}
		}
		// Spot nodes reclaimed, gone or back by now; what runs on a node
		// that goes is lost with it and waits again in its group.
		err := loss.advance(&snap, now, func(running []model.Allocation) error {
			gone := model.Decisions{}
			for i := range running {
				a := &running[i]
				stop(a, model.EvictDisruption)
				byName[a.Pod].end = -1
				gone.Evictions = append(gone.Evictions, model.Eviction{Pod: a.Pod, Group: a.Group, Node: a.Node, Reason: model.EvictDisruption})
			}
			loss.lost(running)
			return model.Apply(&snap, &gone, now)
		})
		if err != nil {
			return nil, fmt.Errorf("event run %s at t=%d: losing a node: %w", tr.Source, now, err)
		}
		snap.Now = now
		checkpoint(&snap, byName, now)
		ev.LayoutsApplied += model.CompleteLayouts(&snap, now-cfg.LayoutDelay)
		var held []model.PodGroup
		if tas != nil {
			held = tas.admit(&snap)
		}
		d, err := s.Cycle(&snap)
		if err != nil {
			return nil, fmt.Errorf("event run %s at t=%d: %w", tr.Source, now, err)
		}
		ev.Cycles++
		loss.cycled(&d)
		if cfg.OnCycle != nil {
			cfg.OnCycle(now, &snap, &d)
		}
		// The simulator's own accounting of what the decisions do; the
		// snapshot changes as the core's model.Apply says, for every
		// driver alike.
		evicted := make(map[string]string, len(d.Evictions)) // pod -> reason
		for _, e := range d.Evictions {
			evicted[e.Pod] = e.Reason
			p := byName[e.Pod]
			p.end = -1
			if e.Reason == model.EvictDefragment || e.Reason == model.EvictDisruption {
				continue // a move (d.Moves counts it) or node loss (loss counts it), not a preemption
			}
			preempted[queueOf(p)]++
			ev.Preemptions++
		}
		ev.Moves += len(d.Moves)
		for a := range snap.AllRunning() {
			if reason, ok := evicted[a.Pod]; ok {
				stop(a, reason)
			}
		}
		var free []nodeFree // what nodes have left as the binds land, for gangs' fit at start
		if len(gangs) > 0 && len(d.Binds) > 0 {
			free = freeOf(&snap)
		}
		for _, b := range d.Binds {
			p := byName[b.Pod]
			if r := gangs[p.group]; r != nil && r.started < 0 && r.fitAtStart == nil {
				r.fitAtStart = map[string]bool{}
				for _, l := range []string{r.topo.Required, r.topo.Preferred} {
					if depth := r.topo.Level(l); depth >= 0 {
						r.fitAtStart[l] = fitsOneDomain(snap.Nodes, free, r.topo.Levels, depth, &r.shape, r.size)
					}
				}
			}
			if free != nil {
				free[b.NodeIndex].take(&snap.Nodes[b.NodeIndex], &p.tp.Request, 1)
			}
			if p.started < 0 {
				p.started = now
			}
			p.end, p.runStart = -1, now
			if rt := p.tp.RunTime(); rt > 0 {
				p.end = now + max(rt-p.saved, 1)
			}
			for _, sh := range b.GPUs {
				allocMilli += sh.Milli
				p.held += sh.Milli
			}
			used[p.team] += float64(p.held)
			if r := gangs[p.group]; r != nil {
				r.nodeOf[b.Pod] = loss.original(b.Node, b.NodeIndex)
				if r.started < 0 {
					r.started = now
				}
			}
		}
		if err := model.Apply(&snap, &d, now); err != nil {
			return nil, fmt.Errorf("event run %s at t=%d: %w", tr.Source, now, err)
		}
		snap.Pending = append(snap.Pending, held...)
		ev.LayoutsProposed += len(d.Layouts)
		// Advance the clock to the next event, at least one interval on.
		nextT := layoutWake(&snap, cfg, now)
		if next < len(pods) {
			nextT = pods[next].tp.CreatedAt
		}
		for a := range snap.AllRunning() {
			if p := byName[a.Pod]; p.end >= 0 {
				nextT = min(nextT, p.end)
			}
		}
		if len(snap.Holds) > 0 {
			// Preemptors wait for their victims, which have exited: the
			// next cycle binds them.
			nextT = min(nextT, now+interval)
		}
		if after := snap.Defrag.DrainAfter; after > 0 && snap.Defrag.MaxMoves > 0 {
			// A waiting group may have nodes drained for it once it has
			// waited DrainAfter.
			for i := range snap.Pending {
				if at := snap.Pending[i].CreatedAt + after; at > now {
					nextT = min(nextT, at)
				}
			}
		}
		if len(snap.Pending) > 0 && len(queueMin)+len(classMin) > 0 {
			// A waiting group may evict a victim once its minimum
			// runtime ends.
			nextT = min(nextT, protectedUntil(&snap, queueMin, now))
		}
		nextT = loss.wake(nextT, len(snap.Pending) > 0)
		if nextT == math.MaxInt64 {
			break
		}
		nextT = max(nextT, now+interval)
		dt := float64(nextT - now)
		utilArea += dt * ratio(allocMilli, capMilli)
		if lo, hi := max(now, winFrom), min(nextT, winTo); hi > lo {
			winArea += float64(hi-lo) * ratio(allocMilli, capMilli)
		}
		for a := range snap.AllRunning() {
			for _, sh := range a.GPUs {
				usage[queueOf(byName[a.Pod])] += dt * float64(sh.Milli)
			}
		}
		fair.observe(dt, used, demand)
		if len(ev.Utilization) == 0 || nextT-ev.Utilization[len(ev.Utilization)-1].Time >= 3600 {
			pt := UtilPoint{Time: now, MilliGPUAllocationRatio: ratio(allocMilli, capMilli)}
			if len(teams.names) > 1 {
				pt.ByQueue = make(map[string]float64, len(teams.names))
				for i, n := range teams.names {
					pt.ByQueue[n] = used[i] / float64(max(capMilli, 1))
				}
			}
			ev.Utilization = append(ev.Utilization, pt)
		}
		now = nextT
		if cfg.Progress != nil && ev.Cycles%64 == 0 {
			cfg.Progress(next, len(pods))
		}
	}
	if cfg.Progress != nil {
		cfg.Progress(len(pods), len(pods))
	}
	span := float64(max(now-first, 1))
	ev.MeanUtilization = utilArea / span
	ev.GPUHours = utilArea * float64(capMilli) / model.MilliPerGPU / 3600
	res.MilliGPUAllocationRatio = ratio(allocMilli, capMilli)
	fillQueueStats(tr, pods, preempted, usage, res)
	wholeNodeWaits(tr.Nodes, pods, ev)
	ev.LostGPUHours = lostMilliSeconds / model.MilliPerGPU / 3600
	ev.LostGPUHoursMoves = movedMilliSeconds / model.MilliPerGPU / 3600
	loss.stats(ev, nodeLossMilliSeconds)
	ev.FairnessDeviation, ev.JainOverTime = fair.meanDeviation(), fair.jain()
	for i := range ev.Queues {
		q := &ev.Queues[i]
		if k, ok := teamOf[q.Queue]; ok {
			q.FairnessDeviation = fair.deviation(k)
			q.LostGPUHours = teams.lost[k] / model.MilliPerGPU / 3600
		}
	}
	if len(gangs) > 0 {
		res.Topology = topologyStats(topoPolicy, tr.Nodes, gangs)
		if winTo > winFrom {
			res.Topology.GPUAllocation = winArea / float64(winTo-winFrom)
		}
	}
	res.WallSeconds = time.Since(start).Seconds()
	return res, nil
}

// complete takes the pods whose run ended by now off their nodes, each
// node that loses one getting a new chunk (model.Snapshot's rule), marks
// them done and returns the milli-GPU they held.
func complete(snap *model.Snapshot, byName map[string]*simPod, now int64, done func(*simPod)) int64 {
	ended := func(a model.Allocation) bool {
		p := byName[a.Pod]
		return p.end >= 0 && p.end <= now
	}
	var freed int64
	cloned := false
	for n, chunk := range snap.RunningByNode {
		k := slices.IndexFunc(chunk, ended)
		if k < 0 {
			continue
		}
		if !cloned {
			// A new outer slice too: whoever kept the last one keeps its view.
			snap.RunningByNode, cloned = slices.Clone(snap.RunningByNode), true
		}
		keep := slices.Clone(chunk[:k])
		for _, a := range chunk[k:] {
			if !ended(a) {
				keep = append(keep, a)
				continue
			}
			p := byName[a.Pod]
			p.done, p.end = p.end, -1
			for _, sh := range a.GPUs {
				freed += sh.Milli
			}
			done(p)
		}
		snap.RunningByNode[n] = keep
	}
	return freed
}

// layoutWake is when the MIG layouts of nodes that follow demand next
// need a cycle: a pending proposal's GPU done re-partitioning, or pending
// demand old enough to be proposed for; MaxInt64 when never.
func layoutWake(snap *model.Snapshot, cfg EventConfig, now int64) int64 {
	t := int64(math.MaxInt64)
	opted := false
	for i := range snap.Nodes {
		m := snap.Nodes[i].MIG
		if m == nil {
			continue
		}
		opted = true
		for _, g := range m.Pending {
			if p, ok := m.Proposal(g); ok {
				t = min(t, p.At+cfg.LayoutDelay)
			}
		}
	}
	if opted {
		for i := range snap.Pending {
			if at := snap.Pending[i].CreatedAt + cfg.Layouts.MinWait; at > now {
				t = min(t, at)
			}
		}
	}
	return t
}

func mean(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	var s float64
	for _, x := range v {
		s += x
	}
	return s / float64(len(v))
}

// percentile is the nearest-rank percentile (the least value with at
// least p of the values at or below it); it sorts v.
func percentile(v []float64, p float64) float64 {
	if len(v) == 0 {
		return 0
	}
	slices.Sort(v)
	i := int(math.Ceil(p*float64(len(v)))) - 1
	return v[max(0, min(i, len(v)-1))]
}

func fillQueueStats(tr *Trace, pods []*simPod, preempted map[string]int, usage map[string]float64, res *Result) {
	type acc struct {
		pods, started, completed, jobs, jobsDone int
		wait, jct                                []float64
	}
	type job struct {
		queue                  string
		created, started, done int64
		running                bool // some pod never finished
	}
	by := map[string]*acc{}
	jobs := map[string]*job{}
	var order []string
	var names []string
	for _, p := range pods {
		q := p.tp.Queue
		if q == "" {
			q = queue.DefaultQueue
		}
		a := by[q]
		if a == nil {
			a = &acc{}
			by[q] = a
			names = append(names, q)
		}
		a.pods++
		if p.started >= 0 {
			a.started++
		} else {
			res.FailedPods++
		}
		if p.done >= 0 {
			a.completed++
		}
		j := jobs[p.group]
		if j == nil {
			j = &job{queue: q, created: p.tp.CreatedAt, started: -1, done: -1}
			jobs[p.group] = j
			order = append(order, p.group)
		}
		j.created = min(j.created, p.tp.CreatedAt)
		if p.started >= 0 && (j.started < 0 || p.started < j.started) {
			j.started = p.started
		}
		j.running = j.running || p.done < 0
		j.done = max(j.done, p.done)
	}
	var allWait, allJCT []float64
	for _, g := range order {
		j := jobs[g]
		a := by[j.queue]
		a.jobs++
		if j.started >= 0 {
			a.wait = append(a.wait, float64(j.started-j.created))
		}
		if !j.running {
			a.jobsDone++
			a.jct = append(a.jct, float64(j.done-j.created))
		}
	}
	ev := res.Event
	for _, n := range names {
		a := by[n]
		allWait, allJCT = append(allWait, a.wait...), append(allJCT, a.jct...)
		ev.Jobs += a.jobs
		ev.JobsCompleted += a.jobsDone
	}
	ev.JCTMean, ev.JCTP50, ev.JCTP95 = mean(allJCT), percentile(allJCT, 0.5), percentile(allJCT, 0.95)
	ev.WaitP50, ev.WaitP95 = percentile(allWait, 0.5), percentile(allWait, 0.95)
	slices.Sort(names)
	// Entitlement: guaranteed GPU shares when any are set, else weights.
	ent := map[string]float64{}
	var total float64
	for _, q := range tr.Queues {
		if q.GPUMilliGuaranteed() > 0 {
			ent[q.Name] = float64(q.GPUMilliGuaranteed())
		}
	}
	if len(ent) == 0 {
		w := map[string]float64{}
		for _, q := range tr.Queues {
			w[q.Name] = q.Weight
		}
		for _, n := range names {
			ent[n] = w[n]
			if ent[n] == 0 {
				ent[n] = 1
			}
		}
	}
	for _, n := range names {
		total += ent[n]
	}
	var allUse float64
	for _, n := range names {
		allUse += usage[n]
	}
	var sum, sumSq float64
	for _, n := range names {
		a := by[n]
		qs := QueueStats{Queue: n, Pods: a.pods, Started: a.started, Completed: a.completed, Jobs: a.jobs, JobsCompleted: a.jobsDone,
			WaitP50: percentile(a.wait, 0.5), WaitP90: percentile(a.wait, 0.9), WaitP95: percentile(a.wait, 0.95), WaitP99: percentile(a.wait, 0.99),
			JCTMean: mean(a.jct), JCTP50: percentile(a.jct, 0.5), JCTP90: percentile(a.jct, 0.9), JCTP95: percentile(a.jct, 0.95), JCTP99: percentile(a.jct, 0.99),
			Preemptions: preempted[n]}
		if allUse > 0 {
			qs.Share = usage[n] / allUse
		}
		if total > 0 {
			qs.Entitlement = ent[n] / total
		}
		if qs.Entitlement > 0 {
			x := qs.Share / qs.Entitlement
			sum += x
			sumSq += x * x
		}
		res.Event.Queues = append(res.Event.Queues, qs)
	}
	if sumSq > 0 {
		res.Event.JainFairness = sum * sum / (float64(len(names)) * sumSq)
	}
}
