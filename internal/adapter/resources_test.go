package adapter

import (
	"errors"
	"maps"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpuplane/gpuplane/internal/scheduler/model"
	"github.com/gpuplane/gpuplane/internal/testutil/build"
)

func TestConvertNodeAllocatable(t *testing.T) {
	tests := []struct {
		name    string
		node    *corev1.Node
		want    map[string]int64
		wantErr string
	}{
		{name: "every resource but cpu, memory and GPUs, in the node's unit", node: build.Node("n").GPUs(8).Pods(32).
			Resources(rl("cpu", "64", "memory", "256Gi", "ephemeral-storage", "100Gi", "hugepages-1Gi", "4Gi", "rdma/hca", "8", "nvidia.com/mig-1g.10gb", "0")).Obj(),
			want: map[string]int64{"pods": 32, "ephemeral-storage": 100 << 30, "hugepages-1Gi": 4 << 30, "rdma/hca": 8}},
		{name: "a node that states no pods takes none", node: &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n"},
			Status: corev1.NodeStatus{Allocatable: rl("cpu", "1")}}, want: map[string]int64{}},
		{name: "a negative quantity is refused", node: build.Node("n").Resources(rl("ephemeral-storage", "-1")).Obj(),
			wantErr: "status.allocatable[ephemeral-storage]: must be 0 to"},
		{name: "more than any node is refused", node: build.Node("n").Resources(rl("example.com/dongle", "2e18")).Obj(),
			wantErr: "status.allocatable[example.com/dongle]: must be 0 to"},
	}
	many := build.Node("n").Obj()
	for i := range model.MaxScalarNames + 1 {
		many.Status.Allocatable[corev1.ResourceName("example.com/r"+strings.Repeat("x", i))] = *many.Status.Allocatable.Pods()
	}
	tests = append(tests, struct {
		name    string
		node    *corev1.Node
		want    map[string]int64
		wantErr string
	}{name: "too many resources are refused", node: many, wantErr: "status.allocatable: more than 128 resources"})
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m, _, err := convertNode(tc.node)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("convertNode() error = %v, want one saying %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if m.Allocatable == nil || !maps.Equal(m.Allocatable, tc.want) {
				t.Errorf("Allocatable = %v, want %v", m.Allocatable, tc.want)
			}
		})
	}
}

// TestHoldingsCountPodsScalarsAndPorts: a running pod that over-fills a
// scalar resource or binds a host port another pod holds counts for what
// is left, as one over its CPU does; one beyond the node's pods is left
// out, so that the snapshot stays one the core accepts.
func TestHoldingsCountPodsScalarsAndPorts(t *testing.T) {
	node := &model.Node{Name: "n", MilliCPU: 8000, MemoryMiB: 8192, Allocatable: map[string]int64{"pods": 3, "rdma/hca": 2}}
	pod := func(name string, req model.Request) *podInfo {
		return &podInfo{key: "ns/" + name, req: req, pod: build.Pod("ns", name).NodeName("n").Obj()}
	}
	port := []model.HostPort{{Protocol: "TCP", IP: model.AllIPs, Port: 7777}}
	pods := map[string]*podInfo{
		"ns/a": pod("a", model.Request{Scalars: map[string]int64{"rdma/hca": 2}}),
		"ns/b": pod("b", model.Request{Scalars: map[string]int64{"rdma/hca": 1}}), // none left: counts for none
		"ns/c": pod("c", model.Request{HostPorts: port}),
		"ns/d": pod("d", model.Request{HostPorts: []model.HostPort{{Protocol: "TCP", IP: "10.0.0.1", Port: 7777}}}), // c holds it on all addresses
		"ns/e": pod("e", model.Request{}),                                                                           // a, b and c fill the node's 3 pods
		"ns/f": pod("f", model.Request{}),
	}
	h := newNodeHoldings(node, "gpuplane-scheduler", nil, nil)
	held, over := h.resolve(pods)
	var got []string
	for _, e := range held {
		got = append(got, e.pi.key)
	}
	if strings.Join(got, " ") != "ns/a ns/b ns/c" || strings.Join(over, " ") != "ns/d ns/e ns/f" {
		t.Errorf("held %v, left out %v; want a, b and c held, d, e and f left out", got, over)
	}
}

// TestHeldReplicasInTheNodesUnit: on a node time-sliced 4 ways under
// nvidia.com/gpu, a pod of ours asking nvidia.com/gpu: 2 holds the two
// replicas the node's record names, not two whole GPUs.
func TestHeldReplicasInTheNodesUnit(t *testing.T) {
	m, _, err := convertNode(build.Node("n").GPUs(32).Label(LabelGPUReplicas, "4").Resources(rl("cpu", "64", "memory", "256Gi")).Obj())
	if err != nil {
		t.Fatal(err)
	}
	req, err := podRequest(newPod("ns", "p").GPUs(2).Obj(), 1)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		record string
		want   []model.GPUShare
		ok     bool
	}{
		{"3:500", []model.GPUShare{{Index: 3, Milli: 500}}, true},
		{"1:250,6:250", []model.GPUShare{{Index: 1, Milli: 250}, {Index: 6, Milli: 250}}, true},
		{"3:250", nil, false},
		{"3", nil, false}, // all four replicas of GPU 3
	} {
		held, err := parseShares(tc.record, &m)
		if err != nil {
			t.Fatal(err)
		}
		got, ok := heldAs(&m, &req, held)
		if ok != tc.ok || ok && !equalShares(got, tc.want) {
			t.Errorf("heldAs(%q) = %v, %t; want %v, %t", tc.record, got, ok, tc.want, tc.ok)
		}
	}
	if got := autoShares(&m, []int64{0, 1000, 1000, 1000, 1000, 1000, 1000, 1000}, make([]int, 8), &req); !equalShares(got, []model.GPUShare{{Index: 1, Milli: 500}}) {
		t.Errorf("autoShares = %v, want two replicas of GPU 1", got)
	}
}

// TestAutoSharesReplicasOfSeveralGPUs: another scheduler's pod asking for
// more replicas than one GPU has holds them from several GPUs, and one
// asking for more than the node has left holds what is left, so that the
// node is full for the next pod as kube-scheduler counts it.
func TestAutoSharesReplicasOfSeveralGPUs(t *testing.T) {
	m, _, err := convertNode(build.Node("n").GPUs(8).Label(LabelGPUReplicas, "2").Resources(rl("cpu", "64", "memory", "256Gi")).Obj())
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		gpus int
		free []int64
		want []model.GPUShare
	}{
		{3, []int64{1000, 1000, 1000, 1000}, []model.GPUShare{{Index: 0, Milli: 1000}, {Index: 1, Milli: 500}}},
		{3, []int64{500, 0, 1000, 1000}, []model.GPUShare{{Index: 0, Milli: 500}, {Index: 2, Milli: 1000}}},
		{9, []int64{1000, 1000, 1000, 1000}, []model.GPUShare{{Index: 0, Milli: 1000}, {Index: 1, Milli: 1000}, {Index: 2, Milli: 1000}, {Index: 3, Milli: 1000}}},
	} {
		req, err := podRequest(newPod("ns", "p").GPUs(tc.gpus).Obj(), 1)
		if err != nil {
			t.Fatal(err)
		}
		if got := autoShares(&m, tc.free, make([]int, 4), &req); !equalShares(got, tc.want) {
			t.Errorf("%d replicas on free %v: autoShares = %v, want %v", tc.gpus, tc.free, got, tc.want)
		}
	}
}

func equalShares(a, b []model.GPUShare) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// FuzzNodeAndPodResources: whatever a node's allocatable, a pod's
// requests of other resources and its ports say, conversion gives values
// within the core's bounds (model.ValidateResources,
// model.ValidateHostPorts) or refuses them naming the field.
func FuzzNodeAndPodResources(f *testing.F) {
	f.Add("ephemeral-storage", "100Gi", "10Gi", int32(7777), "TCP", "")
	f.Add("hugepages-2Mi", "1e30", "-1", int32(0), "UDP", "10.0.0.1")
	f.Add("example.com/dongle", "2", "1", int32(70000), "QUIC", "::1")
	f.Add("pods", "-5", "0.5", int32(-1), "", "")
	f.Fuzz(func(t *testing.T, name, alloc, req string, port int32, protocol, ip string) {
		rn := corev1.ResourceName(name)
		n := build.Node("n").Obj()
		if q, ok := quantity(alloc); ok {
			n.Status.Allocatable[rn] = q
		}
		if m, _, err := convertNode(n); err == nil {
			if err := model.ValidateResources("allocatable", m.Allocatable); err != nil {
				t.Fatalf("convertNode accepted %s: %s: %v", name, alloc, err)
			}
		}
		p := build.Pod("ns", "p").Obj()
		if q, ok := quantity(req); ok {
			p.Spec.Containers[0].Resources.Requests[rn] = q
		}
		p.Spec.Containers[0].Ports = []corev1.ContainerPort{{ContainerPort: 1, HostPort: port, Protocol: corev1.Protocol(protocol), HostIP: ip}}
		r, err := podRequest(p, 1)
		var bad *BadInputError
		if err != nil && !errors.As(err, &bad) {
			t.Fatalf("podRequest error %v is not a BadInputError", err)
		}
		if err != nil {
			return
		}
		if err := model.ValidateResources("scalars", r.Scalars); err != nil {
			t.Fatalf("podRequest accepted %s: %s: %v", name, req, err)
		}
		if err := model.ValidateHostPorts("hostPorts", r.HostPorts); err != nil {
			t.Fatalf("podRequest accepted port %d/%q: %v", port, protocol, err)
		}
	})
}

// TestLoopCountsWhatRunningPodsHold: an extended resource the core does
// not otherwise model is counted against what the node's running pods
// hold, not against its allocatable alone: with the node's one rdma/hca
// held by a pod another scheduler placed, a pod asking for it waits saying
// so, and is bound once that pod is gone.
func TestLoopCountsWhatRunningPodsHold(t *testing.T) {
	node := build.Node("a").Resources(rl("nvidia.com/gpu", "8", "cpu", "64", "memory", "256Gi", "rdma/hca", "1")).Obj()
	f := newLoopFixture(t, Config{}, node)
	holder := build.Pod("ns", "holder").SchedulerName("default-scheduler").NodeName("a").Limit("rdma/hca", "1").Phase(corev1.PodRunning).Obj()
	f.cache.upsertPod(holder)
	f.cache.upsertPod(newPod("ns", "wants").Limit("rdma/hca", "1").Obj())
	f.cycle()
	if len(f.api.binds) != 0 {
		t.Fatalf("bound %v though the node's one rdma/hca is held", f.api.binds)
	}
	if got := f.status.conditions["ns/wants"]; !strings.Contains(got, "0/1 nodes available: 1 insufficient rdma/hca") {
		t.Errorf("the waiting pod says %q, want insufficient rdma/hca", got)
	}
	f.cache.deletePod(holder)
	f.cycle()
	if len(f.api.binds) != 1 || !strings.HasPrefix(f.api.binds[0], "ns/wants a") {
		t.Errorf("bound %v, want ns/wants on a", f.api.binds)
	}
}
