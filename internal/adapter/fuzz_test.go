package adapter

import (
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpuplane/gpuplane/api/gpunode"
	"github.com/gpuplane/gpuplane/api/scheduling/v1alpha1"
	"github.com/gpuplane/gpuplane/internal/scheduler/model"
)

// Everything the scheduler reads from a Node, Pod, Queue or PodGroup is
// fuzzed here: whatever a writer put there, conversion returns a model
// within bounds or an error, never a panic or an allocation in proportion
// to a number it was given.

// quantity parses s as a quantity, or reports that the API server would
// have refused it.
func quantity(s string) (resource.Quantity, bool) {
	q, err := resource.ParseQuantity(s)
	return q, err == nil
}

func FuzzConvertNode(f *testing.F) {
	f.Add("8", "", "64", "256Gi", "8", "", "81559", `{"v":1,"gpus":8,"groups":[{"gpus":[0,1,2,3,4,5,6,7],"nvlinks":18}],"numa":[0,0,0,0,1,1,1,1]}`)
	f.Add("", "32", "1", "1Gi", "", "4", "", "")
	f.Add("5000000", "", "1e30", "-1", "5000000", "0", "-80", `{"v":1,"gpus":-1}`)
	f.Add("32", "", "64", "1Ti", "8", "4", "40960", `{"v":1,"gpus":8}`)
	f.Add("2", "6", "64", "1Ti", "4", "", "40960", "") // replicas derived from the GPU count
	f.Fuzz(func(t *testing.T, gpus, shared, cpu, mem, count, replicas, gpuMem, topo string) {
		alloc := corev1.ResourceList{}
		for name, s := range map[corev1.ResourceName]string{ResourceGPU: gpus, ResourceGPUShared: shared, corev1.ResourceCPU: cpu,
			corev1.ResourceMemory: mem, "nvidia.com/mig-1g.10gb": count} {
			if q, ok := quantity(s); ok {
				alloc[name] = q
			}
		}
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n",
			Labels:      map[string]string{LabelGPUCount: count, LabelGPUReplicas: replicas, LabelGPUMemory: gpuMem},
			Annotations: map[string]string{gpunode.TopologyAnnotation: topo}},
			Status: corev1.NodeStatus{Allocatable: alloc}}
		if replicas == "" {
			delete(n.Labels, LabelGPUReplicas) // the factor derived from the GPU count
		}
		m, _, err := convertNode(n)
		if err != nil {
			return
		}
		if len(m.GPUs) > gpunode.MaxGPUs || m.MilliCPU < 0 || m.MemoryMiB < 0 {
			t.Fatalf("accepted node out of bounds: %d GPUs, %d milli-CPU, %d MiB", len(m.GPUs), m.MilliCPU, m.MemoryMiB)
		}
		for _, g := range m.GPUs {
			if g.ShareResource != "" && (g.MinShareMilli < 1 || g.MinShareMilli > model.MilliPerGPU) {
				t.Fatalf("GPU %d shared under %s takes %d milli a replica, want 1 to %d", g.Index, g.ShareResource, g.MinShareMilli, model.MilliPerGPU)
			}
		}
		if m.Topology != nil && m.Topology.Len() != len(m.GPUs) {
			t.Fatalf("topology of %d GPUs on a node of %d", m.Topology.Len(), len(m.GPUs))
		}
	})
}

func FuzzPodRequest(f *testing.F) {
	f.Add("2", "", "", "1500m", "3Gi", "2", 4)
	f.Add("", "1", "", "1", "1Gi", "", 4)
	f.Add("", "", "1", "1", "1Gi", "1", 1)
	f.Add("1e30", "", "", "1e30", "1e30", "0.5", 1)
	f.Add("-1", "", "", "-1", "-1Gi", "-2", 0)
	f.Fuzz(func(t *testing.T, gpus, shared, mig, cpu, mem, limitGPU string, replicas int) {
		reqs, limits := corev1.ResourceList{}, corev1.ResourceList{}
		for name, s := range map[corev1.ResourceName]string{ResourceGPU: gpus, ResourceGPUShared: shared, "nvidia.com/mig-3g.40gb": mig,
			corev1.ResourceCPU: cpu, corev1.ResourceMemory: mem} {
			if q, ok := quantity(s); ok {
				reqs[name] = q
			}
		}
		if q, ok := quantity(limitGPU); ok {
			limits[ResourceGPU] = q
		}
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p"},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Resources: corev1.ResourceRequirements{Requests: reqs, Limits: limits}}}}}
		r, err := podRequest(p, max(1, min(replicas, gpunode.MaxReplicas)))
		if err != nil {
			return
		}
		if r.MilliCPU < 0 || r.MemoryMiB < 0 || r.GPUs < 0 || r.GPUMilli < 0 || r.GPUs > gpunode.MaxGPUs*gpunode.MaxReplicas || r.MIGSlices < 0 || r.MIGSlices > 7 {
			t.Fatalf("accepted request out of bounds: %+v", r)
		}
	})
}

func FuzzParseShares(f *testing.F) {
	for _, s := range []string{"0,1", "1:250", "2:m3", "0:-5000", "0:m99", "0,0", "7", "x", "1:1001", ""} {
		f.Add(s)
	}
	node := &model.Node{Name: "n", GPUs: []model.GPU{{Index: 0, MemoryMiB: 100}, {Index: 1}, {Index: 2, MIGSlices: 7}}}
	f.Fuzz(func(t *testing.T, s string) {
		shares, err := parseShares(s, node)
		if err != nil {
			return
		}
		seen := map[int]bool{}
		for _, sh := range shares {
			if sh.Index < 0 || sh.Index >= len(node.GPUs) || seen[sh.Index] || sh.Milli < 0 || sh.Milli > model.MilliPerGPU || sh.MIGSlices < 0 || sh.MIGSlices > 7 {
				t.Fatalf("parseShares(%q) = %+v", s, shares)
			}
			seen[sh.Index] = true
		}
		out := formatShares(shares)
		back, err := parseShares(out, node)
		if err != nil || !slices.Equal(back, shares) {
			t.Fatalf("round trip of %q through %q: %v, %+v; want %+v", s, out, err, back, shares)
		}
		if again := formatShares(back); again != out {
			t.Fatalf("formatShares is not stable: %q, then %q", out, again)
		}
	})
}

func FuzzQueueAndPodGroup(f *testing.F) {
	f.Add("8", "16", "100", "4Gi")
	f.Add("1e30", "-1", "1e30", "1e30")
	f.Fuzz(func(t *testing.T, guaranteed, limit, cpu, mem string) {
		g, okG := quantity(guaranteed)
		l, okL := quantity(limit)
		res := v1alpha1.QueueResource{Name: string(ResourceGPU)}
		if okG {
			res.Guaranteed = &g
		}
		if okL {
			res.Limit = &l
		}
		q := &v1alpha1.Queue{ObjectMeta: metav1.ObjectMeta{Name: "q"}, Spec: v1alpha1.QueueSpec{Resources: []v1alpha1.QueueResource{res}}}
		if mq, err := modelQueue(q); err == nil && (mq.Guaranteed.GPUMilli < 0 || mq.Limit.GPUMilli < 0) {
			t.Fatalf("accepted negative quota %+v", mq)
		}
		rl := corev1.ResourceList{}
		for name, s := range map[corev1.ResourceName]string{corev1.ResourceCPU: cpu, corev1.ResourceMemory: mem, ResourceGPU: guaranteed} {
			if v, ok := quantity(s); ok {
				rl[name] = v
			}
		}
		if r, err := boundedResources("spec.minResources", rl); err == nil && (r.MilliCPU < 0 || r.MemoryMiB < 0 || r.GPUMilli < 0) {
			t.Fatalf("accepted negative resources %+v", r)
		}
	})
}
