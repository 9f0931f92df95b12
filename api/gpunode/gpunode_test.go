package gpunode_test

import (
	"strings"
	"testing"

	"github.com/gpuplane/gpuplane/api/gpunode"
)

func TestParseTopologyRejects(t *testing.T) {
	tests := []struct{ name, in, want string }{
		{name: "not json", in: "0-7", want: "not the topology JSON"},
		{name: "future version", in: `{"v":2,"gpus":1,"groups":[],"numa":[0]}`, want: "v: format version 2 is not supported"},
		{name: "negative gpus", in: `{"v":1,"gpus":-1}`, want: "gpus: must be 0 to 64, got -1"},
		{name: "huge gpus", in: `{"v":1,"gpus":2000000000}`, want: "gpus: must be 0 to 64, got 2000000000"},
		{name: "gpu out of range", in: `{"v":1,"gpus":2,"groups":[{"gpus":[0,2],"nvlinks":1}],"numa":[0,0]}`, want: "groups[0].gpus: GPU 2 is out of range"},
		{name: "gpu in two groups", in: `{"v":1,"gpus":2,"groups":[{"gpus":[0,1],"nvlinks":1},{"gpus":[1],"nvlinks":1}],"numa":[0,0]}`, want: "groups[1].gpus: GPU 1"},
		{name: "unsorted group", in: `{"v":1,"gpus":2,"groups":[{"gpus":[1,0],"nvlinks":1}]}`, want: "ascending"},
		{name: "negative nvlinks", in: `{"v":1,"gpus":2,"groups":[{"gpus":[0,1],"nvlinks":-3}]}`, want: "groups[0].nvlinks"},
		{name: "more numa than gpus", in: `{"v":1,"gpus":1,"numa":[0,1]}`, want: "numa: 2 entries for 1 GPUs"},
		{name: "numa out of range", in: `{"v":1,"gpus":1,"numa":[-7]}`, want: "numa[0]: must be -1"},
		{name: "too large", in: `{"v":1,"gpus":1,"x":"` + strings.Repeat("a", gpunode.MaxAnnotationBytes) + `"}`, want: "bytes is more than"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := gpunode.ParseTopology(tt.in)
			if err == nil || !strings.Contains(err.Error(), tt.want) || !strings.HasPrefix(err.Error(), gpunode.TopologyAnnotation+": ") {
				t.Fatalf("ParseTopology = %v, want an error naming %s and containing %q", err, gpunode.TopologyAnnotation, tt.want)
			}
		})
	}
}

func TestParseLabels(t *testing.T) {
	tests := []struct {
		name  string
		parse func(string) (int64, error)
		in    string
		want  int64
		err   string
	}{
		{"count", asInt64(gpunode.ParseGPUCount), "8", 8, ""},
		{"count too large", asInt64(gpunode.ParseGPUCount), "5000000", 0, `nvidia.com/gpu.count: must be a whole number from 0 to 64, got "5000000"`},
		{"replicas", asInt64(gpunode.ParseReplicas), "4", 4, ""},
		{"zero replicas", asInt64(gpunode.ParseReplicas), "0", 0, "nvidia.com/gpu.replicas: must be a whole number from 1 to 1000"},
		{"memory", gpunode.ParseGPUMemoryMiB, "81559", 81559, ""},
		{"negative memory", gpunode.ParseGPUMemoryMiB, "-1", 0, "nvidia.com/gpu.memory"},
		{"long garbage is cut short", gpunode.ParseGPUMemoryMiB, strings.Repeat("x", 1000), 0, `..."`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.parse(tt.in)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) || len(err.Error()) > 200 {
					t.Fatalf("error %v, want one containing %q", err, tt.err)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("got %d, %v; want %d", got, err, tt.want)
			}
		})
	}
}

func asInt64(f func(string) (int, error)) func(string) (int64, error) {
	return func(s string) (int64, error) { v, err := f(s); return int64(v), err }
}

func TestMIGProfile(t *testing.T) {
	for in, want := range map[string]string{"nvidia.com/mig-3g.40gb": "3g.40gb", "nvidia.com/mig-": "", "nvidia.com/gpu": ""} {
		if got, ok := gpunode.MIGProfile(in); got != want || ok != (want != "") {
			t.Errorf("MIGProfile(%q) = %q, %v", in, got, ok)
		}
	}
}
