package ui

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/gpuplane/gpuplane/internal/scheduler"
	"github.com/gpuplane/gpuplane/internal/scheduler/model"
)

// Verdicts of a what-if.
const (
	// FitsNow: the core places the group on the snapshot as it is (the
	// scheduler's next cycle should bind it).
	FitsNow = "fits-now"
	// FitsByEvicting: the core places it by evicting the named groups.
	FitsByEvicting = "fits-by-evicting"
	// FitsWhenEnds: the core places it once the named running groups end.
	FitsWhenEnds = "fits-when-ends"
	// FitsIfLent: the core places it once its queue may take more GPUs.
	FitsIfLent = "fits-if-lent"
	// NeverFits: the core says it can never start as it is.
	NeverFits = "never-fits"
	// NoAnswer: none of the changes tried places it.
	NoAnswer = "no-answer"
	// NotOffered: the scheduler does not offer the group to the core.
	NotOffered = "not-offered"
)

// WhatIf is the answer to "what would admit this group": every sentence
// in it is read off a decision of the scheduling core, run on the
// current snapshot and on changed copies of it.
type WhatIf struct {
	Group   string `json:"group"`
	Verdict string `json:"verdict"`
	// Summary is the answer in one sentence.
	Summary string `json:"summary"`
	// Reason is the core's reason the group waits now, with the filters
	// that refused nodes for its first pod.
	Reason   string              `json:"reason,omitempty"`
	Filtered []model.FilterCount `json:"filtered,omitempty"`
	// Runs counts the core's cycles the answer took.
	Runs   int   `json:"runs"`
	Millis int64 `json:"millis"`
}

// whatIfLimits bound the work of one answer: the running groups whose end
// is tried, and the reprieve passes after the first set found.
const (
	maxEndCandidates = 512
	maxReprieves     = 8
)

// running is a running group of the snapshot, with when it is expected
// to end (zero when unknown) and when it started.
type runningGroup struct {
	name    string
	queue   string
	gpus    float64
	started time.Time
	endsAt  time.Time
}

// whatIf answers for group on snap. ends gives a running group's
// expected end (zero when unknown); now is the snapshot's time. It runs a
// fresh core for each question, on copies of the snapshot's changed
// parts: the snapshot is not modified.
func whatIf(cfg scheduler.Config, snap *model.Snapshot, group string, held string, running []runningGroup, now time.Time) (WhatIf, error) {
	start := time.Now()
	w := WhatIf{Group: group}
	defer func() { w.Millis = time.Since(start).Milliseconds() }()
	at := slices.IndexFunc(snap.Pending, func(g model.PodGroup) bool { return g.Name == group })
	if at < 0 {
		w.Verdict = NotOffered
		if held != "" {
			w.Summary = "gpuplane-scheduler holds it back from the core: " + held
		} else {
			w.Summary = "it is not pending in the scheduler's view (bound since, or not the scheduler's)"
		}
		return w, nil
	}
	run := func(s *model.Snapshot) (model.Decisions, error) {
		w.Runs++
		core, err := scheduler.New(cfg)
		if err != nil {
			return model.Decisions{}, err
		}
		return core.Cycle(s)
	}
	base := *snap
	base.Pending = slices.Clone(snap.Pending)
	base.Pending[at].Explain = true
	d, err := run(&base)
	if err != nil {
		return w, fmt.Errorf("running the scheduling core: %w", err)
	}
	if nodes := boundNodes(d, group); nodes != "" {
		w.Verdict, w.Summary = FitsNow, "fits now, on "+nodes+": the scheduler's next cycle places it"
		return w, nil
	}
	if i := slices.IndexFunc(d.Holds, func(h model.Hold) bool { return h.Group == group }); i >= 0 {
		w.Verdict = FitsByEvicting
		w.Summary = "fits by evicting " + names(d.Holds[i].Victims, 6) + " (the core's preemption or reclaim; it binds once they exit)"
		return w, nil
	}
	u := unplacedOf(d, group)
	if u != nil {
		w.Reason, w.Filtered = u.Reason, u.Filtered
		switch u.Code {
		case model.UnplacedAboveQueueLimit, model.UnplacedAboveCapacity, model.UnplacedBadTopology:
			w.Verdict, w.Summary = NeverFits, "never fits: "+u.Reason
			return w, nil
		case model.UnplacedQueueLimit:
			return lend(w, &base, group, d, run)
		}
	}
	return whenEnds(w, &base, group, running, now, run)
}

// lend finds the fewest GPUs by which the limits over the group's queue
// must rise for the core to place it, and a queue with that much of its
// guarantee unused to lend them.
func lend(w WhatIf, snap *model.Snapshot, group string, d model.Decisions, run func(*model.Snapshot) (model.Decisions, error)) (WhatIf, error) {
	g := &snap.Pending[slices.IndexFunc(snap.Pending, func(g model.PodGroup) bool { return g.Name == group })]
	chain := map[string]bool{}
	parent := map[string]string{}
	for _, q := range snap.Queues {
		parent[q.Name] = q.Parent
	}
	for q, n := g.Queue, 0; q != "" && n < 64; q, n = parent[q], n+1 {
		chain[q] = true
	}
	need := 0
	for _, p := range g.Pods {
		need += max(p.Request.GPUs, p.Request.Replicas)
		if p.Request.GPUMilli > 0 || p.Request.MIGSlices > 0 {
			need++
		}
	}
	need = max(need, 1)
	raised := func(n int) *model.Snapshot {
		s := *snap
		s.Queues = slices.Clone(snap.Queues)
		for i := range s.Queues {
			if chain[s.Queues[i].Name] && s.Queues[i].Limit.GPUMilli > 0 {
				s.Queues[i].Limit.GPUMilli += int64(n) * model.MilliPerGPU
			}
		}
		return &s
	}
	places := func(n int) (bool, error) {
		d, err := run(raised(n))
		return boundNodes(d, group) != "", err
	}
	ok, err := places(need)
	if err != nil || !ok {
		if err != nil {
			return w, err
		}
		w.Verdict = NoAnswer
		w.Summary = fmt.Sprintf("waits on its queue's limit, and even %d more GPUs under the limit would not place it: %s", need, w.Reason)
		return w, nil
	}
	lo, hi := 1, need
	for lo < hi {
		mid := (lo + hi) / 2
		ok, err := places(mid)
		if err != nil {
			return w, err
		}
		if ok {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	lender, spare := "", int64(0)
	for _, q := range d.Queues {
		if chain[q.Name] {
			continue
		}
		if free := q.Guaranteed.GPUMilli - q.Usage.GPUMilli; free >= int64(lo)*model.MilliPerGPU && free > spare {
			lender, spare = q.Name, free
		}
	}
	w.Verdict = FitsIfLent
	if lender != "" {
		w.Summary = fmt.Sprintf("fits if queue %s lends %d GPU(s): it has %s GPU(s) of its guarantee unused, and queue %s's limit would have to allow %d more", lender, lo, milliGPUs(spare), g.Queue, lo)
	} else {
		w.Summary = fmt.Sprintf("fits if queue %s may take %d more GPU(s) above its limit; no other queue has that much of its guarantee unused to lend", g.Queue, lo)
	}
	return w, nil
}

// whenEnds finds the running groups whose end lets the core place the
// group: the candidates in the order they are expected to end (known
// deadlines first, then the longest running), the shortest prefix that
// places it (binary search), then each of them given back while the group
// still fits without it.
func whenEnds(w WhatIf, snap *model.Snapshot, group string, running []runningGroup, now time.Time, run func(*model.Snapshot) (model.Decisions, error)) (WhatIf, error) {
	// The group's own running members (a gang partly placed) stay.
	cands := slices.DeleteFunc(slices.Clone(running), func(r runningGroup) bool { return r.name == group })
	if len(cands) == 0 {
		w.Verdict = NoAnswer
		w.Summary = "nothing else runs, and it does not fit: " + w.Reason
		return w, nil
	}
	slices.SortFunc(cands, func(a, b runningGroup) int {
		switch {
		case !a.endsAt.IsZero() && !b.endsAt.IsZero():
			return cmp.Or(a.endsAt.Compare(b.endsAt), cmp.Compare(a.name, b.name))
		case !a.endsAt.IsZero():
			return -1
		case !b.endsAt.IsZero():
			return 1
		}
		return cmp.Or(a.started.Compare(b.started), cmp.Compare(a.name, b.name))
	})
	if len(cands) > maxEndCandidates {
		cands = cands[:maxEndCandidates]
	}
	places := func(gone map[string]bool) (bool, string, error) {
		d, err := run(without(snap, gone))
		if err != nil {
			return false, "", err
		}
		if boundNodes(d, group) != "" {
			return true, "", nil
		}
		if u := unplacedOf(d, group); u != nil {
			return false, u.Reason, nil
		}
		return false, "", nil
	}
	set := func(k int) map[string]bool {
		m := make(map[string]bool, k)
		for _, c := range cands[:k] {
			m[c.name] = true
		}
		return m
	}
	ok, why, err := places(set(len(cands)))
	if err != nil {
		return w, err
	}
	if !ok {
		w.Verdict = NoAnswer
		w.Summary = fmt.Sprintf("does not fit even were the %d running workloads gone", len(cands))
		if why != "" {
			w.Summary += ": " + why
		}
		return w, nil
	}
	lo, hi := 1, len(cands)
	for lo < hi {
		mid := (lo + hi) / 2
		ok, _, err := places(set(mid))
		if err != nil {
			return w, err
		}
		if ok {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	gone := set(lo)
	// Give back the earlier ones while it still fits without them.
	for i := 0; i < lo-1 && i < maxReprieves; i++ {
		delete(gone, cands[i].name)
		ok, _, err := places(gone)
		if err != nil {
			return w, err
		}
		if !ok {
			gone[cands[i].name] = true
		}
	}
	var ending []runningGroup
	for _, c := range cands[:lo] {
		if gone[c.name] {
			ending = append(ending, c)
		}
	}
	w.Verdict = FitsWhenEnds
	w.Summary = "fits when " + describeEnds(ending, now)
	return w, nil
}

func describeEnds(ending []runningGroup, now time.Time) string {
	var parts []string
	for i, e := range ending {
		if i == 6 {
			parts = append(parts, fmt.Sprintf("%d more", len(ending)-6))
			break
		}
		parts = append(parts, "job "+e.name)
	}
	verb := "ends"
	if len(ending) > 1 {
		verb = "end"
	}
	last := ending[len(ending)-1]
	for _, e := range ending {
		if e.endsAt.IsZero() {
			last = e
			break
		}
		if e.endsAt.After(last.endsAt) {
			last = e
		}
	}
	s := strings.Join(parts, ", ") + " " + verb
	switch {
	case !last.endsAt.IsZero():
		s += fmt.Sprintf(" (in about %s, by its activeDeadlineSeconds)", roundDuration(last.endsAt.Sub(now)))
	default:
		s += fmt.Sprintf(" (%s has run %s and sets no deadline)", last.name, roundDuration(now.Sub(last.started)))
	}
	return s
}

func roundDuration(d time.Duration) string {
	switch {
	case d < time.Minute:
		return "under a minute"
	case d < 2*time.Hour:
		return fmt.Sprintf("%d min", int(d.Round(time.Minute).Minutes()))
	default:
		return fmt.Sprintf("%.1f h", d.Hours())
	}
}

// without is snap with the allocations of the gone groups removed (new
// chunks for the nodes that held them; the others shared).
func without(snap *model.Snapshot, gone map[string]bool) *model.Snapshot {
	s := *snap
	s.RunningByNode = slices.Clone(snap.RunningByNode)
	for i, chunk := range s.RunningByNode {
		if !slices.ContainsFunc(chunk, func(a model.Allocation) bool { return gone[a.Group] }) {
			continue
		}
		s.RunningByNode[i] = slices.DeleteFunc(slices.Clone(chunk), func(a model.Allocation) bool { return gone[a.Group] })
	}
	return &s
}

// boundNodes lists the nodes the core bound group's pods to, "" when it
// bound none.
func boundNodes(d model.Decisions, group string) string {
	seen := map[string]bool{}
	var nodes []string
	for _, b := range d.Binds {
		if b.Group == group && !seen[b.Node] {
			seen[b.Node] = true
			nodes = append(nodes, b.Node)
		}
	}
	return names(nodes, 6)
}

func unplacedOf(d model.Decisions, group string) *model.Unplaced {
	for i := range d.Unplaced {
		if d.Unplaced[i].Group == group {
			return &d.Unplaced[i]
		}
	}
	return nil
}

func names(xs []string, most int) string {
	if len(xs) > most {
		return strings.Join(xs[:most], ", ") + fmt.Sprintf(" and %d more", len(xs)-most)
	}
	return strings.Join(xs, ", ")
}

func milliGPUs(m int64) string {
	return strings.TrimSuffix(strings.TrimRight(fmt.Sprintf("%.3f", float64(m)/model.MilliPerGPU), "0"), ".")
}
