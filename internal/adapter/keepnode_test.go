package adapter

import (
	"testing"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/gpuplane/gpuplane/internal/scheduler/model"
)

func TestKeepNode(t *testing.T) {
	// Whole GPUs as the core gives them: their capacity and all their
	// memory.
	whole := []model.GPUShare{{Index: 0, Milli: model.MilliPerGPU, MemoryMiB: 81408}, {Index: 1, Milli: model.MilliPerGPU, MemoryMiB: 81408}}
	tests := []struct {
		name   string
		g      *groupInfo
		shares []model.GPUShare
		want   bool
	}{
		{"a lone pod on whole GPUs", &groupInfo{pending: make([]*podInfo, 1)}, whole, false},
		{"a lone pod without GPUs", &groupInfo{pending: make([]*podInfo, 1)}, nil, false},
		{"a lone pod on a MIG instance", &groupInfo{pending: make([]*podInfo, 1)}, []model.GPUShare{{Index: 0, MIGSlices: 3}}, false},
		{"a PodGroup of one", &groupInfo{pgKey: "ns/one", minMember: 1, pending: make([]*podInfo, 1)}, whole, false},
		{"a gang member", &groupInfo{pgKey: "ns/g", minMember: 4, pending: make([]*podInfo, 4)}, whole, true},
		{"a gang's last member", &groupInfo{pgKey: "ns/g", minMember: 0, pending: make([]*podInfo, 1), bound: make([]*podInfo, 3)}, whole, true},
		{"a quarter of a GPU", &groupInfo{pending: make([]*podInfo, 1)}, []model.GPUShare{{Index: 2, Milli: 250}}, true},
		{"a share of GPU memory only", &groupInfo{pending: make([]*podInfo, 1)}, []model.GPUShare{{Index: 2, MemoryMiB: 20000}}, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := keepNode(tc.g, tc.shares); got != tc.want {
				t.Errorf("keepNode = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestBindingCarriesDoNotDisrupt: the annotations reach the pod with its
// binding, in the same request, only when keepNode says so.
func TestBindingCarriesDoNotDisrupt(t *testing.T) {
	for _, keep := range []bool{true, false} {
		pod := newPod("ns", "p").UID("uid-p").Obj()
		client := fake.NewClientset(pod)
		w := &apiWriter{client: client, log: logr.Discard(), metrics: newMetrics()}
		if err := w.doBind(t.Context(), bindTask{pod: pod, assumption: assumption{node: "n"}, keepNode: keep}); err != nil {
			t.Fatal(err)
		}
		var got *corev1.Binding
		for _, a := range client.Actions() {
			if c, ok := a.(k8stesting.CreateAction); ok && a.GetSubresource() == "binding" {
				got = c.GetObject().(*corev1.Binding)
			}
		}
		if got == nil {
			t.Fatal("no binding sent")
		}
		if v, ok := got.Annotations[DoNotDisruptAnnotation]; ok != keep || (keep && v != "true") {
			t.Errorf("keepNode %v: binding annotations %v", keep, got.Annotations)
		}
		if v, ok := got.Annotations[SafeToEvictAnnotation]; ok != keep || (keep && v != "false") {
			t.Errorf("keepNode %v: binding annotations %v", keep, got.Annotations)
		}
	}
}
