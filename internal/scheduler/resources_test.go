package scheduler_test

import (
	"encoding/json"
	"maps"
	"slices"
	"testing"

	"github.com/gpuplane/gpuplane/internal/scheduler"
	"github.com/gpuplane/gpuplane/internal/scheduler/model"
	"github.com/gpuplane/gpuplane/internal/scheduler/schedtest"
)

// TestCycleCountsPortsPodsAndScalars: over cycles, the pods a cycle binds
// hold their host ports, pod slots and scalar resources through their
// allocations (model.Apply), so later pods are refused with the reason
// naming them; a pod of the same cycle is refused the same.
func TestCycleCountsPortsPodsAndScalars(t *testing.T) {
	node := schedtest.Node("n", 64000, 1<<20).GPUs(8, "H100").Obj()
	node.Allocatable = map[string]int64{"pods": 3, "rdma/hca": 2}
	web := model.Request{MilliCPU: 100, HostPorts: []model.HostPort{{Protocol: "TCP", IP: model.AllIPs, Port: 7777}}}
	rdma := model.Request{MilliCPU: 100, Scalars: map[string]int64{"rdma/hca": 2}}
	h, err := schedtest.NewHarness(model.Snapshot{Nodes: []model.Node{node},
		Pending: []model.PodGroup{schedtest.Group("web-a").Pods(1, web).Obj(), schedtest.Group("web-b").Pods(1, web).Obj()}}, scheduler.Config{})
	if err != nil {
		t.Fatal(err)
	}
	d, err := h.Cycle()
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Binds) != 1 || len(d.Unplaced) != 1 {
		t.Fatalf("two pods of host port 7777 on one node: binds %+v, unplaced %+v; want one of each", d.Binds, d.Unplaced)
	}
	running := schedtest.Running(&h.Snap)
	if len(running) != 1 || !slices.Equal(running[0].Request.HostPorts, web.HostPorts) {
		t.Fatalf("the bound pod runs as %+v, without its port", running)
	}
	// Explained, the waiting pod names the port; a later cycle keeps it
	// out through the running pod's allocation.
	h.Snap.Pending[0].Explain = true
	if d, err = h.Cycle(); err != nil {
		t.Fatal(err)
	}
	want := []model.FilterCount{{Filter: "host port TCP/0.0.0.0:7777 in use", Nodes: 1}}
	if len(d.Binds) != 0 || len(d.Unplaced) != 1 || !slices.Equal(d.Unplaced[0].Filtered, want) {
		t.Fatalf("binds %+v, unplaced %+v; want the pod waiting, filtered %v", d.Binds, d.Unplaced, want)
	}
	// rdma-a takes both rdma/hca (2 pods of 3 run): rdma-b is short of
	// it; once a third pod fills the node, too many pods.
	h.Snap.Pending = []model.PodGroup{schedtest.Group("rdma-a").Pods(1, rdma).Obj()}
	if d, err = h.Cycle(); err != nil || len(d.Binds) != 1 {
		t.Fatalf("rdma pod: binds %+v, %v", d.Binds, err)
	}
	for _, why := range []string{"insufficient rdma/hca", "too many pods"} {
		late := schedtest.Group("rdma-b").Pods(1, rdma).Obj()
		late.Explain = true
		h.Snap.Pending = []model.PodGroup{late}
		if d, err = h.Cycle(); err != nil {
			t.Fatal(err)
		}
		if len(d.Unplaced) != 1 || !slices.Equal(d.Unplaced[0].Filtered, []model.FilterCount{{Filter: why, Nodes: 1}}) {
			t.Errorf("rdma-b: unplaced %+v, want filtered by %q", d.Unplaced, why)
		}
		h.Snap.Pending = []model.PodGroup{schedtest.Group("fill").Pods(1, model.Request{MilliCPU: 100, Scalars: map[string]int64{"rdma/hca": 0}}).Obj()}
		if d, err = h.Cycle(); err != nil || len(d.Binds) != 1 && why != "too many pods" {
			t.Fatalf("a pod asking for no rdma/hca: binds %+v, %v", d.Binds, err)
		}
	}
}

// TestSyncSeesResourceChanges: a running pod whose scalars or ports
// changed, and a node whose allocatable changed, are applied anew, so the
// core's books follow the snapshot.
func TestSyncSeesResourceChanges(t *testing.T) {
	node := schedtest.Node("n", 64000, 1<<20).Obj()
	node.Allocatable = map[string]int64{"pods": 10, "rdma/hca": 1}
	hold := model.Allocation{Pod: "p", Node: "n", Request: model.Request{Scalars: map[string]int64{"rdma/hca": 1}}}
	snap := model.Snapshot{Nodes: []model.Node{node}, RunningByNode: schedtest.OnNodes([]model.Node{node}, hold)}
	want := schedtest.Group("w").Pods(1, model.Request{Scalars: map[string]int64{"rdma/hca": 1}}).Obj()
	snap.Pending = []model.PodGroup{want}
	s, err := scheduler.New(scheduler.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if d, err := s.Cycle(&snap); err != nil || len(d.Binds) != 0 {
		t.Fatalf("binds %+v, %v; want none: the running pod holds the one rdma/hca", d.Binds, err)
	}
	// The running pod now holds none: a new chunk, its request changed.
	hold.Request.Scalars = nil
	snap.RunningByNode = schedtest.OnNodes(snap.Nodes, hold)
	if d, err := s.Cycle(&snap); err != nil || len(d.Binds) != 1 {
		t.Fatalf("binds %+v, %v; want the pod bound once the running pod holds no rdma/hca", d.Binds, err)
	}
	// The node no longer advertises it: a new node list.
	hold.Request.Scalars = map[string]int64{"rdma/hca": 1}
	snap.RunningByNode = nil
	snap.Nodes = []model.Node{node}
	snap.Nodes[0].Allocatable = map[string]int64{"pods": 10}
	if d, err := s.Cycle(&snap); err != nil || len(d.Binds) != 0 {
		t.Fatalf("binds %+v, %v; want none on a node without rdma/hca", d.Binds, err)
	}
	// A node that counts nothing, then one that allows no pod.
	plain := model.Snapshot{Nodes: []model.Node{schedtest.Node("n", 64000, 1<<20).Obj()}, Pending: []model.PodGroup{schedtest.Group("p").Pods(1, model.Request{MilliCPU: 1}).Obj()}}
	if d, err := s.Cycle(&plain); err != nil || len(d.Binds) != 1 {
		t.Fatalf("binds %+v, %v; want the pod bound on a node without allocatable", d.Binds, err)
	}
	plain.Nodes = []model.Node{plain.Nodes[0]}
	plain.Nodes[0].Allocatable = map[string]int64{}
	if d, err := s.Cycle(&plain); err != nil || len(d.Binds) != 0 {
		t.Fatalf("binds %+v, %v; want none on a node that allows no pod", d.Binds, err)
	}
}

// TestResourcesJSON: snapshots carry a node's allocatable and a request's
// scalars and host ports; a snapshot without them reads as before.
func TestResourcesJSON(t *testing.T) {
	node := schedtest.Node("n", 64000, 1<<20).Obj()
	node.Allocatable = map[string]int64{"pods": 110, "ephemeral-storage": 1 << 40}
	req := model.Request{Scalars: map[string]int64{"ephemeral-storage": 1 << 30}, HostPorts: []model.HostPort{{Protocol: "UDP", IP: "10.0.0.1", Port: 53}}}
	in := model.Snapshot{Nodes: []model.Node{node}, Pending: []model.PodGroup{schedtest.Group("g").Pods(1, req).Obj()}}
	b, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	var out model.Snapshot
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	got := out.Pending[0].Pods[0].Request
	if !maps.Equal(out.Nodes[0].Allocatable, node.Allocatable) || !maps.Equal(got.Scalars, req.Scalars) || !slices.Equal(got.HostPorts, req.HostPorts) {
		t.Errorf("read back %+v and %+v from %s", out.Nodes[0], got, b)
	}
	var old model.Snapshot
	if err := json.Unmarshal([]byte(`{"nodes":[{"name":"n","milliCPU":1000,"memoryMiB":1024}],"pending":[{"name":"g","pods":[{"name":"p","request":{"milliCPU":100}}]}]}`), &old); err != nil {
		t.Fatal(err)
	}
	if old.Nodes[0].Allocatable != nil {
		t.Error("a node written without allocatable reads with one")
	}
	if d := cycleOnce(t, &old); len(d.Binds) != 1 {
		t.Errorf("a snapshot written before allocatable: binds %+v", d.Binds)
	}
}

// TestSharedReplicasCountTheirShareInQuota: a pod asking replicas of
// nvidia.com/gpu.shared is counted in its queue, while it waits, by the
// largest share any node gives (half a GPU where the least sharing factor
// is 2); once placed, by the share its GPU gives (a quarter on a GPU
// shared 4 ways), in the cycle that places it as in the cycles after, so
// that a queue admits as many such pods in one cycle as over several.
func TestSharedReplicasCountTheirShareInQuota(t *testing.T) {
	node := schedtest.Node("n", 64000, 1<<20).GPUs(8, "H100").Obj()
	for g := range node.GPUs {
		node.GPUs[g].SharesOnly, node.GPUs[g].ShareResource, node.GPUs[g].MinShareMilli = true, "nvidia.com/gpu.shared", 250
	}
	one := model.Request{MilliCPU: 100, GPUMilli: 500, Replicas: 1, ShareResource: "nvidia.com/gpu.shared"}
	var pending []model.PodGroup
	for _, name := range []string{"a", "b", "c", "d", "e"} {
		pending = append(pending, schedtest.Group(name).Queue("team").Created(int64(len(pending))).Pods(1, one).Obj())
	}
	h, err := schedtest.NewHarness(model.Snapshot{Nodes: []model.Node{node}, Pending: pending,
		Queues: []model.Queue{{Name: "team", Limit: model.Resources{GPUMilli: 1000}}}}, scheduler.Config{})
	if err != nil {
		t.Fatal(err)
	}
	// 250 + 500, 500 + 500 and 750 + 500: three fit the limit of a GPU.
	d, err := h.Cycle()
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Binds) != 3 {
		t.Fatalf("first cycle binds %+v, want a, b and c (a quarter of a GPU each, a half while waiting)", d.Binds)
	}
	var used int64
	for _, a := range schedtest.Running(&h.Snap) {
		used += a.Usage().GPUMilli
	}
	if used != 750 {
		t.Fatalf("the three running pods use %d milli-GPU of their queue, want 750", used)
	}
	if d, err = h.Cycle(); err != nil || len(d.Binds) != 0 {
		t.Fatalf("second cycle binds %+v (%v), want none: 750 + 500 is above the limit", d.Binds, err)
	}
}
