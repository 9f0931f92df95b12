package adapter

import (
	"fmt"
	"maps"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/gpuplane/gpuplane/api/scheduling/v1alpha1"
	"github.com/gpuplane/gpuplane/internal/scheduler/model"
	"github.com/gpuplane/gpuplane/internal/scheduler/placement"
)

func TestReadNodePool(t *testing.T) {
	withPool := func(l map[string]string) map[string]string {
		out := map[string]string{LabelNodePool: "p"}
		maps.Copy(out, l)
		return out
	}
	h100Labels := withPool(map[string]string{LabelGPUCount: "8"})
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
		{name: "GPU nodes, no limit", pool: pool(h100, nil, nil, nil), want: poolRoom{labels: h100Labels, unlimited: true}, wantOK: true},
		{name: "limit 32, none used: four nodes of 8",
			pool: pool(h100, nil, map[string]any{"nvidia.com/gpu": "32"}, nil), want: poolRoom{labels: h100Labels, gpuMilli: 32 * model.MilliPerGPU}, wantOK: true},
		{name: "limit 28: three whole nodes, whatever it uses now",
			pool: pool(h100, nil, map[string]any{"nvidia.com/gpu": "28"}, map[string]any{"nvidia.com/gpu": "8"}), want: poolRoom{labels: h100Labels, gpuMilli: 24 * model.MilliPerGPU}, wantOK: true},
		{name: "time-sliced four ways: the limit counts replicas",
			pool: pool(map[string]any{LabelGPUCount: "8", LabelGPUReplicas: "4"}, map[string]any{"gpuplane.io/gpu-offer": "nvidia.com/gpu=32"},
				map[string]any{"nvidia.com/gpu": "64"}, nil),
			want: poolRoom{labels: withPool(map[string]string{LabelGPUCount: "8", LabelGPUReplicas: "4"}), gpuMilli: 16 * model.MilliPerGPU}, wantOK: true},
		{name: "limit below one node: none", pool: pool(h100, nil, map[string]any{"nvidia.com/gpu": "4"}, nil), want: poolRoom{labels: h100Labels}, wantOK: true},
		{name: "unreadable limit", pool: pool(h100, nil, map[string]any{"nvidia.com/gpu": "lots"}, nil), wantErr: true},
		{name: "negative limit", pool: pool(h100, nil, map[string]any{"nvidia.com/gpu": "-8"}, nil), wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, ok, err := readNodePool(tc.pool)
			if (err != nil) != tc.wantErr || ok != tc.wantOK || !reflect.DeepEqual(got, tc.want) {
				t.Errorf("readNodePool = %+v, %v, %v; want %+v, %v, error %v", got, ok, err, tc.want, tc.wantOK, tc.wantErr)
			}
		})
	}
	// Each pool may add its limit less the GPUs of the nodes it has, down
	// to nothing; nodes of no pool add nothing to any.
	c := newClusterCache("s")
	c.upsertNodePool(tests[2].pool)
	c.upsertNode(gpuNode("other", 4))
	same := func(r poolRoom) map[string]string { return r.labels }
	for i := range 5 {
		n := gpuNode(fmt.Sprint("in-pool-", i), 8)
		n.Labels = map[string]string{LabelNodePool: "p"}
		c.upsertNode(n)
		want := []model.NodePool{{Name: "p", Labels: h100Labels, AddGPUMilli: int64(max(32-8*(i+1), 0)) * model.MilliPerGPU}}
		if got := c.nodePools(same); !reflect.DeepEqual(got, want) {
			t.Errorf("with %d nodes in the pool: nodePools = %+v, want %+v", i+1, got, want)
		}
	}
	unlimited := pool(h100, nil, nil, nil)
	unlimited.SetName("q")
	c.upsertNodePool(unlimited)
	if got := c.nodePools(same); len(got) != 2 || got[1].Name != "q" || !got[1].Unlimited || got[1].Labels[LabelNodePool] != "q" {
		t.Errorf("nodePools = %+v, want q unlimited among them", got)
	}
	// An unreadable pool may admit any pod and limits nothing.
	c.upsertNodePool(tests[len(tests)-1].pool)
	if got := c.nodePools(same); got != nil {
		t.Errorf("nodePools = %+v with an unreadable pool, want none", got)
	}
}

// The labels a pool's nodes will carry are its template's, its
// requirements' of operator In with one value and its name's; what does
// not read as labels is refused naming the field.
func TestReadNodePoolLabels(t *testing.T) {
	pool := func(labels map[string]any, reqs []any) *unstructured.Unstructured {
		spec := map[string]any{"requirements": reqs}
		if reqs == nil {
			spec = map[string]any{}
		}
		return &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": map[string]any{"name": "small"},
			"spec": map[string]any{
				"template": map[string]any{"metadata": map[string]any{"labels": labels}, "spec": spec},
				"limits":   map[string]any{"nvidia.com/gpu": "16"},
			},
		}}
	}
	req := func(key, op string, values ...any) any {
		return map[string]any{"key": key, "operator": op, "values": values}
	}
	gpu := map[string]any{LabelGPUCount: "8", "team": "vision"}
	many := map[string]any{}
	for i := range maxPoolLabels + 1 {
		many[fmt.Sprint("l", i)] = "x"
	}
	manyReqs := make([]any, maxPoolRequirements+1)
	for i := range manyReqs {
		manyReqs[i] = req("k", "Exists")
	}
	tests := []struct {
		name    string
		pool    *unstructured.Unstructured
		want    map[string]string
		wantErr string
	}{
		{name: "template labels and the pool's name", pool: pool(gpu, nil),
			want: map[string]string{LabelGPUCount: "8", "team": "vision", LabelNodePool: "small"}},
		{name: "requirements In one value are labels; others are not",
			pool: pool(gpu, []any{
				req("node.kubernetes.io/instance-type", "In", "p5.48xlarge"),
				req("topology.kubernetes.io/zone", "In", "a", "b"),
				req("karpenter.sh/capacity-type", "NotIn", "spot"),
				req("gpu", "Exists"),
			}),
			want: map[string]string{LabelGPUCount: "8", "team": "vision", LabelNodePool: "small", "node.kubernetes.io/instance-type": "p5.48xlarge"}},
		{name: "a requirement that agrees with a label", pool: pool(gpu, []any{req("team", "In", "vision")}),
			want: map[string]string{LabelGPUCount: "8", "team": "vision", LabelNodePool: "small"}},
		{name: "a requirement against a label", pool: pool(gpu, []any{req("team", "In", "audio")}),
			wantErr: "spec.template.spec.requirements[0]: requires team=audio"},
		{name: "a bad label key", pool: pool(map[string]any{LabelGPUCount: "8", "bad key": "x"}, nil),
			wantErr: "spec.template.metadata.labels: label key \"bad key\""},
		{name: "a bad label value", pool: pool(map[string]any{LabelGPUCount: "8", "team": "no spaces"}, nil),
			wantErr: "spec.template.metadata.labels: label team value"},
		{name: "labels not strings", pool: pool(map[string]any{LabelGPUCount: int64(8)}, nil),
			wantErr: "spec.template.metadata.labels: must map strings to strings"},
		{name: "too many labels", pool: pool(many, nil), wantErr: "spec.template.metadata.labels: at most 256 labels"},
		{name: "too many requirements", pool: pool(gpu, manyReqs), wantErr: "spec.template.spec.requirements: at most 100 requirements"},
		{name: "a requirement not an object", pool: pool(gpu, []any{"x"}), wantErr: "spec.template.spec.requirements[0]: must be an object"},
		{name: "a requirement of no key", pool: pool(gpu, []any{req("", "In", "x")}), wantErr: "spec.template.spec.requirements[0].key"},
		{name: "values not strings", pool: pool(gpu, []any{map[string]any{"key": "k", "operator": "In", "values": []any{int64(1)}}}),
			wantErr: "spec.template.spec.requirements[0].values: must be a list of strings"},
		{name: "a bad required value", pool: pool(gpu, []any{req("k", "In", "no spaces")}), wantErr: "spec.template.spec.requirements[0]: label k value"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, ok, err := readNodePool(tc.pool)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("readNodePool error %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || !ok || !reflect.DeepEqual(got.labels, tc.want) {
				t.Fatalf("readNodePool = %+v, %v, %v; want labels %v", got, ok, err, tc.want)
			}
		})
	}
}

// A pod confined to one pool selects that pool's future nodes and no
// other's, even with no node to tell its class apart from; an unconfined
// pod selects every pool's.
func TestSnapshotNodePoolsSelectedByPods(t *testing.T) {
	c := newClusterCache(v1alpha1.SchedulerName)
	for _, name := range []string{"small", "big"} {
		c.upsertNodePool(&unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": map[string]any{"name": name},
			"spec": map[string]any{
				"template": map[string]any{"metadata": map[string]any{"labels": map[string]any{LabelGPUCount: "8"}}},
				"limits":   map[string]any{"nvidia.com/gpu": map[string]string{"small": "16", "big": "64"}[name]},
			},
		}})
	}
	confined := newPod("ml", "confined").GPUs(8).Obj()
	confined.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
		NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{
			{Key: LabelNodePool, Operator: corev1.NodeSelectorOpIn, Values: []string{"small"}}}}}}}}
	c.upsertPod(confined)
	free := newPod("ml", "free").GPUs(8).Obj()
	c.upsertPod(free)
	b := newBuilder(v1alpha1.SchedulerName, -1, logr.Discard())
	in := c.snapshot(b, newRefusals(), time.Unix(200, 0))
	pools := c.nodePools(b.poolClassLabels)
	if len(pools) != 2 || pools[0].Name != "big" || pools[0].AddGPUMilli != 64*model.MilliPerGPU || pools[1].Name != "small" || pools[1].AddGPUMilli != 16*model.MilliPerGPU {
		t.Fatalf("nodePools = %+v, want big adding 64 GPUs and small 16", pools)
	}
	selected := map[string][]string{}
	for _, g := range in.snap.Pending {
		for _, np := range pools {
			if placement.Selects(&g.Pods[0].Request, np.Labels) {
				selected[g.Name] = append(selected[g.Name], np.Name)
			}
		}
	}
	want := map[string][]string{"pod/ml/confined": {"small"}, "pod/ml/free": {"big", "small"}}
	if !reflect.DeepEqual(selected, want) {
		t.Errorf("pools selected by pending groups %v, want %v", selected, want)
	}
}

// A label a pool's requirements leave to the instance the autoscaler picks
// (a zone among several, any instance family) is read as it may be picked:
// a pod that selects one of the allowed values counts the pool, one that
// selects a value outside them does not, and one that selects on a label
// open to any value counts it.
func TestSnapshotNodePoolsOpenLabels(t *testing.T) {
	const zone, family = "topology.kubernetes.io/zone", "karpenter.k8s.aws/instance-family"
	c := newClusterCache(v1alpha1.SchedulerName)
	c.upsertNodePool(&unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": map[string]any{"name": "zoned"},
		"spec": map[string]any{
			"template": map[string]any{
				"metadata": map[string]any{"labels": map[string]any{LabelGPUCount: "8"}},
				"spec": map[string]any{"requirements": []any{
					map[string]any{"key": zone, "operator": "In", "values": []any{"zone-a", "zone-b"}},
					map[string]any{"key": family, "operator": "Exists"},
				}},
			},
			"limits": map[string]any{"nvidia.com/gpu": "16"},
		},
	}})
	selecting := func(name, key, value string) {
		p := newPod("ml", name).GPUs(8).Obj()
		p.Spec.NodeSelector = map[string]string{key: value}
		c.upsertPod(p)
	}
	selecting("in-b", zone, "zone-b")
	selecting("in-c", zone, "zone-c")
	selecting("family", family, "p5")
	b := newBuilder(v1alpha1.SchedulerName, -1, logr.Discard())
	in := c.snapshot(b, newRefusals(), time.Unix(200, 0))
	pools := c.nodePools(b.poolClassLabels)
	if len(pools) != 1 {
		t.Fatalf("nodePools = %+v, want the one pool", pools)
	}
	got := map[string]bool{}
	for _, g := range in.snap.Pending {
		got[g.Name] = placement.Selects(&g.Pods[0].Request, pools[0].Labels)
	}
	want := map[string]bool{"pod/ml/in-b": true, "pod/ml/in-c": false, "pod/ml/family": true}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("the pool counted for %v, want %v", got, want)
	}
}
