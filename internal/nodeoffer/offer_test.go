package nodeoffer

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	configv1 "github.com/gpuplane/gpuplane/api/config/v1"
	"github.com/gpuplane/gpuplane/api/gpunode"
)

func config(t *testing.T, yaml string) *configv1.Config {
	t.Helper()
	cfg, err := configv1.Load(strings.NewReader(yaml), configv1.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

func TestCompute(t *testing.T) {
	tests := []struct {
		name, profile, config string
		resources             map[string]int64
		labels                map[string]string
	}{
		{
			name: "whole GPUs", profile: "dgxh100",
			resources: map[string]int64{"nvidia.com/gpu": 8},
			labels: map[string]string{"nvidia.com/gpu.count": "8", "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
				"nvidia.com/gpu.replicas": "1"},
		},
		{
			name: "time-sliced four ways", profile: "dgxh100",
			config:    "version: v1\nsharing:\n  timeSlicing:\n    resources:\n    - name: nvidia.com/gpu\n      replicas: 4\n",
			resources: map[string]int64{"nvidia.com/gpu": 32},
			labels: map[string]string{"nvidia.com/gpu.count": "8", "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3-SHARED",
				"nvidia.com/gpu.replicas": "4", "nvidia.com/gpu.sharing-strategy": "time-slicing"},
		},
		{
			name: "MIG, mixed strategy", profile: "testdata/h100-mig.yaml",
			config:    "version: v1\nflags:\n  migStrategy: mixed\n",
			resources: map[string]int64{"nvidia.com/mig-1g.10gb": 7, "nvidia.com/mig-3g.40gb": 2},
			labels:    map[string]string{"nvidia.com/mig.strategy": "mixed", "nvidia.com/mig-1g.10gb.count": "7", "nvidia.com/mig-3g.40gb.count": "2"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var cfg *configv1.Config
			if tc.config != "" {
				cfg = config(t, tc.config)
			}
			o, err := Compute(context.Background(), tc.profile, cfg)
			if err != nil {
				t.Fatal(err)
			}
			if len(o.Resources) != len(tc.resources) {
				t.Errorf("resources %v, want %v", o.Resources, tc.resources)
			}
			for k, v := range tc.resources {
				if o.Resources[k] != v {
					t.Errorf("resource %s = %d, want %d (all: %v)", k, o.Resources[k], v, o.Resources)
				}
			}
			for k, v := range tc.labels {
				if o.Labels[k] != v {
					t.Errorf("label %s = %q, want %q", k, o.Labels[k], v)
				}
			}
			for _, k := range hostLabels {
				if _, ok := o.Labels[k]; ok {
					t.Errorf("label %s is the host's, not the offer's", k)
				}
			}
			// Every node of the pool says what it will offer until its
			// GPUs register (a time-sliced node: its 32 replicas).
			np, err := NodePool(InstanceType{Name: "t", Offer: o, CPU: "224", Memory: "2Ti", Price: 1}, PoolOptions{NodeClass: "gpu"})
			if err != nil {
				t.Fatal(err)
			}
			got, _, _ := unstructured.NestedString(np.Object, "spec", "template", "metadata", "annotations", gpunode.OfferAnnotation)
			if want := gpunode.FormatOffer(tc.resources); got != want {
				t.Errorf("the pool's nodes offer %q, want %q", got, want)
			}
		})
	}
}

func TestComputeRefuses(t *testing.T) {
	if _, err := Compute(context.Background(), "no-such-profile", nil); err == nil || !strings.Contains(err.Error(), "no-such-profile") {
		t.Errorf("err = %v, want one naming the profile", err)
	}
}

func h100(t *testing.T) InstanceType {
	t.Helper()
	o, err := Compute(context.Background(), "dgxh100", nil)
	if err != nil {
		t.Fatal(err)
	}
	return InstanceType{Name: "h100x8", Offer: o, CPU: "224", Memory: "2Ti", Price: 98.32}
}

func TestNodePool(t *testing.T) {
	it := h100(t)
	np, err := NodePool(it, PoolOptions{NodeClass: "gpu", ConsolidateAfter: 90 * time.Second, GPULimit: 64})
	if err != nil {
		t.Fatal(err)
	}
	if np.GetName() != "gpu-h100x8" || np.GetKind() != "NodePool" {
		t.Errorf("got %s %s", np.GetKind(), np.GetName())
	}
	b, err := json.Marshal(np.Object)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"consolidateAfter":"1m30s"`, `"nvidia.com/gpu":"64"`, `"nvidia.com/gpu.product":"NVIDIA-H100-80GB-HBM3"`,
		`"values":["h100x8"]`, `{"nodes":"100%","reasons":["Empty"]}`, `"kind":"KWOKNodeClass","name":"gpu"`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("NodePool lacks %s:\n%s", want, b)
		}
	}
}

func TestNodePoolRefuses(t *testing.T) {
	good := h100(t)
	tests := []struct {
		name  string
		edit  func(*InstanceType, *PoolOptions)
		field string
	}{
		{"bad name", func(it *InstanceType, _ *PoolOptions) { it.Name = "H100 x8" }, "name"},
		{"no offer", func(it *InstanceType, _ *PoolOptions) { it.Offer = nil }, "offer"},
		{"bad cpu", func(it *InstanceType, _ *PoolOptions) { it.CPU = "lots" }, "cpu"},
		{"zero memory", func(it *InstanceType, _ *PoolOptions) { it.Memory = "0" }, "memory"},
		{"no price", func(it *InstanceType, _ *PoolOptions) { it.Price = 0 }, "price"},
		{"no node class", func(_ *InstanceType, o *PoolOptions) { o.NodeClass = "" }, "nodeClass"},
		{"negative idle", func(_ *InstanceType, o *PoolOptions) { o.ConsolidateAfter = -time.Second }, "consolidateAfter"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			it, o := good, PoolOptions{NodeClass: "gpu"}
			tc.edit(&it, &o)
			_, err := NodePool(it, o)
			if err == nil || !strings.Contains(err.Error(), tc.field+":") {
				t.Errorf("err = %v, want one naming %s", err, tc.field)
			}
		})
	}
}

func TestKWOKInstanceTypes(t *testing.T) {
	it := h100(t)
	b, err := KWOKInstanceTypes([]InstanceType{it}, "zone-a")
	if err != nil {
		t.Fatal(err)
	}
	var got []struct {
		Name      string            `json:"name"`
		Resources map[string]string `json:"resources"`
		Offerings []struct {
			Price float64 `json:"Price"`
		} `json:"offerings"`
	}
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].Resources["nvidia.com/gpu"] != "8" || got[0].Resources["cpu"] != "224" || got[0].Offerings[0].Price != 98.32 {
		t.Errorf("got %s", b)
	}
	if _, err := KWOKInstanceTypes([]InstanceType{it, it}, "zone-a"); err == nil || !strings.Contains(err.Error(), "given twice") {
		t.Errorf("a type given twice: err = %v", err)
	}
}

func TestFormatDuration(t *testing.T) {
	for d, want := range map[time.Duration]string{0: "0s", 30 * time.Second: "30s", time.Hour + 30*time.Second: "1h30s", 5 * time.Minute: "5m"} {
		if got := formatDuration(d); got != want {
			t.Errorf("formatDuration(%v) = %q, want %q", d, got, want)
		}
	}
}
