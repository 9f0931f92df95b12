package placement_test

import (
	"fmt"
	"slices"
	"testing"

	"pgregory.net/rapid"

	"github.com/gpuplane/gpuplane/internal/scheduler/model"
	"github.com/gpuplane/gpuplane/internal/scheduler/placement"
	"github.com/gpuplane/gpuplane/internal/scheduler/schedtest"
)

var topoKeys = []string{"host", "zone", "rack"}

func genNodes(t *rapid.T) []model.Node {
	n := rapid.IntRange(1, 9).Draw(t, "nodes")
	out := make([]model.Node, n)
	for i := range out {
		l := map[string]string{"host": fmt.Sprintf("n%d", i)}
		if rapid.IntRange(0, 5).Draw(t, "zoneless") > 0 {
			l["zone"] = fmt.Sprintf("z%d", rapid.IntRange(0, 2).Draw(t, "zone"))
		}
		if rapid.Bool().Draw(t, "racked") {
			l["rack"] = fmt.Sprintf("r%d", rapid.IntRange(0, 3).Draw(t, "rack"))
		}
		l["pool"] = fmt.Sprintf("p%d", rapid.IntRange(0, 1).Draw(t, "pool"))
		out[i] = model.Node{Name: fmt.Sprintf("n%d", i), MilliCPU: 1 << 40, MemoryMiB: 1 << 40, Labels: l}
	}
	return out
}

func genSelector(t *rapid.T) *model.LabelSelector {
	switch rapid.IntRange(0, 6).Draw(t, "selKind") {
	case 0:
		return nil
	case 1:
		return &model.LabelSelector{}
	case 2:
		return &model.LabelSelector{MatchExpressions: []model.LabelRequirement{{Key: "app", Operator: model.OpNotIn, Values: []string{rapid.SampledFrom([]string{"a", "b"}).Draw(t, "v")}}}}
	case 3:
		return &model.LabelSelector{MatchExpressions: []model.LabelRequirement{{Key: "tier", Operator: rapid.SampledFrom([]string{model.OpExists, model.OpDoesNotExist}).Draw(t, "op")}}}
	}
	return &model.LabelSelector{MatchLabels: map[string]string{"app": rapid.SampledFrom([]string{"a", "b", "c"}).Draw(t, "app")}}
}

func genTerm(t *rapid.T) model.PodAffinityTerm {
	term := model.PodAffinityTerm{Selector: genSelector(t), TopologyKey: rapid.SampledFrom(topoKeys).Draw(t, "key")}
	switch rapid.IntRange(0, 3).Draw(t, "nsKind") {
	case 0:
		term.AllNamespaces = true
	case 1:
		term.Namespaces = []string{"ns1", "ns2"}
	default:
		term.Namespaces = []string{rapid.SampledFrom([]string{"ns1", "ns2"}).Draw(t, "ns")}
	}
	return term
}

func genReq(t *rapid.T) model.Request {
	r := model.Request{MilliCPU: 1, Namespace: rapid.SampledFrom([]string{"ns1", "ns2"}).Draw(t, "ns")}
	if rapid.IntRange(0, 4).Draw(t, "unlabelled") > 0 {
		r.Labels = map[string]string{"app": rapid.SampledFrom([]string{"a", "b", "c"}).Draw(t, "app")}
		if rapid.Bool().Draw(t, "tiered") {
			r.Labels["tier"] = "x"
		}
	}
	terms := func(name string) []model.PodAffinityTerm {
		var out []model.PodAffinityTerm
		for range rapid.IntRange(0, 2).Draw(t, name) {
			out = append(out, genTerm(t))
		}
		return out
	}
	if rapid.IntRange(0, 2).Draw(t, "affine") == 0 {
		r.Affinity = &model.PodAffinity{Required: terms("required"), RequiredAnti: terms("anti")}
	}
	for range rapid.IntRange(0, 2).Draw(t, "spread") {
		c := model.SpreadConstraint{MaxSkew: int32(rapid.IntRange(1, 2).Draw(t, "maxSkew")), TopologyKey: rapid.SampledFrom(topoKeys).Draw(t, "key"),
			Selector: genSelector(t), MinDomains: int32(rapid.IntRange(0, 4).Draw(t, "minDomains")), ScheduleAnyway: rapid.IntRange(0, 3).Draw(t, "soft") == 0}
		if rapid.Bool().Draw(t, "pooled") {
			c.Nodes = map[string]string{"pool": "p0"}
		}
		r.Spread = append(r.Spread, c)
	}
	return r
}

// TestPodConstraintsMatchOracle: after any sequence of assignments,
// releases and rollbacks, the index answers for every request and node
// what a brute-force reading of kube-scheduler's rules over every placed
// pod answers.
func TestPodConstraintsMatchOracle(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		nodes := genNodes(t)
		st := placement.NewState(nodes)
		var placed []schedtest.Placed
		type mark struct {
			m    placement.Mark
			snap []schedtest.Placed
		}
		var marks []mark
		probes := make([]model.Request, rapid.IntRange(1, 4).Draw(t, "probes"))
		for k := range probes {
			probes[k] = genReq(t)
		}
		check := func(step int) {
			for k := range probes {
				req := &probes[k]
				for i := range nodes {
					want := schedtest.PodConstraintReason(nodes, placed, req, i)
					if got := st.Why(i, req); got != want {
						t.Fatalf("step %d: probe %d on node %d: core says %q, oracle %q\nprobe %+v\nplaced %d pods", step, k, i, got, want, *req, len(placed))
					}
				}
			}
		}
		check(0)
		for step := 1; step <= 30; step++ {
			switch op := rapid.IntRange(0, 9).Draw(t, "op"); {
			case op < 5:
				req := genReq(t)
				// Some placed pods are being deleted: spread skips
				// them, affinity counts them.
				req.Terminating = rapid.IntRange(0, 3).Draw(t, "terminating") == 0
				i := rapid.IntRange(0, len(nodes)-1).Draw(t, "node")
				if err := st.Assign(i, &req, nil); err != nil {
					t.Fatal(err)
				}
				placed = append(placed, schedtest.Placed{Node: i, Req: &req})
			case op < 7 && len(placed) > 0:
				k := rapid.IntRange(0, len(placed)-1).Draw(t, "victim")
				st.Release(placed[k].Node, placed[k].Req, nil)
				placed = slices.Delete(slices.Clone(placed), k, k+1)
			case op == 7:
				marks = append(marks, mark{m: st.Checkpoint(), snap: slices.Clone(placed)})
			case op == 8 && len(marks) > 0:
				m := marks[len(marks)-1]
				marks = marks[:len(marks)-1]
				st.Rollback(m.m)
				placed = m.snap
			case op == 9 && rapid.Bool().Draw(t, "commit"):
				st.Commit()
				marks = nil
			}
			check(step)
		}
	})
}

// TestPodIndexRollback: what-if placements made after a checkpoint, and a
// constraint first asked about during them, leave no trace after the
// rollback.
func TestPodIndexRollback(t *testing.T) {
	nodes := []model.Node{
		{Name: "a", MilliCPU: 1000, MemoryMiB: 1000, Labels: map[string]string{"zone": "z0"}},
		{Name: "b", MilliCPU: 1000, MemoryMiB: 1000, Labels: map[string]string{"zone": "z1"}},
	}
	st := placement.NewState(nodes)
	web := model.Request{MilliCPU: 1, Namespace: "ns", Labels: map[string]string{"app": "web"}}
	repel := model.Request{MilliCPU: 1, Namespace: "ns", Affinity: &model.PodAffinity{RequiredAnti: []model.PodAffinityTerm{
		{Selector: &model.LabelSelector{MatchLabels: map[string]string{"app": "web"}}, Namespaces: []string{"ns"}, TopologyKey: "zone"}}}}
	if err := st.Assign(0, &web, nil); err != nil {
		t.Fatal(err)
	}
	mark := st.Checkpoint()
	if err := st.Assign(1, &web, nil); err != nil {
		t.Fatal(err)
	}
	if st.Allows(0, &repel) || st.Allows(1, &repel) {
		t.Fatal("web runs in both zones, yet the repelling pod is allowed")
	}
	// A pod carrying the anti-affinity is placed in the what-if too: web
	// is then repelled from its zone.
	guard := repel
	if err := st.Assign(1, &guard, nil); err != nil {
		t.Fatal(err)
	}
	st.Rollback(mark)
	if st.Allows(0, &repel) || !st.Allows(1, &repel) {
		t.Fatal("after the rollback zone z1 must be free of web again and z0 not")
	}
	if !st.Allows(1, &web) {
		t.Fatal("after the rollback no guard repels web from z1")
	}
}

// TestTerminatingPods: a pod being deleted still counts for affinity and
// anti-affinity, its own anti-affinity still repels, but no spread
// constraint counts it, as kube-scheduler's InterPodAffinity and
// PodTopologySpread read it; whether the constraint is first asked about
// before the pod is placed or after, and after the pod is released.
func TestTerminatingPods(t *testing.T) {
	nodes := []model.Node{
		{Name: "a", MilliCPU: 1000, MemoryMiB: 1000, Labels: map[string]string{"zone": "z0"}},
		{Name: "b", MilliCPU: 1000, MemoryMiB: 1000, Labels: map[string]string{"zone": "z1"}},
	}
	web := &model.LabelSelector{MatchLabels: map[string]string{"app": "web"}}
	spread := model.Request{MilliCPU: 1, Namespace: "ns", Labels: map[string]string{"app": "web"},
		Spread: []model.SpreadConstraint{{MaxSkew: 1, TopologyKey: "zone", Selector: web}}}
	near := model.Request{MilliCPU: 1, Namespace: "ns", Affinity: &model.PodAffinity{Required: []model.PodAffinityTerm{
		{Selector: web, Namespaces: []string{"ns"}, TopologyKey: "zone"}}}}
	away := model.Request{MilliCPU: 1, Namespace: "ns", Affinity: &model.PodAffinity{RequiredAnti: []model.PodAffinityTerm{
		{Selector: web, Namespaces: []string{"ns"}, TopologyKey: "zone"}}}}
	guard := model.Request{MilliCPU: 1, Namespace: "ns", Labels: map[string]string{"app": "guard"}, Terminating: true,
		Affinity: &model.PodAffinity{RequiredAnti: []model.PodAffinityTerm{{Selector: web, Namespaces: []string{"ns"}, TopologyKey: "zone"}}}}
	for _, askFirst := range []bool{false, true} {
		t.Run(fmt.Sprintf("asked first %t", askFirst), func(t *testing.T) {
			st := placement.NewState(nodes)
			if askFirst {
				for _, req := range []*model.Request{&spread, &near, &away} {
					st.Allows(0, req)
				}
			}
			// Two web pods leave zone z0, being deleted.
			leaving := model.Request{MilliCPU: 1, Namespace: "ns", Labels: map[string]string{"app": "web"}, Terminating: true}
			for range 2 {
				if err := st.Assign(0, &leaving, nil); err != nil {
					t.Fatal(err)
				}
			}
			if why := st.Why(0, &spread); why != "" {
				t.Errorf("spread to z0, where only terminating web pods run: %q, want allowed", why)
			}
			if why := st.Why(1, &near); why != placement.FilterPodAffinity {
				t.Errorf("affinity to web in z1: %q, want %q", why, placement.FilterPodAffinity)
			}
			if why := st.Why(0, &near); why != "" {
				t.Errorf("affinity to web in z0, where terminating web pods run: %q, want allowed", why)
			}
			if why := st.Why(0, &away); why != placement.FilterPodAntiAffinity {
				t.Errorf("anti-affinity to web in z0: %q, want %q", why, placement.FilterPodAntiAffinity)
			}
			// A running web pod in z1 counts for spread: z1 has one, z0 none.
			running := model.Request{MilliCPU: 1, Namespace: "ns", Labels: map[string]string{"app": "web"}}
			if err := st.Assign(1, &running, nil); err != nil {
				t.Fatal(err)
			}
			if why := st.Why(1, &spread); why != placement.FilterSpread {
				t.Errorf("spread to z1 with one web pod there and none counted in z0: %q, want %q", why, placement.FilterSpread)
			}
			// A terminating pod's own anti-affinity still repels web.
			if err := st.Assign(1, &guard, nil); err != nil {
				t.Fatal(err)
			}
			if why := st.Why(1, &running); why != placement.FilterExistingAntiAffinity {
				t.Errorf("web to z1 beside a terminating guard: %q, want %q", why, placement.FilterExistingAntiAffinity)
			}
			if why := st.Why(0, &running); why != "" {
				t.Errorf("web to z0: %q, want allowed", why)
			}
			st.Release(1, &guard, nil)
			for range 2 {
				st.Release(0, &leaving, nil)
			}
			if why := st.Why(0, &near); why != placement.FilterPodAffinity {
				t.Errorf("affinity to web in z0 once the terminating pods are gone: %q, want %q", why, placement.FilterPodAffinity)
			}
		})
	}
}
