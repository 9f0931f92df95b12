package placement

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/gpuplane/gpuplane/internal/scheduler/model"
)

func gpuNode(name string, cpu int64, gpus int) model.Node {
	n := model.Node{Name: name, MilliCPU: cpu, MemoryMiB: 1 << 20}
	for g := range gpus {
		n.GPUs = append(n.GPUs, model.GPU{Index: g, Model: "T4"})
	}
	return n
}

// bestFitPlacer is a best-fit Placer on st.
func bestFitPlacer(t *testing.T, st *State) *Placer {
	t.Helper()
	return policyPlacer(t, st, "bestfit")
}

// policyPlacer is a Placer on st under the policy named.
func policyPlacer(t *testing.T, st *State, policy string) *Placer {
	t.Helper()
	pol, err := NewPolicy(policy, PolicyEnv{})
	if err != nil {
		t.Fatal(err)
	}
	p, err := NewPlacer(st, pol)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// placedPod is a pod a test assigned to a state, to release later.
type placedPod struct {
	node   int
	req    *model.Request
	shares []model.GPUShare
}

func TestStateAssignRollback(t *testing.T) {
	st := NewState([]model.Node{gpuNode("a", 8000, 2)})
	req := &model.Request{MilliCPU: 1000, GPUMilli: 600}
	m := st.Checkpoint()
	if err := st.Assign(0, req, []model.GPUShare{{Index: 1, Milli: 600}}); err != nil {
		t.Fatal(err)
	}
	if err := st.Assign(0, req, []model.GPUShare{{Index: 1, Milli: 600}}); err == nil {
		t.Fatal("second 600 milli share of GPU 1 was accepted: over-allocation")
	}
	if got := st.Nodes[0].GPUFree[1]; got != 400 {
		t.Fatalf("GPU 1 free = %d, want 400", got)
	}
	st.Rollback(m)
	if got, cpu := st.Nodes[0].GPUFree[1], st.Nodes[0].FreeCPU; got != 1000 || cpu != 8000 {
		t.Fatalf("after rollback GPU 1 free = %d, cpu = %d; want 1000, 8000", got, cpu)
	}
}

func TestOptions(t *testing.T) {
	st := NewState([]model.Node{gpuNode("a", 8000, 4)})
	_ = st.Assign(0, &model.Request{GPUMilli: 500}, []model.GPUShare{{Index: 0, Milli: 500}})
	_ = st.Assign(0, &model.Request{GPUMilli: 700}, []model.GPUShare{{Index: 2, Milli: 700}})
	tests := []struct {
		name string
		req  model.Request
		want int // number of options
		gpus int // GPUs in the first option
	}{
		{"cpu only", model.Request{MilliCPU: 100}, 1, 0},
		{"share fits 3 distinct GPUs", model.Request{GPUMilli: 300}, 3, 1},
		{"share fits only idle GPUs", model.Request{GPUMilli: 600}, 1, 1},
		{"two whole GPUs", model.Request{GPUs: 2}, 1, 2},
		{"three whole GPUs do not fit", model.Request{GPUs: 3}, 0, 0},
		{"too much cpu", model.Request{MilliCPU: 9000}, 0, 0},
		{"wrong model", model.Request{GPUs: 1, GPUModels: []string{"A100"}}, 0, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			opts := st.Options(0, &tc.req)
			if len(opts) != tc.want {
				t.Fatalf("got %d options %+v, want %d", len(opts), opts, tc.want)
			}
			if len(opts) > 0 && len(opts[0].Shares) != tc.gpus {
				t.Fatalf("first option uses %d GPUs, want %d", len(opts[0].Shares), tc.gpus)
			}
			for _, o := range opts {
				if !st.Fits(0, &tc.req, o.Shares) {
					t.Fatalf("option %+v does not fit", o)
				}
			}
		})
	}
}

// A withdrawn GPU (quarantined by its node) is offered to no request,
// whole, shared or MIG, and the node's other GPUs keep their indexes.
func TestWithdrawnGPU(t *testing.T) {
	n := gpuNode("a", 8000, 4)
	n.GPUs[1].Withdrawn = true
	st := NewState([]model.Node{n})
	for _, req := range []model.Request{{GPUs: 1}, {GPUs: 3}, {GPUMilli: 300}} {
		for _, o := range st.Options(0, &req) {
			for _, sh := range o.Shares {
				if sh.Index == 1 {
					t.Fatalf("request %+v was offered withdrawn GPU 1: %+v", req, o)
				}
			}
		}
	}
	if opts := st.Options(0, &model.Request{GPUs: 4}); len(opts) != 0 {
		t.Fatalf("four whole GPUs on a node with one withdrawn: %+v", opts)
	}
	mig := gpuNode("m", 8000, 1)
	mig.GPUs[0].MIGSlices, mig.GPUs[0].Withdrawn = 7, true
	if opts := NewState([]model.Node{mig}).Options(0, &model.Request{MIGSlices: 1}); len(opts) != 0 {
		t.Fatalf("a MIG instance on a withdrawn GPU: %+v", opts)
	}
}

// A GPU its node hands out as 4 replicas under nvidia.com/gpu takes four
// shares at most, however small, and only shares asked through that name.
func TestSharesAsReplicas(t *testing.T) {
	n := gpuNode("a", 8000, 1)
	n.GPUs[0].ShareResource, n.GPUs[0].MinShareMilli = "nvidia.com/gpu", 250
	st := NewState([]model.Node{n})
	small := &model.Request{GPUMilli: 100, ShareResource: "nvidia.com/gpu"}
	for i := range 4 {
		opts := st.Options(0, small)
		if len(opts) != 1 || opts[0].Shares[0].Milli != 250 {
			t.Fatalf("share %d: options %+v, want one taking a replica (250)", i, opts)
		}
		if err := st.Assign(0, small, opts[0].Shares); err != nil {
			t.Fatal(err)
		}
	}
	if opts := st.Options(0, small); len(opts) != 0 {
		t.Fatalf("a fifth share on 4 replicas: options %+v", opts)
	}
	renamed := &model.Request{GPUMilli: 100, ShareResource: "nvidia.com/gpu.shared"}
	if StaticFits(&n, renamed) {
		t.Fatal("a share asked through nvidia.com/gpu.shared fits a GPU shared under nvidia.com/gpu")
	}
}

// Whole GPUs asked through a resource that shares them
// (nvidia.com/gpu.shared: a GPU's worth of replicas) go only to GPUs
// shared under it: a node with plain GPUs does not advertise it.
func TestWholeGPUsOfASharingResource(t *testing.T) {
	plain := gpuNode("plain", 8000, 2)
	shared := gpuNode("shared", 8000, 2)
	for g := range shared.GPUs {
		shared.GPUs[g].ShareResource, shared.GPUs[g].MinShareMilli = "nvidia.com/gpu.shared", 500
	}
	st := NewState([]model.Node{plain, shared})
	req := &model.Request{GPUs: 1, ShareResource: "nvidia.com/gpu.shared"}
	if StaticFits(&plain, req) || st.Options(0, req) != nil || st.Why(0, req) == "" {
		t.Fatalf("whole GPUs of nvidia.com/gpu.shared fit plain GPUs: options %+v", st.Options(0, req))
	}
	if !StaticFits(&shared, req) || st.Options(1, req) == nil {
		t.Fatalf("whole GPUs of nvidia.com/gpu.shared do not fit GPUs shared under it: %q", st.Why(1, req))
	}
	if whole := (&model.Request{GPUs: 1}); st.Options(0, whole) == nil {
		t.Fatalf("a whole GPU asking no resource does not fit plain GPUs: %q", st.Why(0, whole))
	}
}

func TestFGDNodeFrag(t *testing.T) {
	n := gpuNode("a", 10000, 2)
	// Half the pods want 500 milli, half a whole GPU.
	f, err := NewFGD([]Target{{Req: model.Request{MilliCPU: 1000, GPUMilli: 500}, P: 1}, {Req: model.Request{MilliCPU: 1000, GPUs: 1}, P: 1}})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		cpu  int64
		free []int64
		want float64
	}{
		{"idle node has no fragmentation", 10000, []int64{1000, 1000}, 0},
		{"300 left is a fragment for both types", 10000, []int64{300, 1000}, 300},
		{"600 left is a fragment only for whole GPUs", 10000, []int64{600, 0}, 0.5*0 + 0.5*600},
		{"no cpu strands everything", 0, []int64{600, 1000}, 1600},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := f.NodeFrag(&n, tc.cpu, tc.free); got != tc.want {
				t.Fatalf("NodeFrag = %g, want %g", got, tc.want)
			}
		})
	}
}

func TestPoliciesChoose(t *testing.T) {
	// Node 0 has a half-used GPU, node 1 is idle.
	nodes := []model.Node{gpuNode("used", 16000, 2), gpuNode("idle", 16000, 2)}
	targets := []Target{{Req: model.Request{GPUMilli: 500, MilliCPU: 1000}, P: 1}}
	tests := []struct {
		policy   string
		wantNode int
		wantGPU  int
	}{
		{"bestfit", 0, 0},
		{"gpupacking", 0, 0},
		{"fgd", 0, 0},
		{DefaultPolicy, 0, 0},
		{"spread", 1, 0},
		{"firstfit", 0, 0},
	}
	for _, tc := range tests {
		t.Run(tc.policy, func(t *testing.T) {
			st := NewState(nodes)
			_ = st.Assign(0, &model.Request{GPUMilli: 500}, []model.GPUShare{{Index: 0, Milli: 500}})
			pol, err := NewPolicy(tc.policy, PolicyEnv{Targets: targets, Seed: 1})
			if err != nil {
				t.Fatal(err)
			}
			pl, err := NewPlacer(st, pol)
			if err != nil {
				t.Fatal(err)
			}
			o, ok := pl.Place(&model.Request{GPUMilli: 500, MilliCPU: 1000})
			if !ok {
				t.Fatal("no placement")
			}
			if o.Node != tc.wantNode || o.Shares[0].Index != tc.wantGPU {
				t.Fatalf("placed on node %d GPU %d, want node %d GPU %d", o.Node, o.Shares[0].Index, tc.wantNode, tc.wantGPU)
			}
		})
	}
}

func TestNewPolicyErrors(t *testing.T) {
	for _, spec := range []string{"nope", "custom:fgd", "custom:bestfit=-1", "custom:bestfit=x"} {
		t.Run(spec, func(t *testing.T) {
			if _, err := NewPolicy(spec, PolicyEnv{Targets: []Target{{P: 1}}}); err == nil {
				t.Fatalf("NewPolicy(%q) succeeded, want an error", spec)
			}
		})
	}
	if _, err := NewPolicy("fgd", PolicyEnv{}); err == nil {
		t.Fatal("fgd without targets succeeded, want an error")
	}
}

// TestLegacyDefaultPolicyName checks that configs naming the default policy
// by its earlier name get the same policy.
func TestLegacyDefaultPolicyName(t *testing.T) {
	env := PolicyEnv{Targets: []Target{{Req: model.Request{GPUMilli: 500, MilliCPU: 1000}, P: 1}}}
	got, err := NewPolicy("gpuplane", env)
	if err != nil {
		t.Fatal(err)
	}
	want, err := NewPolicy(DefaultPolicy, env)
	if err != nil {
		t.Fatal(err)
	}
	if got.Name != DefaultPolicy || len(got.Scorers) != len(want.Scorers) {
		t.Fatalf("NewPolicy(\"gpuplane\") = %s with %d scorers, want %s with %d", got.Name, len(got.Scorers), want.Name, len(want.Scorers))
	}
	for i := range got.Scorers {
		if got.Scorers[i].Name() != want.Scorers[i].Name() || got.Scorers[i].Weight != want.Scorers[i].Weight {
			t.Fatalf("scorer %d: %s x %g, want %s x %g", i, got.Scorers[i].Name(), got.Scorers[i].Weight, want.Scorers[i].Name(), want.Scorers[i].Weight)
		}
	}
}

// TestPlacerMatchesScan checks the incremental, memoised placer against a
// plain scan of every option on random clusters and workloads.
func TestPlacerMatchesScan(t *testing.T) {
	for _, policy := range []string{"fgd", "bestfit", "gpupacking", "dotproduct", "gpuplane", "firstfit", "gpuclustering"} {
		t.Run(policy, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(7, 7))
			var nodes []model.Node
			for i := range 40 {
				nodes = append(nodes, gpuNode("n", int64(8000+rng.IntN(4)*8000), []int{1, 2, 4, 8}[i%4]))
			}
			shapes := []model.Request{{MilliCPU: 2000, GPUMilli: 300}, {MilliCPU: 4000, GPUMilli: 500}, {MilliCPU: 6000, GPUs: 1},
				{MilliCPU: 8000, GPUs: 2}, {MilliCPU: 3000}, {MilliCPU: 1000, GPUMilli: 810}}
			var targets []Target
			for _, s := range shapes {
				targets = append(targets, Target{Req: s, P: 1})
			}
			pol, _ := NewPolicy(policy, PolicyEnv{Targets: targets})
			fast, slow := NewState(nodes), NewState(nodes)
			pf, _ := NewPlacer(fast, pol)
			ps := &Placer{st: slow, pol: pol}
			for k := range 400 {
				// Now and then a few nodes are closed, as a cycle keeps
				// them, or all are opened, as a cycle ends: the placer's
				// caches and memo must follow.
				switch rng.IntN(20) {
				case 0:
					fast.Open()
					slow.Open()
				case 1, 2:
					i := rng.IntN(len(nodes))
					fast.Close(i)
					slow.Close(i)
				}
				req := shapes[rng.IntN(len(shapes))]
				a, okA := pf.Place(&req)
				b, okB := ps.scan(&req)
				if okA != okB || a.Node != b.Node || len(a.Shares) != len(b.Shares) {
					t.Fatalf("pod %d: placer chose %+v (%v), scan chose %+v (%v)", k, a, okA, b, okB)
				}
				if okA {
					if err := fast.Assign(a.Node, &req, a.Shares); err != nil {
						t.Fatal(err)
					}
					if err := slow.Assign(b.Node, &req, b.Shares); err != nil {
						t.Fatal(err)
					}
				}
			}
		})
	}
}

func TestTargetsFrom(t *testing.T) {
	reqs := []model.Request{{GPUMilli: 500}, {GPUMilli: 500}, {GPUMilli: 500}, {GPUs: 1}}
	ts, err := TargetsFrom(reqs, 0.7)
	if err != nil {
		t.Fatal(err)
	}
	if len(ts) != 1 || ts[0].P != 1 || ts[0].Req.GPUMilli != 500 {
		t.Fatalf("targets at 70%% popularity = %+v, want only the 500-milli type with share 1", ts)
	}
	ts, _ = TargetsFrom(reqs, 1)
	if len(ts) != 2 || ts[0].P != 0.75 {
		t.Fatalf("targets = %+v, want two types, the first with share 0.75", ts)
	}
	if _, err := TargetsFrom(nil, 1); err == nil {
		t.Fatal("empty workload accepted")
	}
}

func TestMemoryOnlyShareBlocksWholeGPU(t *testing.T) {
	n := gpuNode("a", 8000, 1)
	n.GPUs[0].MemoryMiB = 16384
	st := NewState([]model.Node{n})
	share := &model.Request{GPUMemoryMiB: 4096}
	opts := st.Options(0, share)
	if len(opts) != 1 {
		t.Fatalf("memory-only share: %d options, want 1", len(opts))
	}
	if err := st.Assign(0, share, opts[0].Shares); err != nil {
		t.Fatal(err)
	}
	if got := st.Options(0, &model.Request{GPUs: 1}); len(got) != 0 {
		t.Fatalf("whole GPU offered while 4 GiB of it are taken: %+v", got)
	}
}

func TestStaticFits(t *testing.T) {
	pool := gpuNode("pool", 8000, 2)
	pool.Labels = map[string]string{"pool": "batch"}
	pool.Taints = []model.Taint{{Key: "pool", Value: "batch", Effect: "NoSchedule"}}
	mig := gpuNode("mig", 8000, 2)
	for g := range mig.GPUs {
		mig.GPUs[g].MIGSlices = 7
	}
	plain := gpuNode("plain", 8000, 2)
	sharesOnly, wholeOnly, layout := gpuNode("shares-only", 8000, 2), gpuNode("whole-only", 8000, 2), gpuNode("layout", 8000, 2)
	for g := range 2 {
		sharesOnly.GPUs[g].SharesOnly, wholeOnly.GPUs[g].WholeOnly = true, true
		layout.GPUs[g].MIGSlices, layout.GPUs[g].MIGInstanceSlices = 7, 1
	}
	cordoned := gpuNode("cordoned", 8000, 2)
	cordoned.Unschedulable = true
	inPool := func(r model.Request) model.Request {
		r.NodeSelector = map[string]string{"pool": "batch"}
		r.Tolerations = []model.Toleration{{Key: "pool", Exists: true}}
		return r
	}
	tests := []struct {
		name string
		node model.Node
		req  model.Request
		want bool
	}{
		{"whole GPUs", plain, model.Request{GPUs: 2}, true},
		{"more GPUs than the node has", plain, model.Request{GPUs: 3}, false},
		{"more CPU than the node has", plain, model.Request{MilliCPU: 9000}, false},
		{"unschedulable node", cordoned, model.Request{GPUs: 1}, false},
		{"selector does not match", plain, inPool(model.Request{GPUs: 1}), false},
		{"taint not tolerated", pool, model.Request{GPUs: 1}, false},
		{"selector and toleration", pool, inPool(model.Request{GPUs: 1}), true},
		{"PreferNoSchedule taint ignored", model.Node{Name: "soft", MilliCPU: 1000, Taints: []model.Taint{{Key: "k", Effect: "PreferNoSchedule"}}}, model.Request{MilliCPU: 100}, true},
		{"GPU model excluded", plain, model.Request{GPUs: 1, GPUModels: []string{"A100"}}, false},
		{"GPU model allowed", plain, model.Request{GPUs: 1, GPUModels: []string{"A100", "T4"}}, true},
		{"whole GPU on MIG GPUs", mig, model.Request{GPUs: 1}, false},
		{"share on MIG GPUs", mig, model.Request{GPUMilli: 500}, false},
		{"MIG instance on MIG GPUs", mig, model.Request{MIGSlices: 3}, true},
		{"MIG instance larger than a GPU", mig, model.Request{MIGSlices: 8}, false},
		{"MIG instance on non-MIG GPUs", plain, model.Request{MIGSlices: 1}, false},
		{"share on non-MIG GPUs", plain, model.Request{GPUMilli: 500}, true},
		{"CPU-only pod on a MIG node", mig, model.Request{MilliCPU: 100}, true},
		{"whole GPU on GPUs offered as shares", sharesOnly, model.Request{GPUs: 1}, false},
		{"share on GPUs offered as shares", sharesOnly, model.Request{GPUMilli: 250}, true},
		{"share on GPUs offered whole", wholeOnly, model.Request{GPUMilli: 250}, false},
		{"whole GPUs on GPUs offered whole", wholeOnly, model.Request{GPUs: 2}, true},
		{"MIG instance of the layout's size", layout, model.Request{MIGSlices: 1}, true},
		{"MIG instance the layout does not have", layout, model.Request{MIGSlices: 3}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := StaticFits(&tc.node, &tc.req); got != tc.want {
				t.Fatalf("StaticFits(%s, %+v) = %v, want %v", tc.node.Name, tc.req, got, tc.want)
			}
		})
	}
}

func TestChangeLogTrimmed(t *testing.T) {
	pol, err := NewPolicy("bestfit", PolicyEnv{Targets: []Target{{Req: model.Request{GPUs: 1}, P: 1}}})
	if err != nil {
		t.Fatal(err)
	}
	st := NewState([]model.Node{gpuNode("a", 8000, 2), gpuNode("b", 8000, 2)})
	p, err := NewPlacer(st, pol)
	if err != nil {
		t.Fatal(err)
	}
	req := &model.Request{GPUs: 1}
	o, ok := p.Place(req)
	if !ok {
		t.Fatal("nothing placed on an empty cluster")
	}
	// Churn on the other node until Commit trims the log.
	other := 1 - o.Node
	share := []model.GPUShare{{Index: 0, Milli: 1000}}
	for range changeLogMin {
		_ = st.Assign(other, req, share)
		st.Release(other, req, share)
	}
	// The chosen node fills up; the placer, now behind the log, must see it.
	_ = st.Assign(o.Node, req, []model.GPUShare{{Index: 0, Milli: 1000}})
	_ = st.Assign(o.Node, req, []model.GPUShare{{Index: 1, Milli: 1000}})
	st.Commit()
	if st.changedBase == 0 || len(st.changed) != 0 {
		t.Fatalf("log of %d changes from %d not trimmed", len(st.changed), st.changedBase)
	}
	if got, ok := p.Place(req); !ok || got.Node != other {
		t.Fatalf("placed on %d (%v) after node %d filled up, want %d", got.Node, ok, o.Node, other)
	}
}

// TestCommitLetsJournalGo: Commit clears the journal's entries, which
// keep shares alive; it keeps a large array while cycles use it and lets
// it go after journalIdle commits that hardly do. Rollback after a
// Commit still undoes exactly what came after it.
func TestCommitLetsJournalGo(t *testing.T) {
	st := NewState([]model.Node{gpuNode("a", 8000, 2)})
	req := &model.Request{GPUs: 1}
	share := []model.GPUShare{{Index: 0, Milli: 1000}}
	churn := func(n int) {
		for range n {
			_ = st.Assign(0, req, share)
			st.Release(0, req, share)
		}
	}
	churn(journalKeep)
	st.Commit()
	large := cap(st.journal)
	for i, c := range st.journal[:large] {
		if c.shares != nil {
			t.Fatalf("journal entry %d still holds shares %v after Commit", i, c.shares)
		}
	}
	// Cycles as large keep the array: no growing it again each cycle.
	for range 2 * journalIdle {
		churn(journalKeep)
		st.Commit()
	}
	if cap(st.journal) != large {
		t.Fatalf("journal capacity %d after cycles as large, want %d kept", cap(st.journal), large)
	}
	// Small cycles let it go, after journalIdle of them.
	for i := range journalIdle {
		if cap(st.journal) != large {
			t.Fatalf("journal let go after %d small cycles, want %d", i, journalIdle)
		}
		churn(1)
		st.Commit()
	}
	if cap(st.journal) > journalKeep {
		t.Fatalf("journal capacity %d after %d small cycles, want at most %d", cap(st.journal), journalIdle, journalKeep)
	}
	m := st.Checkpoint()
	_ = st.Assign(0, req, []model.GPUShare{{Index: 1, Milli: 1000}})
	st.Rollback(m)
	if st.Nodes[0].GPUFree[0] != 1000 || st.Nodes[0].GPUFree[1] != 1000 {
		t.Fatalf("after rollback GPUs free %v, want [1000 1000]", st.Nodes[0].GPUFree)
	}
}

// TestGPUPlaneFollowsCPUPressure: a CPU-only pod may go beside busy GPUs
// or onto a node whose GPUs idle, at equal fragmentation. Where GPUs are
// the scarcer resource gpuplane packs it beside the busy GPUs; where the
// workload runs out of CPU first it places as FGD does.
func TestGPUPlaneFollowsCPUPressure(t *testing.T) {
	nodes := []model.Node{gpuNode("idle", 16000, 2), gpuNode("busy", 16000, 2)}
	targets := []Target{{Req: model.Request{MilliCPU: 2000}, P: 0.5}, {Req: model.Request{GPUs: 1, MilliCPU: 4000}, P: 0.5}}
	// The workload asks 6 CPUs per GPU: the nodes' 8 leave CPU to spare,
	// a cluster of 4 per GPU runs out of CPU first.
	tests := []struct {
		name     string
		capacity model.Resources
		pressure float64
		wantNode int
	}{
		{name: "GPU scarcer", capacity: model.CapacityOf(nodes), pressure: 0.75, wantNode: 1},
		{name: "capacity unknown", pressure: 1, wantNode: 1},
		{name: "CPU scarcer", capacity: model.Resources{MilliCPU: 16000, GPUMilli: 4000}, pressure: 1.5, wantNode: 0},
	}
	place := func(policy string, env PolicyEnv) int {
		t.Helper()
		st := NewState(nodes)
		if err := st.Assign(1, &model.Request{GPUs: 2, MilliCPU: 4000}, []model.GPUShare{{Index: 0, Milli: 1000}, {Index: 1, Milli: 1000}}); err != nil {
			t.Fatal(err)
		}
		pol, err := NewPolicy(policy, env)
		if err != nil {
			t.Fatal(err)
		}
		pl, err := NewPlacer(st, pol)
		if err != nil {
			t.Fatal(err)
		}
		o, ok := pl.Place(&model.Request{MilliCPU: 2000})
		if !ok {
			t.Fatal("no placement")
		}
		return o.Node
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			env := PolicyEnv{Targets: targets, Capacity: tc.capacity}
			if got := cpuPressure(env); got != tc.pressure {
				t.Fatalf("CPU pressure %v, want %v", got, tc.pressure)
			}
			if got := place("gpuplane", env); got != tc.wantNode {
				t.Fatalf("gpuplane placed the CPU-only pod on node %d, want %d", got, tc.wantNode)
			}
			if tc.pressure > 1 {
				if fgd := place("fgd", env); fgd != tc.wantNode {
					t.Fatalf("fgd placed it on node %d, gpuplane on %d: want the same", fgd, tc.wantNode)
				}
			}
		})
	}
}

// Claim-only GPUs serve only requests through claims, and a request
// through claims only GPUs of its device set; nodes whose GPUs differ only
// in their device sets do not share a signature.
func TestDeviceSets(t *testing.T) {
	n := gpuNode("a", 8000, 4)
	for g := range n.GPUs {
		n.GPUs[g].ClaimOnly = true
		if g >= 2 {
			n.GPUs[g].DeviceSets = "h100"
		}
	}
	st := NewState([]model.Node{n})
	if o := st.Options(0, &model.Request{GPUs: 1}); o != nil {
		t.Errorf("a device-plugin request got %v on claim-only GPUs", o)
	}
	if w := st.Why(0, &model.Request{GPUs: 1, DeviceSet: "b200"}); w != FilterClaimDevices {
		t.Errorf("a claim no GPU serves is refused with %q, want %q", w, FilterClaimDevices)
	}
	o := st.Options(0, &model.Request{GPUs: 2, DeviceSet: "h100"})
	if len(o) != 1 || o[0].Shares[0].Index != 2 || o[0].Shares[1].Index != 3 {
		t.Fatalf("options %+v, want GPUs 2 and 3 (the set's)", o)
	}
	if o := st.Options(0, &model.Request{GPUs: 3, DeviceSet: "h100"}); o != nil {
		t.Errorf("3 GPUs of a set of 2 placed: %+v", o)
	}
	// Two nodes alike but for which GPU is busy: with device sets on
	// some GPUs they are not interchangeable.
	a, b := n, n
	b.Name = "b"
	st = NewState([]model.Node{a, b})
	_ = st.Assign(0, &model.Request{GPUs: 1, DeviceSet: "h100"}, []model.GPUShare{{Index: 2, Milli: 1000}})
	_ = st.Assign(1, &model.Request{GPUs: 1}, []model.GPUShare{{Index: 0, Milli: 1000}})
	if st.signature(0) == st.signature(1) {
		t.Error("nodes with different GPUs of a device set busy share a signature")
	}
}

// A request for all of a device set fits a node only with every GPU of
// the set there free and in service, and takes exactly those; statically
// a node fits it only when every set GPU could serve it.
func TestAllOfSetPlacement(t *testing.T) {
	n := gpuNode("a", 8000, 4)
	for g := range n.GPUs {
		n.GPUs[g].ClaimOnly = true
		if g >= 1 {
			n.GPUs[g].DeviceSets = "s"
		}
	}
	all := &model.Request{DeviceSet: "s", AllOfSet: true, GPUs: 5}
	st := NewState([]model.Node{n})
	o := st.Options(0, all)
	if len(o) != 1 || len(o[0].Shares) != 3 || o[0].Shares[0].Index != 1 || o[0].Shares[2].Index != 3 {
		t.Fatalf("options %+v, want GPUs 1 to 3 (the set's)", o)
	}
	if !StaticFits(&n, all) {
		t.Fatal("a node whose set GPUs are all in service does not statically fit")
	}
	_ = st.Assign(0, &model.Request{GPUs: 1, DeviceSet: "s"}, []model.GPUShare{{Index: 2, Milli: 1000}})
	if o := st.Options(0, all); o != nil {
		t.Errorf("options %+v with a set GPU taken, want none", o)
	}
	if w := st.Why(0, all); w != FilterGPU {
		t.Errorf("refused with %q, want %q", w, FilterGPU)
	}
	withdrawn := n
	withdrawn.GPUs = slices.Clone(n.GPUs)
	withdrawn.GPUs[3].Withdrawn = true
	if StaticFits(&withdrawn, all) {
		t.Error("a node with a set GPU out of service statically fits all of the set")
	}
	none := &model.Request{DeviceSet: "other", AllOfSet: true, GPUs: 1}
	if StaticFits(&n, none) || NewState([]model.Node{n}).Options(0, none) != nil {
		t.Error("a node without GPUs of the set fits all of it")
	}
}

// Nodes alike but for which of their interchangeable GPUs are busy share
// a signature, and nodes whose GPUs hold different amounts free do not,
// at every size the sort of free amounts takes (a few GPUs, and more
// than the insertion sort is used for).
func TestSignatureIgnoresWhichGPUIsBusy(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 29))
	for _, gpus := range []int{1, 2, 8, 16, 17, 33, 64} {
		for range 50 {
			a, b := gpuNode("a", 64000, gpus), gpuNode("b", 64000, gpus)
			st := NewState([]model.Node{a, b})
			// The same shares on both nodes, on GPUs chosen apart.
			milli := make([]int64, gpus)
			for g := range milli {
				milli[g] = int64(rng.IntN(5)) * 250
			}
			perm := rng.Perm(gpus)
			for g, m := range milli {
				if m == 0 {
					continue
				}
				for node, idx := range []int{g, perm[g]} {
					if err := st.Assign(node, &model.Request{GPUMilli: m}, []model.GPUShare{{Index: idx, Milli: m}}); err != nil {
						t.Fatal(err)
					}
				}
			}
			if st.signature(0) != st.signature(1) {
				t.Fatalf("%d GPUs, shares %v on one node and permuted %v on the other: signatures differ", gpus, milli, perm)
			}
			// One more share on one node only: they differ.
			g := rng.IntN(gpus)
			if milli[g] == 1000 {
				continue
			}
			if err := st.Assign(0, &model.Request{GPUMilli: 1000 - milli[g]}, []model.GPUShare{{Index: g, Milli: 1000 - milli[g]}}); err != nil {
				t.Fatal(err)
			}
			if st.signature(0) == st.signature(1) {
				t.Fatalf("%d GPUs: node a took %d milli more of GPU %d, yet shares node b's signature", gpus, 1000-milli[g], g)
			}
		}
	}
}

// PlaceIn over every node but those skipped, and PlaceExcept, place
// where Place does with the skipped nodes closed: for sets of nodes to skip
// small and large (read by scan, or through the map), under a tie order
// or none, and for requests with pod constraints (which PlaceExcept
// answers by a look at every node) or without (by a walk of the tree).
func TestPlaceInSkipsAsClosingDoes(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 11))
	web := map[string]string{"app": "web"}
	repel := &model.PodAffinity{RequiredAnti: []model.PodAffinityTerm{
		{Selector: &model.LabelSelector{MatchLabels: web}, Namespaces: []string{"ns"}, TopologyKey: "zone"}}}
	for trial := range 400 {
		var nodes []model.Node
		for i := range 40 {
			n := gpuNode(fmt.Sprintf("n%d", i), 64000, 8)
			n.Labels = map[string]string{"zone": fmt.Sprint(i % 5)}
			nodes = append(nodes, n)
		}
		a, b := NewState(nodes), NewState(nodes)
		for i := range nodes {
			for g := range rng.IntN(8) {
				req := &model.Request{GPUs: 1, Namespace: "ns"}
				if rng.IntN(20) == 0 {
					req.Labels = web
				}
				for _, st := range []*State{a, b} {
					if err := st.Assign(i, req, []model.GPUShare{{Index: g, Milli: 1000}}); err != nil {
						t.Fatal(err)
					}
				}
			}
		}
		skip := map[int]bool{}
		for range rng.IntN(20) {
			n := rng.IntN(len(nodes))
			skip[n] = true
			b.Close(n)
		}
		if n := rng.IntN(len(nodes)); trial%7 == 0 && !skip[n] {
			skip[n] = false // named, not skipped
		}
		every := make([]int32, len(nodes))
		for i := range every {
			every[i] = int32(i)
		}
		req := &model.Request{GPUs: 1 + rng.IntN(4), Namespace: "ns"}
		if trial%3 == 0 {
			req.Affinity = repel
		}
		pa, pb := bestFitPlacer(t, a), bestFitPlacer(t, b)
		if trial%2 == 0 {
			rank := make([]int32, len(nodes))
			for i, r := range rng.Perm(len(nodes)) {
				rank[i] = int32(r)
			}
			pa.SetTieOrder(rank)
			pb.SetTieOrder(rank)
		}
		want, wantOK := pb.Place(req)
		for name, place := range map[string]func() (Option, bool){
			"PlaceIn":     func() (Option, bool) { return pa.PlaceIn(req, every, skip) },
			"PlaceExcept": func() (Option, bool) { return pa.PlaceExcept(req, skip) },
		} {
			got, gotOK := place()
			if gotOK != wantOK || gotOK && got.Node != want.Node {
				t.Fatalf("trial %d, %d GPUs, constrained %v, skip %v: %s gave node %d (%v), Place with them closed %d (%v)",
					trial, req.GPUs, req.Affinity != nil, skip, name, got.Node, gotOK, want.Node, wantOK)
			}
		}
	}
}

// A long run of pods placed and exiting keeps the signature table
// bounded, and a state whose table starts over places every pod where a
// state that never drops one does, under a policy that reads the pod mix
// (signatureMix) and one that does not.
func TestSignatureTableStartsOverUnchanged(t *testing.T) {
	for _, policy := range []string{"bestfit", "gpuclustering"} {
		rng := rand.New(rand.NewPCG(5, 17))
		var nodes []model.Node
		for i := range 30 {
			nodes = append(nodes, gpuNode(fmt.Sprintf("n%d", i), 64000, 8))
		}
		small, whole := NewState(nodes), NewState(nodes)
		small.sigLimit = 40
		ps, pw := policyPlacer(t, small, policy), policyPlacer(t, whole, policy)
		var live []placedPod
		cpus := []int64{100, 250, 500, 1000, 2000, 4000}
		milli := []int64{0, 250, 500, 1000}
		for step := range 20000 {
			if len(live) > 150 || len(live) > 0 && rng.IntN(2) == 0 {
				k := rng.IntN(len(live))
				r := live[k]
				small.Release(r.node, r.req, r.shares)
				whole.Release(r.node, r.req, r.shares)
				live[k] = live[len(live)-1]
				live = live[:len(live)-1]
				continue
			}
			req := &model.Request{MilliCPU: cpus[rng.IntN(len(cpus))], MemoryMiB: int64(1+rng.IntN(8)) * 1024, GPUMilli: milli[rng.IntN(len(milli))]}
			got, gotOK := ps.Place(req)
			want, wantOK := pw.Place(req)
			if gotOK != wantOK || gotOK && (got.Node != want.Node || !slices.Equal(got.Shares, want.Shares)) {
				t.Fatalf("%s, step %d: with the table starting over %+v (%v), without %+v (%v)", policy, step, got, gotOK, want, wantOK)
			}
			if len(small.sigs) > small.sigLimit+1 {
				t.Fatalf("%s, step %d: %d signatures kept, bound %d", policy, step, len(small.sigs), small.sigLimit)
			}
			if !gotOK {
				continue
			}
			for _, st := range []*State{small, whole} {
				if err := st.Assign(got.Node, req, got.Shares); err != nil {
					t.Fatal(err)
				}
			}
			live = append(live, placedPod{got.Node, req, got.Shares})
		}
		if small.sigEpoch == 0 {
			t.Fatalf("%s: the table never started over (%d signatures): the test shows nothing", policy, len(small.sigs))
		}
		t.Logf("%s: the small table started over %d times; the whole one holds %d signatures", policy, small.sigEpoch, len(whole.sigs))
	}
}

// A placer that keeps a cache for only a few request shapes, and one that
// tells apart only a few shapes before it starts over, place every pod
// where a placer that keeps them all does, as pods of many shapes come
// and go; and the caches kept stay within the bound.
func TestShapeCachesBoundedUnchanged(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 4))
	var nodes []model.Node
	for i := range 30 {
		nodes = append(nodes, gpuNode(fmt.Sprintf("n%d", i), 64000, 8))
	}
	st := NewState(nodes)
	all, few, forgetful := bestFitPlacer(t, st), bestFitPlacer(t, st), bestFitPlacer(t, st)
	few.maxShapes = 3
	forgetful.maxShapeIDs = 5
	var live []placedPod
	for step := range 20000 {
		if len(live) > 120 || len(live) > 0 && rng.IntN(3) == 0 {
			k := rng.IntN(len(live))
			st.Release(live[k].node, live[k].req, live[k].shares)
			live[k] = live[len(live)-1]
			live = live[:len(live)-1]
			continue
		}
		req := &model.Request{MilliCPU: int64(1+rng.IntN(12)) * 250, MemoryMiB: 1024, GPUs: rng.IntN(3)}
		want, wantOK := all.Place(req)
		for name, p := range map[string]*Placer{"3 caches": few, "5 shapes": forgetful} {
			got, gotOK := p.Place(req)
			if gotOK != wantOK || gotOK && (got.Node != want.Node || !slices.Equal(got.Shares, want.Shares)) {
				t.Fatalf("step %d, %+v: the placer keeping %s placed %+v (%v), the one keeping all %+v (%v)", step, req, name, got, gotOK, want, wantOK)
			}
		}
		held := 0
		for _, c := range few.caches {
			if c != nil {
				held++
			}
		}
		if held != few.live || held > few.maxShapes {
			t.Fatalf("step %d: %d caches held, %d counted, bound %d", step, held, few.live, few.maxShapes)
		}
		if len(forgetful.reqIDs) > forgetful.maxShapeIDs {
			t.Fatalf("step %d: %d shapes told apart, bound %d", step, len(forgetful.reqIDs), forgetful.maxShapeIDs)
		}
		if wantOK {
			if err := st.Assign(want.Node, req, want.Shares); err != nil {
				t.Fatal(err)
			}
			live = append(live, placedPod{want.Node, req, want.Shares})
		}
		st.Commit() // a cycle a pod
	}
	if len(all.caches) <= few.maxShapes {
		t.Fatalf("only %d shapes asked for: the bound was never reached", len(all.caches))
	}

	// One cycle placing more shapes than the bound, each twice: every
	// cache stays for the cycle, so each shape is filled once.
	st.Commit()
	shapesNow := func(k int) *model.Request { return &model.Request{MilliCPU: int64(7000 + k), MemoryMiB: 1024, GPUs: 1} }
	var first []*shapeCache
	for k := range 10 {
		few.Place(shapesNow(k))
		first = append(first, few.caches[few.reqIDs[shapeKey(few, shapesNow(k))]])
	}
	for k := range 10 {
		few.Place(shapesNow(k))
		if c := few.caches[few.reqIDs[shapeKey(few, shapesNow(k))]]; c != first[k] {
			t.Fatalf("shape %d was filled again within the cycle that filled it", k)
		}
	}
	if few.live != 10 {
		t.Fatalf("%d caches held in a cycle that read 10", few.live)
	}
	// The next cycle's first fill brings them back under the bound.
	st.Commit()
	few.Place(shapesNow(10))
	if few.live > few.maxShapes {
		t.Fatalf("%d caches held after the cycle, bound %d", few.live, few.maxShapes)
	}
}

// shapeKey is the key p.shape interns req by.
func shapeKey(p *Placer, req *model.Request) string {
	p.shape(req)
	return p.keyBuf.String()
}

// Nodes relabelled again and again keep the class table bounded, and a
// state whose classes (and so signatures) start over places every pod
// where a state that keeps them all does.
func TestClassTableStartsOverUnchanged(t *testing.T) {
	rng := rand.New(rand.NewPCG(2, 8))
	mk := func() []model.Node {
		var nodes []model.Node
		for i := range 12 {
			n := gpuNode(fmt.Sprintf("n%d", i), 64000, 8)
			n.Labels = map[string]string{"pool": fmt.Sprint(i % 3)}
			nodes = append(nodes, n)
		}
		return nodes
	}
	// Each state reads its own nodes, relabelled alike.
	na, nb := mk(), mk()
	small, whole := NewState(na), NewState(nb)
	small.classLimit = 16 // above the 12 nodes' own classes
	ps, pw := bestFitPlacer(t, small), bestFitPlacer(t, whole)
	on := make([][]placedPod, len(na))
	for step := range 4000 {
		switch rng.IntN(3) {
		case 0: // a node relabelled, its pods released and put back
			i := rng.IntN(len(na))
			v := fmt.Sprint(rng.IntN(40))
			for _, pair := range []struct {
				st *State
				n  []model.Node
			}{{small, na}, {whole, nb}} {
				for _, r := range on[i] {
					pair.st.Release(i, r.req, r.shares)
				}
				pair.n[i].Labels = map[string]string{"pool": fmt.Sprint(i % 3), "generation": v}
				if err := pair.st.Relabel(i); err != nil {
					t.Fatal(err)
				}
				for _, r := range on[i] {
					if err := pair.st.Assign(i, r.req, r.shares); err != nil {
						t.Fatal(err)
					}
				}
			}
		case 1: // a pod exits
			i := rng.IntN(len(na))
			if len(on[i]) == 0 {
				continue
			}
			r := on[i][len(on[i])-1]
			on[i] = on[i][:len(on[i])-1]
			small.Release(i, r.req, r.shares)
			whole.Release(i, r.req, r.shares)
		default: // a pod is placed, on a pool's nodes
			req := &model.Request{MilliCPU: 1000, MemoryMiB: 1024, GPUs: 1 + rng.IntN(2), NodeSelector: map[string]string{"pool": fmt.Sprint(rng.IntN(3))}}
			got, gotOK := ps.Place(req)
			want, wantOK := pw.Place(req)
			if gotOK != wantOK || gotOK && (got.Node != want.Node || !slices.Equal(got.Shares, want.Shares)) {
				t.Fatalf("step %d: with classes starting over %+v (%v), without %+v (%v)", step, got, gotOK, want, wantOK)
			}
			if !gotOK {
				continue
			}
			for _, st := range []*State{small, whole} {
				if err := st.Assign(got.Node, req, got.Shares); err != nil {
					t.Fatal(err)
				}
			}
			on[got.Node] = append(on[got.Node], placedPod{got.Node, req, got.Shares})
		}
		if len(small.classes) > small.classLimit {
			t.Fatalf("step %d: %d classes kept, bound %d", step, len(small.classes), small.classLimit)
		}
	}
	if len(whole.classes) <= small.classLimit || small.sigEpoch == 0 {
		t.Fatalf("the bound was never reached (%d classes in all, %d starts over)", len(whole.classes), small.sigEpoch)
	}
}
