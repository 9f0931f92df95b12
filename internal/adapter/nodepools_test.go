package adapter

import (
	"fmt"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/gpuplane/gpuplane/internal/scheduler/model"
)

func TestReadNodePool(t *testing.T) {
	pool := func(labels, annotations, limits, used map[string]any) *unstructured.Unstructured {
		u := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": map[string]any{"name": "p"},
			"spec": map[string]any{"template": map[string]any{"metadata": map[string]any{"labels": labels, "annotations": annotations}}},
		}}
		if limits != nil {
			_ = unstructured.SetNestedMap(u.Object, limits, "spec", "limits")
		}
		if used != nil {
			_ = unstructured.SetNestedMap(u.Object, used, "status", "resources")
		}
		return u
	}
	h100 := map[string]any{LabelGPUCount: "8"}
	tests := []struct {
		name    string
		pool    *unstructured.Unstructured
		want    poolRoom
		wantOK  bool
		wantErr bool
	}{
		{name: "no GPUs: not a GPU pool", pool: pool(nil, nil, map[string]any{"cpu": "100"}, nil)},
		{name: "GPU nodes, no limit", pool: pool(h100, nil, nil, nil), want: poolRoom{unlimited: true}, wantOK: true},
		{name: "limit 32, none used: four nodes of 8",
			pool: pool(h100, nil, map[string]any{"nvidia.com/gpu": "32"}, nil), want: poolRoom{gpuMilli: 32 * model.MilliPerGPU}, wantOK: true},
		{name: "limit 28: three whole nodes, whatever it uses now",
			pool: pool(h100, nil, map[string]any{"nvidia.com/gpu": "28"}, map[string]any{"nvidia.com/gpu": "8"}), want: poolRoom{gpuMilli: 24 * model.MilliPerGPU}, wantOK: true},
		{name: "time-sliced four ways: the limit counts replicas",
			pool: pool(map[string]any{LabelGPUCount: "8", LabelGPUReplicas: "4"}, map[string]any{"gpuplane.io/gpu-offer": "nvidia.com/gpu=32"},
				map[string]any{"nvidia.com/gpu": "64"}, nil), want: poolRoom{gpuMilli: 16 * model.MilliPerGPU}, wantOK: true},
		{name: "limit below one node: none", pool: pool(h100, nil, map[string]any{"nvidia.com/gpu": "4"}, nil), wantOK: true},
		{name: "unreadable limit", pool: pool(h100, nil, map[string]any{"nvidia.com/gpu": "lots"}, nil), wantErr: true},
		{name: "negative limit", pool: pool(h100, nil, map[string]any{"nvidia.com/gpu": "-8"}, nil), wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, ok, err := readNodePool(tc.pool)
			if (err != nil) != tc.wantErr || ok != tc.wantOK || got != tc.want {
				t.Errorf("readNodePool = %+v, %v, %v; want %+v, %v, error %v", got, ok, err, tc.want, tc.wantOK, tc.wantErr)
			}
		})
	}
	// Together: the limited pools' most, or their nodes' GPUs where more,
	// and every other node's, unless one pool is unlimited.
	c := newClusterCache("s")
	c.upsertNodePool(tests[2].pool)
	c.upsertNode(gpuNode("other", 4))
	for i := range 5 {
		n := gpuNode(fmt.Sprint("in-pool-", i), 8)
		n.Labels = map[string]string{LabelNodePool: "p"}
		c.upsertNode(n)
		if want := int64(4+max(32, 8*(i+1))) * model.MilliPerGPU; c.nodeLimit() == nil || c.nodeLimit().GPUMilli != want {
			t.Errorf("with %d nodes in the pool: nodeLimit = %+v, want %d", i+1, c.nodeLimit(), want)
		}
	}
	unlimited := pool(h100, nil, nil, nil)
	unlimited.SetName("q")
	c.upsertNodePool(unlimited)
	if l := c.nodeLimit(); l != nil {
		t.Errorf("nodeLimit = %+v with an unlimited pool, want none", l)
	}
}
