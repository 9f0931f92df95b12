package placement

import (
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"

	"github.com/gpuplane/gpuplane/internal/scheduler/model"
)

func withAllocatable(n model.Node, alloc map[string]int64) model.Node {
	n.Allocatable = alloc
	return n
}

func port(protocol, ip string, p int32) model.HostPort {
	return model.HostPort{Protocol: protocol, IP: ip, Port: p}
}

// TestHostPortsAsNodePorts: a node takes a pod only when none of its host
// ports conflicts with one a pod on the node holds, as kube-scheduler's
// NodePorts decides: 0.0.0.0 (or no address) against any address, a
// given address against itself and 0.0.0.0, the protocol apart.
func TestHostPortsAsNodePorts(t *testing.T) {
	tests := []struct {
		name       string
		held, want model.HostPort
		conflict   bool
	}{
		{"same port on all addresses", port("TCP", "", 7777), port("", "", 7777), true},
		{"all addresses against one", port("TCP", "0.0.0.0", 7777), port("TCP", "10.0.0.1", 7777), true},
		{"one address against all", port("TCP", "10.0.0.1", 7777), port("TCP", "0.0.0.0", 7777), true},
		{"the same address", port("UDP", "10.0.0.1", 53), port("UDP", "10.0.0.1", 53), true},
		{"two addresses", port("TCP", "10.0.0.1", 7777), port("TCP", "10.0.0.2", 7777), false},
		{"another protocol", port("TCP", "", 7777), port("UDP", "", 7777), false},
		{"another port", port("TCP", "", 7777), port("TCP", "", 7778), false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.held.Conflicts(tc.want); got != tc.conflict {
				t.Errorf("Conflicts = %t, want %t", got, tc.conflict)
			}
			for _, alloc := range []map[string]int64{nil, {"pods": 10}} {
				st := NewState([]model.Node{withAllocatable(gpuNode("a", 8000, 0), alloc)})
				if err := st.Assign(0, &model.Request{HostPorts: []model.HostPort{tc.held}}, nil); err != nil {
					t.Fatal(err)
				}
				req := &model.Request{HostPorts: []model.HostPort{port("TCP", "", 1), tc.want}}
				fits := st.Options(0, req) != nil
				why := st.Why(0, req)
				if fits == tc.conflict || (why != "") != tc.conflict || tc.conflict && why != FilterHostPort(tc.want) {
					t.Errorf("allocatable %v: fits %t, why %q; want a conflict: %t", alloc, fits, why, tc.conflict)
				}
			}
		})
	}
}

// TestPodsAllowance: a node with Allocatable takes at most its pods, a
// node without it any number; the reason is "too many pods".
func TestPodsAllowance(t *testing.T) {
	st := NewState([]model.Node{withAllocatable(gpuNode("a", 64000, 0), map[string]int64{"pods": 3}), gpuNode("b", 64000, 0)})
	req := &model.Request{MilliCPU: 100}
	for i := range 3 {
		if err := st.Assign(0, req, nil); err != nil {
			t.Fatalf("pod %d: %v", i, err)
		}
	}
	if st.Options(0, req) != nil || st.Why(0, req) != FilterPods || st.Assign(0, req, nil) == nil {
		t.Errorf("a node of 3 pods took a fourth (why %q)", st.Why(0, req))
	}
	for i := range 200 {
		if err := st.Assign(1, req, nil); err != nil {
			t.Fatalf("a node without allocatable refused pod %d: %v", i, err)
		}
	}
	if StaticFits(&model.Node{Name: "none", MilliCPU: 1000, Allocatable: map[string]int64{}}, req) {
		t.Error("a node that allows no pods fits statically")
	}
}

// TestScalarResources: each scalar a pod asks for is counted against its
// node's allocatable less what its pods hold, missing = 0; a node
// without Allocatable checks none; zero requests always fit.
func TestScalarResources(t *testing.T) {
	alloc := map[string]int64{"pods": 110, "ephemeral-storage": 100, "rdma/hca": 2}
	st := NewState([]model.Node{withAllocatable(gpuNode("a", 64000, 0), alloc), gpuNode("b", 64000, 0)})
	storage := &model.Request{Scalars: map[string]int64{"ephemeral-storage": 60}}
	if err := st.Assign(0, storage, nil); err != nil {
		t.Fatal(err)
	}
	if why := st.Why(0, storage); why != "insufficient ephemeral-storage" || st.Options(0, storage) != nil {
		t.Errorf("60 of 40 free ephemeral-storage: why %q", why)
	}
	two := &model.Request{Scalars: map[string]int64{"rdma/hca": 2, "ephemeral-storage": 40}}
	if why := st.Why(0, two); why != "" {
		t.Errorf("2 of 2 rdma/hca and 40 of 40 storage: why %q", why)
	}
	if why := st.Why(0, &model.Request{Scalars: map[string]int64{"example.com/fpga": 1}}); why != "insufficient example.com/fpga" {
		t.Errorf("a resource the node does not advertise: why %q", why)
	}
	if why := st.Why(0, &model.Request{Scalars: map[string]int64{"example.com/fpga": 0}}); why != "" {
		t.Errorf("a zero request: why %q", why)
	}
	if why := st.Why(1, &model.Request{Scalars: map[string]int64{"example.com/fpga": 5}}); why != "" {
		t.Errorf("a node without allocatable: why %q", why)
	}
	if !StaticFits(st.Nodes[0].Node, storage) || StaticFits(st.Nodes[0].Node, &model.Request{Scalars: map[string]int64{"ephemeral-storage": 101}}) {
		t.Error("StaticFits does not compare scalars with the node's allocatable")
	}
}

// TestResourcesRollback: what-if work on pods, scalars and ports is undone
// exactly.
func TestResourcesRollback(t *testing.T) {
	alloc := map[string]int64{"pods": 2, "rdma/hca": 1}
	st := NewState([]model.Node{withAllocatable(gpuNode("a", 64000, 0), alloc), withAllocatable(gpuNode("b", 64000, 0), alloc)})
	req := &model.Request{Scalars: map[string]int64{"rdma/hca": 1}, HostPorts: []model.HostPort{port("TCP", "", 80)}}
	other := &model.Request{HostPorts: []model.HostPort{port("TCP", "", 81)}}
	m := st.Checkpoint()
	if err := st.Assign(0, req, nil); err != nil {
		t.Fatal(err)
	}
	if err := st.Assign(0, other, nil); err != nil {
		t.Fatal(err)
	}
	if st.Why(0, &model.Request{}) != FilterPods {
		t.Fatal("two pods did not fill a node of two")
	}
	st.Rollback(m)
	if why := st.Why(0, req); why != "" {
		t.Errorf("after rollback: why %q", why)
	}
	if why := st.Why(0, &model.Request{HostPorts: []model.HostPort{port("TCP", "10.0.0.1", 81)}}); why != "" {
		t.Errorf("after rollback, port 81 on one address: why %q", why)
	}
	if st.signature(0) != st.signature(1) {
		t.Error("after rollback the node's signature is not that of its untouched twin")
	}
	if err := st.Assign(0, req, nil); err != nil {
		t.Fatal(err)
	}
	st.Release(0, req, nil)
	if why := st.Why(0, req); why != "" {
		t.Errorf("after release: why %q", why)
	}
}

// TestSignatureSeesResources: two nodes alike but for what their pods
// hold of a scalar, a port or the pods allowance have different
// signatures, so the Placer's memo never gives one's answer for the other;
// alike in those too, they share one.
func TestSignatureSeesResources(t *testing.T) {
	alloc := map[string]int64{"pods": 2, "rdma/hca": 1}
	nodes := []model.Node{withAllocatable(gpuNode("a", 8000, 1), alloc), withAllocatable(gpuNode("b", 8000, 1), alloc)}
	for _, tc := range []struct {
		name string
		req  model.Request
	}{
		{"scalar", model.Request{Scalars: map[string]int64{"rdma/hca": 1}}},
		{"port", model.Request{HostPorts: []model.HostPort{port("TCP", "", 80)}}},
		{"pods", model.Request{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := NewState(nodes)
			if st.signature(0) != st.signature(1) {
				t.Fatal("alike nodes differ")
			}
			if err := st.Assign(0, &tc.req, nil); err != nil {
				t.Fatal(err)
			}
			if tc.name == "pods" {
				_ = st.Assign(0, &tc.req, nil)
			}
			if st.signature(0) == st.signature(1) {
				t.Error("a node whose pods hold it shares the signature of one whose pods do not")
			}
			pol, _ := NewPolicy("firstfit", PolicyEnv{Targets: []Target{{Req: model.Request{GPUs: 1}, P: 1}}})
			p, _ := NewPlacer(st, pol)
			o, ok := p.Place(&tc.req)
			if !ok || o.Node != 1 {
				t.Errorf("placed on %+v (%t), want node b", o, ok)
			}
		})
	}
}

// TestPlacerMatchesScanWithResources: the Placer's memo and incremental
// caches choose as a scan of every node does, with pods, scalars and host
// ports in play.
func TestPlacerMatchesScanWithResources(t *testing.T) {
	for _, policy := range []string{"fgd", "bestfit", "gpupacking", "firstfit", "gpuclustering"} {
		t.Run(policy, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(3, 9))
			var nodes []model.Node
			for i := range 30 {
				n := gpuNode("n", 64000, []int{1, 2, 4, 8}[i%4])
				if i%3 != 0 {
					n.Allocatable = map[string]int64{"pods": int64(2 + rng.IntN(6)), "rdma/hca": int64(rng.IntN(3)), "ephemeral-storage": 100}
				}
				nodes = append(nodes, n)
			}
			shapes := []model.Request{{MilliCPU: 1000, GPUs: 1}, {MilliCPU: 1000, GPUMilli: 500},
				{MilliCPU: 1000, Scalars: map[string]int64{"rdma/hca": 1}}, {MilliCPU: 1000, GPUs: 1, Scalars: map[string]int64{"ephemeral-storage": 30}},
				{MilliCPU: 1000, HostPorts: []model.HostPort{port("TCP", "", 80)}}, {MilliCPU: 1000, GPUMilli: 300, HostPorts: []model.HostPort{port("TCP", "10.0.0.1", 80)}}}
			var targets []Target
			for _, s := range shapes {
				targets = append(targets, Target{Req: s, P: 1})
			}
			pol, _ := NewPolicy(policy, PolicyEnv{Targets: targets})
			fast, slow := NewState(nodes), NewState(nodes)
			pf, _ := NewPlacer(fast, pol)
			ps := &Placer{st: slow, pol: pol}
			placed := 0
			for k := range 300 {
				req := shapes[rng.IntN(len(shapes))]
				m := fast.Checkpoint()
				a, okA := pf.Place(&req)
				b, okB := ps.scan(&req)
				if okA != okB || a.Node != b.Node || len(a.Shares) != len(b.Shares) {
					t.Fatalf("pod %d: placer chose %+v (%v), scan chose %+v (%v)", k, a, okA, b, okB)
				}
				if !okA {
					continue
				}
				if err := fast.Assign(a.Node, &req, a.Shares); err != nil {
					t.Fatal(err)
				}
				if k%5 == 4 {
					fast.Rollback(m) // what-if work undone: the placer must see it
					continue
				}
				placed++
				if err := slow.Assign(b.Node, &req, b.Shares); err != nil {
					t.Fatal(err)
				}
			}
			if placed < 50 {
				t.Errorf("only %d pods placed: the test does not exercise the caches", placed)
			}
		})
	}
}

// dgxTimeSliced is a DGX H100 whose 8 GPUs are time-sliced 4 ways under
// nvidia.com/gpu (allocatable nvidia.com/gpu: 32), as the adapter models
// it; without replicas, its GPUs offered whole only.
func dgxTimeSliced(name string, replicas int64) model.Node {
	n := model.Node{Name: name, MilliCPU: 224000, MemoryMiB: 2 << 20, Allocatable: map[string]int64{"pods": 110}}
	for g := range 8 {
		gp := model.GPU{Index: g, Model: "H100", MemoryMiB: 81559, NUMANode: -1, WholeOnly: replicas <= 1}
		if replicas > 1 {
			gp.ShareResource, gp.MinShareMilli = "nvidia.com/gpu", model.MilliPerGPU/replicas
		}
		n.GPUs = append(n.GPUs, gp)
	}
	return n
}

// gpuRequest is what the adapter makes of a pod asking nvidia.com/gpu: k.
func gpuRequest(k int) model.Request {
	return model.Request{MilliCPU: 1000, GPUs: k, Replicas: k, ShareResource: "nvidia.com/gpu"}
}

// TestTimeSlicedGPUsInTheNodesUnit: nvidia.com/gpu: 1 is one replica of a
// GPU time-sliced 4 ways under that name (32 such pods on a DGX H100), a
// whole GPU on a node that does not time-slice (8); more replicas than a
// GPU has are taken from as many GPUs as it takes, as the node counts
// them (nvidia.com/gpu: 8 is two of its GPUs), so that Karpenter, which
// counts the node's 32, and gpuplane agree on what fits.
func TestTimeSlicedGPUsInTheNodesUnit(t *testing.T) {
	for _, policy := range []string{"fgd", "gpupacking", "bestfit"} {
		t.Run(policy, func(t *testing.T) {
			one := gpuRequest(1)
			pol, err := NewPolicy(policy, PolicyEnv{Targets: []Target{{Req: one, P: 1}}})
			if err != nil {
				t.Fatal(err)
			}
			for _, tc := range []struct {
				node model.Node
				fit  int
			}{{dgxTimeSliced("sliced", 4), 32}, {dgxTimeSliced("whole", 1), 8}} {
				st := NewState([]model.Node{tc.node})
				n := fill(t, st, pol, &one)
				if n != tc.fit {
					t.Errorf("%s: %d pods of nvidia.com/gpu: 1 placed, want %d", tc.node.Name, n, tc.fit)
				}
				if why := st.Why(0, &one); why != FilterGPU {
					t.Errorf("%s full: why %q, want %q", tc.node.Name, why, FilterGPU)
				}
			}
		})
	}
	st := NewState([]model.Node{dgxTimeSliced("sliced", 4)})
	for k, want := range map[int]string{2: "", 4: "", 5: "", 8: "", 32: ""} {
		req := gpuRequest(k)
		if why := st.Why(0, &req); why != want {
			t.Errorf("nvidia.com/gpu: %d on 4 replicas a GPU: why %q, want %q", k, why, want)
		}
	}
	two := gpuRequest(2)
	opts := st.Options(0, &two)
	if len(opts) != 1 || len(opts[0].Shares) != 1 || opts[0].Shares[0].Milli != 500 {
		t.Errorf("nvidia.com/gpu: 2 options %+v, want two replicas (500) of one GPU", opts)
	}
	if !StaticFits(st.Nodes[0].Node, &two) {
		t.Error("two replicas do not fit an empty time-sliced node")
	}
	for _, tc := range []struct {
		k    int
		want []model.GPUShare
	}{
		{5, []model.GPUShare{{Index: 0, Milli: 1000}, {Index: 1, Milli: 250}}},
		{8, []model.GPUShare{{Index: 0, Milli: 1000}, {Index: 1, Milli: 1000}}},
		{32, []model.GPUShare{{Index: 0, Milli: 1000}, {Index: 1, Milli: 1000}, {Index: 2, Milli: 1000}, {Index: 3, Milli: 1000},
			{Index: 4, Milli: 1000}, {Index: 5, Milli: 1000}, {Index: 6, Milli: 1000}, {Index: 7, Milli: 1000}}},
	} {
		req := gpuRequest(tc.k)
		if !StaticFits(st.Nodes[0].Node, &req) {
			t.Errorf("nvidia.com/gpu: %d does not fit an empty node of 32 replicas", tc.k)
		}
		opts := st.Options(0, &req)
		if len(opts) != 1 || !slices.Equal(opts[0].Shares, tc.want) {
			t.Errorf("nvidia.com/gpu: %d options %+v, want %+v", tc.k, opts, tc.want)
		}
	}
	// Four pods of nvidia.com/gpu: 8 fill the node; a fifth does not fit.
	eight := gpuRequest(8)
	for range 4 {
		opts := st.Options(0, &eight)
		if len(opts) == 0 || st.Assign(0, &eight, opts[0].Shares) != nil {
			t.Fatal("four pods of nvidia.com/gpu: 8 do not fit a node of 32 replicas")
		}
	}
	if why := st.Why(0, &eight); why != FilterGPU {
		t.Errorf("a fifth pod of nvidia.com/gpu: 8: why %q, want %q", why, FilterGPU)
	}
	if thirtyThree := gpuRequest(33); StaticFits(st.Nodes[0].Node, &thirtyThree) {
		t.Error("33 replicas fit a node of 32")
	}
	small := dgxTimeSliced("small", 4)
	small.GPUs = small.GPUs[:2]
	if three := gpuRequest(3); !StaticFits(&small, &three) {
		t.Error("three replicas do not fit a node of two GPUs time-sliced 4 ways")
	}
}

// dgxShared is a DGX H100 whose 8 GPUs give replicas under
// nvidia.com/gpu.shared only, replicas each (allocatable
// nvidia.com/gpu.shared: 8 x replicas), as the adapter models it; one
// replica each is how it models a node that does not say its factor.
func dgxShared(name string, replicas int64) model.Node {
	n := model.Node{Name: name, MilliCPU: 224000, MemoryMiB: 2 << 20, Allocatable: map[string]int64{"pods": 110}}
	for g := range 8 {
		n.GPUs = append(n.GPUs, model.GPU{Index: g, Model: "H100", MemoryMiB: 81559, NUMANode: -1, SharesOnly: true,
			ShareResource: "nvidia.com/gpu.shared", MinShareMilli: model.MilliPerGPU / replicas})
	}
	return n
}

// sharedRequest is what the adapter makes of a pod asking
// nvidia.com/gpu.shared: k where the least sharing factor of the cluster
// is least.
func sharedRequest(k int, least int64) model.Request {
	return model.Request{MilliCPU: 1000, GPUMilli: min(int64(k)*model.MilliPerGPU/least, model.MilliPerGPU), Replicas: k, ShareResource: "nvidia.com/gpu.shared"}
}

// TestSharedReplicasInTheNodesUnit: nvidia.com/gpu.shared: k is k replicas
// of one GPU in the node's unit, whatever the estimate quotas count it
// by: 32 pods of one replica on a DGX H100 sharing 4 ways, 8 where each
// GPU is one replica, and a GPU's worth or more fits only as many
// replicas as one GPU has, refused naming gpuplane's rule beyond them.
func TestSharedReplicasInTheNodesUnit(t *testing.T) {
	for _, policy := range []string{"fgd", "gpupacking", "bestfit"} {
		t.Run(policy, func(t *testing.T) {
			one := sharedRequest(1, 1)
			pol, err := NewPolicy(policy, PolicyEnv{Targets: []Target{{Req: one, P: 1}}})
			if err != nil {
				t.Fatal(err)
			}
			for _, tc := range []struct {
				node model.Node
				fit  int
			}{{dgxShared("four", 4), 32}, {dgxShared("one", 1), 8}} {
				st := NewState([]model.Node{tc.node})
				n := fill(t, st, pol, &one)
				if n != tc.fit {
					t.Errorf("%s: %d pods of nvidia.com/gpu.shared: 1 placed, want %d", tc.node.Name, n, tc.fit)
				}
				if why := st.Why(0, &one); why != FilterGPU {
					t.Errorf("%s full: why %q, want %q", tc.node.Name, why, FilterGPU)
				}
			}
		})
	}
	four := NewState([]model.Node{dgxShared("four", 4)})
	for k, want := range map[int]string{1: "", 3: "", 4: "", 5: FilterReplicasOneGPU} {
		req := sharedRequest(k, 2)
		if why := four.Why(0, &req); why != want {
			t.Errorf("nvidia.com/gpu.shared: %d on 4 replicas a GPU: why %q, want %q", k, why, want)
		}
		if StaticFits(four.Nodes[0].Node, &req) != (want == "") {
			t.Errorf("nvidia.com/gpu.shared: %d on 4 replicas a GPU: StaticFits %t", k, want != "")
		}
	}
	three := sharedRequest(3, 2)
	if opts := four.Options(0, &three); len(opts) != 1 || len(opts[0].Shares) != 1 || opts[0].Shares[0].Milli != 750 {
		t.Errorf("nvidia.com/gpu.shared: 3 options %+v, want three replicas (750) of one GPU", opts)
	}
	one := NewState([]model.Node{dgxShared("one", 1)})
	if two := sharedRequest(2, 1); one.Why(0, &two) != FilterReplicasOneGPU {
		t.Errorf("nvidia.com/gpu.shared: 2 where each GPU is one replica: why %q, want %q", one.Why(0, &two), FilterReplicasOneGPU)
	}
	if plain := NewState([]model.Node{dgxTimeSliced("plain", 1)}); plain.Why(0, &three) != FilterGPUKind {
		t.Errorf("nvidia.com/gpu.shared on a node without it: why %q, want %q", plain.Why(0, &three), FilterGPUKind)
	}
}

// fill places req on st under pol until it fits nowhere, assigning each
// placement, and returns how many it placed.
func fill(t *testing.T, st *State, pol Policy, req *model.Request) int {
	t.Helper()
	p, err := NewPlacer(st, pol)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for {
		o, ok := p.Place(req)
		if !ok {
			return n
		}
		if err := st.Assign(o.Node, req, o.Shares); err != nil {
			t.Fatal(err)
		}
		n++
	}
}

// TestRestIsWhatNoOneTookOfAPodsRoom: a pod released from the state and
// then partly replaced gets back, as its rest, only what is still free of
// each thing it held, and its room taken again with its rest leaves the
// node as full as before it was released.
func TestRestIsWhatNoOneTookOfAPodsRoom(t *testing.T) {
	st := NewState([]model.Node{withAllocatable(gpuNode("a", 8000, 4), map[string]int64{"pods": 2, "example.com/nic": 4})})
	port := model.HostPort{Protocol: "TCP", Port: 7777}
	victim := &model.Request{MilliCPU: 6000, MemoryMiB: 100, GPUs: 2, Scalars: map[string]int64{"example.com/nic": 3},
		HostPorts: []model.HostPort{port, {Protocol: "TCP", Port: 8888}}, Namespace: "ns", Labels: map[string]string{"app": "v"}}
	held := []model.GPUShare{{Index: 0, Milli: model.MilliPerGPU}, {Index: 1, Milli: model.MilliPerGPU}}
	if err := st.Assign(0, victim, held); err != nil {
		t.Fatal(err)
	}
	st.Release(0, victim, held)
	// What replaces it: 4 CPUs, GPU 1 and half of GPU 2, a NIC, port 7777
	// and the node's other pod slot.
	next := &model.Request{MilliCPU: 4000, GPUs: 1, Scalars: map[string]int64{"example.com/nic": 2}, HostPorts: []model.HostPort{port}}
	if err := st.Assign(0, next, []model.GPUShare{{Index: 1, Milli: model.MilliPerGPU}}); err != nil {
		t.Fatal(err)
	}
	if err := st.Assign(0, &model.Request{MilliCPU: 1000, GPUMilli: 500}, []model.GPUShare{{Index: 2, Milli: 500}}); err != nil {
		t.Fatal(err)
	}
	rest, shares := st.Rest(0, victim, held)
	want := model.Request{MilliCPU: 3000, MemoryMiB: 100, Scalars: map[string]int64{"example.com/nic": 2},
		HostPorts: []model.HostPort{{Protocol: "TCP", Port: 8888}}, NotPod: true, Namespace: "ns", Labels: map[string]string{"app": "v"}}
	if !reflect.DeepEqual(rest, want) || !reflect.DeepEqual(shares, []model.GPUShare{{Index: 0, Milli: model.MilliPerGPU}}) {
		t.Fatalf("rest %+v %+v, want %+v on GPU 0 only", rest, shares, want)
	}
	if err := st.Hold(0, &rest, shares); err != nil {
		t.Fatalf("holding the rest: %v", err)
	}
	ns := &st.Nodes[0]
	if ns.FreeCPU != 0 || ns.GPUFree[0] != 0 || ns.GPUFree[3] != model.MilliPerGPU || st.Fits(0, &model.Request{HostPorts: []model.HostPort{{Protocol: "TCP", Port: 8888}}}, nil) {
		t.Fatalf("after the rest is held: %d milli-CPU, GPUs %v free, port 8888 free", ns.FreeCPU, ns.GPUFree)
	}
}
