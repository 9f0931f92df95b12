package scheduler_test

import (
	"fmt"
	"testing"

	"pgregory.net/rapid"

	"github.com/gpuplane/gpuplane/internal/scheduler"
	"github.com/gpuplane/gpuplane/internal/scheduler/model"
	"github.com/gpuplane/gpuplane/internal/scheduler/placement"
	"github.com/gpuplane/gpuplane/internal/scheduler/schedtest"
)

func genConstrainedRequest(t *rapid.T) model.Request {
	req := schedtest.GPU(rapid.IntRange(0, 2).Draw(t, "gpus"), 1000)
	req.Namespace = rapid.SampledFrom([]string{"ns1", "ns2"}).Draw(t, "ns")
	req.Labels = map[string]string{"app": rapid.SampledFrom([]string{"a", "b", "c"}).Draw(t, "app")}
	sel := func() *model.LabelSelector {
		if rapid.IntRange(0, 4).Draw(t, "notIn") == 0 {
			return &model.LabelSelector{MatchExpressions: []model.LabelRequirement{{Key: "app", Operator: model.OpNotIn, Values: []string{"a"}}}}
		}
		return &model.LabelSelector{MatchLabels: map[string]string{"app": rapid.SampledFrom([]string{"a", "b", "c"}).Draw(t, "selApp")}}
	}
	term := func() model.PodAffinityTerm {
		return model.PodAffinityTerm{Selector: sel(), Namespaces: []string{req.Namespace}, AllNamespaces: rapid.IntRange(0, 3).Draw(t, "allNs") == 0,
			TopologyKey: rapid.SampledFrom([]string{hostKey, zoneKey}).Draw(t, "key")}
	}
	switch rapid.IntRange(0, 4).Draw(t, "constraint") {
	case 0:
		req.Affinity = &model.PodAffinity{RequiredAnti: []model.PodAffinityTerm{term()}}
	case 1:
		req.Affinity = &model.PodAffinity{Required: []model.PodAffinityTerm{term()}}
	case 2:
		req.Spread = []model.SpreadConstraint{{MaxSkew: int32(rapid.IntRange(1, 2).Draw(t, "maxSkew")), TopologyKey: rapid.SampledFrom([]string{hostKey, zoneKey}).Draw(t, "key"),
			Selector: sel(), MinDomains: int32(rapid.IntRange(0, 4).Draw(t, "minDomains"))}}
	case 3:
		req.Affinity = &model.PodAffinity{Preferred: []model.PodAffinityTerm{{Selector: sel(), Namespaces: []string{req.Namespace}, TopologyKey: hostKey, Weight: 5}}}
	}
	return req
}

// TestPropertyPodConstraintsHold: over random cycles of random gangs with
// affinity, anti-affinity and spread, no pod is ever bound where a
// required constraint refuses it, judged by the brute-force oracle
// against the pods running before the cycle and those bound before it in
// the cycle. A cycle that evicts, or holds room for waiting preemptors,
// is judged on anti-affinity alone, with the evicted pods gone and the
// held ones present (the oracle does not replay when each happened).
func TestPropertyPodConstraintsHold(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		nodes := zonedNodes(rapid.IntRange(1, 6).Draw(t, "nodes"), rapid.IntRange(1, 3).Draw(t, "zones"), 2)
		snap := model.Snapshot{Nodes: nodes, Budget: model.DisruptionBudget{MaxEvictions: rapid.SampledFrom([]int{0, 0, -1}).Draw(t, "budget")}}
		h, err := schedtest.NewHarness(snap, scheduler.Config{})
		if err != nil {
			t.Fatal(err)
		}
		index := map[string]int{}
		for i := range nodes {
			index[nodes[i].Name] = i
		}
		next := 0
		for cycle := range 4 {
			for range rapid.IntRange(0, 4).Draw(t, "arrive") {
				next++
				req := genConstrainedRequest(t)
				g := schedtest.Group(fmt.Sprintf("g%d", next)).Priority(int32(rapid.IntRange(0, 2).Draw(t, "prio"))).Created(int64(next)).
					Pods(rapid.IntRange(1, 3).Draw(t, "size"), req).Obj()
				h.Snap.Pending = append(h.Snap.Pending, g)
			}
			reqOf := map[string]*model.Request{}
			for gi := range h.Snap.Pending {
				for pi := range h.Snap.Pending[gi].Pods {
					reqOf[h.Snap.Pending[gi].Pods[pi].Name] = &h.Snap.Pending[gi].Pods[pi].Request
				}
			}
			var placed []schedtest.Placed
			for a := range h.Snap.AllRunning() {
				placed = append(placed, schedtest.Placed{Node: index[a.Node], Req: &a.Request})
			}
			holdsBefore := h.Snap.Holds
			before := h.Snap
			d, err := h.Sched.Cycle(&before)
			if err != nil {
				t.Fatal(err)
			}
			exact := len(d.Evictions) == 0 && len(holdsBefore) == 0 && len(d.Holds) == 0
			if !exact {
				evicted := map[string]bool{}
				for _, e := range d.Evictions {
					evicted[e.Pod] = true
				}
				placed = placed[:0]
				for a := range h.Snap.AllRunning() {
					if !evicted[a.Pod] {
						placed = append(placed, schedtest.Placed{Node: index[a.Node], Req: &a.Request})
					}
				}
				for _, hd := range d.Holds {
					for _, b := range hd.Plan {
						placed = append(placed, schedtest.Placed{Node: index[b.Node], Req: reqOf[b.Pod]})
					}
				}
			}
			for _, b := range d.Binds {
				req := reqOf[b.Pod]
				why := schedtest.PodConstraintReason(nodes, placed, req, index[b.Node])
				if !exact && why != placement.FilterPodAntiAffinity && why != placement.FilterExistingAntiAffinity {
					why = ""
				}
				if why != "" {
					t.Fatalf("cycle %d: %s bound to %s, which %s refuses", cycle, b.Pod, b.Node, why)
				}
				placed = append(placed, schedtest.Placed{Node: index[b.Node], Req: req})
			}
			h.Log = append(h.Log, d)
			if err := model.Apply(&h.Snap, &d, int64(cycle+1)); err != nil {
				t.Fatal(err)
			}
			// Some running pods end.
			run := schedtest.Running(&h.Snap)
			keep := run[:0]
			for _, a := range run {
				if rapid.IntRange(0, 4).Draw(t, "ends") > 0 {
					keep = append(keep, a)
				}
			}
			h.Snap.RunningByNode = schedtest.OnNodes(nodes, keep...)
		}
	})
}
