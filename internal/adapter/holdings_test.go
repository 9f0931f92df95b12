package adapter

import (
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpuplane/gpuplane/api/scheduling/v1alpha1"
	"github.com/gpuplane/gpuplane/internal/scheduler/model"
)

// heldPod is a running pod of ours bound to the node, asking for req;
// opts change it.
func heldPod(key string, req model.Request, opts ...func(*corev1.Pod)) *podInfo {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: key, Annotations: map[string]string{}},
		Spec: corev1.PodSpec{SchedulerName: v1alpha1.SchedulerName, NodeName: "n"}}
	for _, o := range opts {
		o(p)
	}
	return &podInfo{pod: p, key: key, req: req}
}

func notBound(p *corev1.Pod)   { p.Spec.NodeName = "" }
func othersPod(p *corev1.Pod)  { p.Spec.SchedulerName = "default-scheduler" }
func namesClaim(p *corev1.Pod) { p.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: "gpu"}} }
func recorded(s string) func(*corev1.Pod) {
	return func(p *corev1.Pod) { p.Annotations[HeldAnnotation] = s }
}
func chosen(s string) func(*corev1.Pod) {
	return func(p *corev1.Pod) { p.Annotations[GPUsAnnotation] = s }
}

// TestNodeHoldings covers each source of what a running pod holds and
// each conflict between two of them, in the precedence nodeHoldings
// documents.
func TestNodeHoldings(t *testing.T) {
	// Four GPUs, time-sliced as four replicas each under nvidia.com/gpu.
	node := model.Node{Name: "n", MilliCPU: 8000, MemoryMiB: 1 << 20}
	for i := range 4 {
		node.GPUs = append(node.GPUs, model.GPU{Index: i, MemoryMiB: 81920, MinShareMilli: 250, ShareResource: string(ResourceGPU)})
	}
	whole := func(idx ...int) []model.GPUShare {
		out := make([]model.GPUShare, len(idx))
		for k, i := range idx {
			out[k] = model.GPUShare{Index: i, Milli: model.MilliPerGPU, MemoryMiB: 81920}
		}
		return out
	}
	gpus := func(n int) model.Request { return model.Request{MilliCPU: 1000, GPUs: n} }
	type want struct {
		key    string
		shares []model.GPUShare
		req    model.Request
	}
	tests := []struct {
		name    string
		pods    []*podInfo
		claims  map[string][]model.GPUShare
		assumed map[string]assumption
		want    []want // in the order the pods take their part
		over    []string
	}{
		// Each source alone.
		{name: "claims the pod names: their devices, added to its request",
			pods:   []*podInfo{heldPod("a", model.Request{MilliCPU: 1000}, namesClaim)},
			claims: map[string][]model.GPUShare{"a": whole(2)},
			want:   []want{{"a", whole(2), gpus(1)}}},
		{name: "claims the pod names, none allocated: no GPU",
			pods: []*podInfo{heldPod("a", model.Request{MilliCPU: 1000}, namesClaim)},
			want: []want{{"a", nil, model.Request{MilliCPU: 1000}}}},
		{name: "the node's record",
			pods: []*podInfo{heldPod("a", gpus(1), recorded("3"))},
			want: []want{{"a", whole(3), gpus(1)}}},
		{name: "an extended-resource claim",
			pods:   []*podInfo{heldPod("a", gpus(1))},
			claims: map[string][]model.GPUShare{"a": whole(1)},
			want:   []want{{"a", whole(1), gpus(1)}}},
		{name: "a bind in flight",
			pods:    []*podInfo{heldPod("a", gpus(1), notBound)},
			assumed: map[string]assumption{"a": {node: "n", shares: whole(2)}},
			want:    []want{{"a", whole(2), gpus(1)}}},
		{name: "the scheduler's annotation",
			pods: []*podInfo{heldPod("a", gpus(1), chosen("1"))},
			want: []want{{"a", whole(1), gpus(1)}}},
		{name: "automatic shares: the lowest free GPUs",
			pods: []*podInfo{heldPod("a", gpus(2))},
			want: []want{{"a", whole(0, 1), gpus(2)}}},
		{name: "automatic share of a GPU",
			pods: []*podInfo{heldPod("a", model.Request{MilliCPU: 1000, GPUMilli: 250})},
			want: []want{{"a", []model.GPUShare{{Index: 0, Milli: 250}}, model.Request{MilliCPU: 1000, GPUMilli: 250}}}},
		{name: "no GPU asked: none held",
			pods: []*podInfo{heldPod("a", model.Request{MilliCPU: 1000})},
			want: []want{{"a", nil, model.Request{MilliCPU: 1000}}}},

		// Conflicts.
		{name: "claims the pod names outrank its record and annotation",
			pods:   []*podInfo{heldPod("a", model.Request{MilliCPU: 1000}, namesClaim, recorded("3"), chosen("1"))},
			claims: map[string][]model.GPUShare{"a": whole(2)},
			want:   []want{{"a", whole(2), gpus(1)}}},
		{name: "claims the pod names outrank a bind in flight",
			pods:    []*podInfo{heldPod("a", model.Request{MilliCPU: 1000}, namesClaim, notBound)},
			claims:  map[string][]model.GPUShare{"a": whole(2)},
			assumed: map[string]assumption{"a": {node: "n", shares: whole(0)}},
			want:    []want{{"a", whole(2), gpus(1)}}},
		{name: "the record outranks the scheduler's annotation",
			pods: []*podInfo{heldPod("a", gpus(1), recorded("3"), chosen("1"))},
			want: []want{{"a", whole(3), gpus(1)}}},
		{name: "the record outranks an extended-resource claim",
			pods:   []*podInfo{heldPod("a", gpus(1), recorded("3"))},
			claims: map[string][]model.GPUShare{"a": whole(1)},
			want:   []want{{"a", whole(3), gpus(1)}}},
		{name: "an extended-resource claim outranks the scheduler's annotation",
			pods:   []*podInfo{heldPod("a", gpus(1), chosen("2"))},
			claims: map[string][]model.GPUShare{"a": whole(1)},
			want:   []want{{"a", whole(1), gpus(1)}}},
		{name: "a record that does not match the request gives way to the annotation",
			pods: []*podInfo{heldPod("a", gpus(2), recorded("3"), chosen("0,1"))},
			want: []want{{"a", whole(0, 1), gpus(2)}}},
		{name: "a record that does not parse gives way to the annotation",
			pods: []*podInfo{heldPod("a", gpus(1), recorded("nine"), chosen("1"))},
			want: []want{{"a", whole(1), gpus(1)}}},
		{name: "a record that does not match sets an extended-resource claim aside",
			pods:   []*podInfo{heldPod("a", gpus(2), recorded("3"), chosen("0,1"))},
			claims: map[string][]model.GPUShare{"a": whole(1, 2)},
			want:   []want{{"a", whole(0, 1), gpus(2)}}},
		{name: "a record that does not parse leaves an extended-resource claim",
			pods:   []*podInfo{heldPod("a", gpus(1), recorded("nine"), chosen("2"))},
			claims: map[string][]model.GPUShare{"a": whole(1)},
			want:   []want{{"a", whole(1), gpus(1)}}},
		{name: "a pod not bound: its record is not read, the bind in flight decides",
			pods:    []*podInfo{heldPod("a", gpus(1), notBound, recorded("3"))},
			assumed: map[string]assumption{"a": {node: "n", shares: whole(2)}},
			want:    []want{{"a", whole(2), gpus(1)}}},
		{name: "a bind in flight outranks the scheduler's annotation",
			pods:    []*podInfo{heldPod("a", gpus(1), notBound, chosen("1"))},
			assumed: map[string]assumption{"a": {node: "n", shares: whole(2)}},
			want:    []want{{"a", whole(2), gpus(1)}}},
		{name: "a bound pod still assumed: its annotation, not the bind",
			pods:    []*podInfo{heldPod("a", gpus(1), chosen("1"))},
			assumed: map[string]assumption{"a": {node: "n", shares: whole(2)}},
			want:    []want{{"a", whole(1), gpus(1)}}},
		{name: "another scheduler's pod given a replica holds the replica",
			pods: []*podInfo{heldPod("a", gpus(1), othersPod, recorded("0:250"))},
			want: []want{{"a", []model.GPUShare{{Index: 0, Milli: 250}},
				model.Request{MilliCPU: 1000, GPUMilli: 250, Replicas: 1, ShareResource: string(ResourceGPU)}}}},
		{name: "our own pod given a replica holds the whole GPU",
			pods: []*podInfo{heldPod("a", gpus(1), recorded("0:250"))},
			want: []want{{"a", whole(0), gpus(1)}}},
		{name: "known shares first: automatic shares keep off them",
			pods: []*podInfo{heldPod("a", gpus(1)), heldPod("b", gpus(1), chosen("0"))},
			want: []want{{"b", whole(0), gpus(1)}, {"a", whole(1), gpus(1)}}},
		{name: "two pods on one GPU: the second by key is left out",
			pods: []*podInfo{heldPod("b", gpus(1), recorded("2")), heldPod("a", gpus(1), chosen("2")), heldPod("c", gpus(1))},
			want: []want{{"a", whole(2), gpus(1)}, {"c", whole(0), gpus(1)}},
			over: []string{"b"}},
		{name: "a pod above the node's CPU and memory counts for what is left: the node is full, as kube-scheduler counts it",
			pods: []*podInfo{heldPod("a", model.Request{MilliCPU: 6000, MemoryMiB: 1 << 19}), heldPod("b", model.Request{MilliCPU: 6000, MemoryMiB: 1 << 20})},
			want: []want{{"a", nil, model.Request{MilliCPU: 6000, MemoryMiB: 1 << 19}}, {"b", nil, model.Request{MilliCPU: 2000, MemoryMiB: node.MemoryMiB - 1<<19}}}},
		{name: "a pod above the node's CPU whose GPUs do not fit is left out",
			pods: []*podInfo{heldPod("a", model.Request{MilliCPU: 8000}, chosen("1")), heldPod("b", model.Request{MilliCPU: 1000}, chosen("1"))},
			want: []want{{"a", whole(1), model.Request{MilliCPU: 8000}}},
			over: []string{"b"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			pods := map[string]*podInfo{}
			for _, pi := range tc.pods {
				pods[pi.key] = pi
			}
			h := newNodeHoldings(&node, v1alpha1.SchedulerName, tc.claims, tc.assumed)
			held, over := h.resolve(pods)
			if len(held) != len(tc.want) {
				t.Fatalf("%d pods held, want %d: %+v", len(held), len(tc.want), held)
			}
			for i, w := range tc.want {
				e := held[i]
				if e.pi.key != w.key || !reflect.DeepEqual(e.shares, w.shares) || !reflect.DeepEqual(e.req, w.req) {
					t.Errorf("held[%d] = %s on %+v as %+v, want %s on %+v as %+v", i, e.pi.key, e.shares, e.req, w.key, w.shares, w.req)
				}
			}
			if !reflect.DeepEqual(over, tc.over) {
				t.Errorf("left out %v, want %v", over, tc.over)
			}
		})
	}
}

// TestNodeHoldingsTake: what one take counts, another cannot have.
func TestNodeHoldingsTake(t *testing.T) {
	node := model.Node{Name: "n", MilliCPU: 4000, MemoryMiB: 1024, GPUs: []model.GPU{{Index: 0}, {Index: 1, MIGSlices: 7}}}
	h := newNodeHoldings(&node, v1alpha1.SchedulerName, nil, nil)
	steps := []struct {
		name   string
		req    model.Request
		shares []model.GPUShare
		ok     bool
	}{
		{"a share", model.Request{MilliCPU: 1000}, []model.GPUShare{{Index: 0, Milli: 600}}, true},
		{"more than the GPU has left", model.Request{}, []model.GPUShare{{Index: 0, Milli: 500}}, false},
		{"the rest of the GPU", model.Request{}, []model.GPUShare{{Index: 0, Milli: 400}}, true},
		{"MIG slices", model.Request{}, []model.GPUShare{{Index: 1, MIGSlices: 4}}, true},
		{"more slices than left", model.Request{}, []model.GPUShare{{Index: 1, MIGSlices: 4}}, false},
		{"a GPU the node lacks", model.Request{}, []model.GPUShare{{Index: 2, Milli: 1}}, false},
		{"more CPU than left", model.Request{MilliCPU: 3001}, nil, false},
		{"more memory than the node", model.Request{MemoryMiB: 1025}, nil, false},
		{"the CPU left", model.Request{MilliCPU: 3000}, nil, true},
	}
	for _, s := range steps {
		if ok := h.take(&s.req, s.shares); ok != s.ok {
			t.Fatalf("%s: take = %v, want %v", s.name, ok, s.ok)
		}
	}
}

// TestNodeHoldingsOverfilled: a running pod that asks for more of a
// scalar resource than is left, or binds a host port another pod holds,
// is counted all the same, for what is left: its CPU and memory, the rest
// of the scalar, and the ports that refuse what its own refuse.
func TestNodeHoldingsOverfilled(t *testing.T) {
	node := model.Node{Name: "n", MilliCPU: 4000, MemoryMiB: 4096,
		Allocatable: map[string]int64{model.ResourcePods: 10, "example.com/nic": 2, "ephemeral-storage": 100}}
	port := func(ip string) model.HostPort { return model.HostPort{Protocol: "TCP", IP: ip, Port: 80} }
	pods := map[string]*podInfo{
		"a": heldPod("a", model.Request{MilliCPU: 1000, Scalars: map[string]int64{"example.com/nic": 2}, HostPorts: []model.HostPort{port("10.0.0.1")}}),
		"b": heldPod("b", model.Request{MilliCPU: 1000, MemoryMiB: 1024, Scalars: map[string]int64{"example.com/nic": 1, "ephemeral-storage": 60}}),
		"c": heldPod("c", model.Request{MilliCPU: 1000, Scalars: map[string]int64{"ephemeral-storage": 60}, HostPorts: []model.HostPort{port(model.AllIPs)}}),
	}
	h := newNodeHoldings(&node, v1alpha1.SchedulerName, nil, nil)
	held, over := h.resolve(pods)
	if len(over) > 0 {
		t.Fatalf("left out %v; every pod should count", over)
	}
	got := map[string]model.Request{}
	for _, e := range held {
		got[e.pi.key] = e.req
	}
	want := map[string]model.Request{
		"a": {MilliCPU: 1000, Scalars: map[string]int64{"example.com/nic": 2}},
		"b": {MilliCPU: 1000, MemoryMiB: 1024, Scalars: map[string]int64{"ephemeral-storage": 60}},
		"c": {MilliCPU: 1000, Scalars: map[string]int64{"ephemeral-storage": 40}, HostPorts: []model.HostPort{port(model.AllIPs)}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("held\n%v\nwant\n%v", got, want)
	}
	if h.cpu != 1000 || h.mem != 3072 || h.res.pods != 7 || h.res.free["ephemeral-storage"] != 0 || h.res.free["example.com/nic"] != 0 {
		t.Fatalf("left cpu %d, memory %d, pods %d, free %v", h.cpu, h.mem, h.res.pods, h.res.free)
	}
	for _, ip := range []string{"10.0.0.1", "10.0.0.2", model.AllIPs} {
		if h.res.fits(&model.Request{HostPorts: []model.HostPort{port(ip)}}) {
			t.Errorf("a new pod binding %s fits; the pods hold it", port(ip))
		}
	}
}

// TestNodeHoldingsSharedReplicas: a running pod asking for replicas of
// nvidia.com/gpu.shared holds them in the node's unit: from one GPU when
// one has them free, else from several as the kubelet hands them out, or
// as the node's record says it gave them across GPUs.
func TestNodeHoldingsSharedReplicas(t *testing.T) {
	// Two GPUs giving four replicas each under nvidia.com/gpu.shared.
	node := model.Node{Name: "n", MilliCPU: 8000, MemoryMiB: 1 << 20}
	for i := range 2 {
		node.GPUs = append(node.GPUs, model.GPU{Index: i, SharesOnly: true, MinShareMilli: 250, ShareResource: string(ResourceGPUShared)})
	}
	replicas := func(n int) model.Request {
		return model.Request{MilliCPU: 100, GPUMilli: 1000, Replicas: n, ShareResource: string(ResourceGPUShared)}
	}
	share := func(pairs ...int64) []model.GPUShare {
		var out []model.GPUShare
		for k := 0; k < len(pairs); k += 2 {
			out = append(out, model.GPUShare{Index: int(pairs[k]), Milli: pairs[k+1]})
		}
		return out
	}
	for _, tc := range []struct {
		name string
		pods []*podInfo
		want map[string][]model.GPUShare
	}{
		{name: "from one GPU when one has them, else from several",
			pods: []*podInfo{heldPod("a", replicas(3), othersPod), heldPod("b", replicas(3), othersPod), heldPod("c", replicas(2), othersPod)},
			want: map[string][]model.GPUShare{"a": share(0, 750), "b": share(1, 750), "c": share(0, 250, 1, 250)}},
		{name: "the node's record across two GPUs",
			pods: []*podInfo{heldPod("a", replicas(2), recorded("0:250,1:250")), heldPod("b", replicas(3), othersPod)},
			want: map[string][]model.GPUShare{"a": share(0, 250, 1, 250), "b": share(0, 750)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pods := map[string]*podInfo{}
			for _, pi := range tc.pods {
				pods[pi.key] = pi
			}
			held, over := newNodeHoldings(&node, v1alpha1.SchedulerName, nil, nil).resolve(pods)
			if len(over) > 0 {
				t.Fatalf("left out %v; every pod fits the node's replicas", over)
			}
			got := map[string][]model.GPUShare{}
			for _, e := range held {
				got[e.pi.key] = e.shares
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("held %v, want %v", got, tc.want)
			}
		})
	}
}
