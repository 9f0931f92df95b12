package simulator

import (
	"fmt"
	"strings"
	"testing"

	"github.com/gpuplane/gpuplane/internal/scheduler/model"
)

func TestParseMix(t *testing.T) {
	tests := []struct {
		in, err string
		want    Mix
	}{
		{in: "", want: NoMix},
		{in: "cpu-only=3,share=0.5", want: Mix{CPUOnly: 3, Share: 0.5, Whole: 1, MultiGPU: 1}},
		{in: "multi-gpu=0, whole=2", want: Mix{CPUOnly: 1, Share: 1, Whole: 2, MultiGPU: 0}},
		{in: "gpu=2", err: `unknown kind "gpu"`},
		{in: "share=-1", err: "factor from 0 to 100"},
		{in: "share", err: "KIND=FACTOR"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParseMix(tt.in)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("error %v, want one containing %q", err, tt.err)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("ParseMix = %+v, %v; want %+v", got, err, tt.want)
			}
		})
	}
}

func TestMixApply(t *testing.T) {
	var pods []TracePod
	kinds := []model.Request{{MilliCPU: 1000}, {GPUMilli: 500}, {GPUs: 1}, {GPUs: 4}}
	for i := range 400 {
		pods = append(pods, TracePod{Name: fmt.Sprint("p", i), Request: kinds[i%4], CreatedAt: int64(i)})
	}
	count := func(ps []TracePod) map[string]int {
		out := map[string]int{}
		for i := range ps {
			out[NoMix.kind(&ps[i])]++
		}
		return out
	}
	m := Mix{CPUOnly: 3, Share: 0.5, Whole: 0, MultiGPU: 1}
	got := m.Apply(pods, 1)
	c := count(got)
	if c["cpu-only"] != 300 || c["share"] != 50 || c["whole"] != 0 || c["multi-gpu"] != 100 {
		t.Fatalf("kinds after %v: %v", m, c)
	}
	names := map[string]bool{}
	for i := range got {
		if names[got[i].Name] {
			t.Fatalf("name %s twice", got[i].Name)
		}
		names[got[i].Name] = true
		if i > 0 && got[i].CreatedAt < got[i-1].CreatedAt {
			t.Fatal("not in creation order")
		}
	}
	again := m.Apply(pods, 1)
	for i := range got {
		if got[i].Name != again[i].Name {
			t.Fatal("the same seed gave another mix")
		}
	}
	if kept := NoMix.Apply(pods, 1); len(kept) != len(pods) {
		t.Fatalf("NoMix changed the trace: %d pods", len(kept))
	}
}
