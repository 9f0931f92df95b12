package gpunode_test

import (
	"maps"
	"testing"

	"github.com/gpuplane/gpuplane/api/gpunode"
)

func TestParseOffer(t *testing.T) {
	tests := []struct {
		in      string
		want    map[string]int64
		wantErr bool
	}{
		{in: "nvidia.com/gpu=8", want: map[string]int64{"nvidia.com/gpu": 8}},
		{in: "nvidia.com/gpu=32", want: map[string]int64{"nvidia.com/gpu": 32}},
		{in: "nvidia.com/gpu=4,nvidia.com/mig-1g.10gb=14,nvidia.com/mig-3g.40gb=4",
			want: map[string]int64{"nvidia.com/gpu": 4, "nvidia.com/mig-1g.10gb": 14, "nvidia.com/mig-3g.40gb": 4}},
		{in: "", wantErr: true},
		{in: "nvidia.com/gpu", wantErr: true},
		{in: "cpu=8", wantErr: true},
		{in: "nvidia.com/mig-=1", wantErr: true},
		{in: "nvidia.com/gpu=-1", wantErr: true},
		{in: "nvidia.com/gpu=64001", wantErr: true},
		{in: "nvidia.com/gpu=1,nvidia.com/gpu=2", wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			got, err := gpunode.ParseOffer(tc.in)
			if (err != nil) != tc.wantErr || !maps.Equal(got, tc.want) {
				t.Fatalf("ParseOffer(%q) = %v, %v; want %v, error %v", tc.in, got, err, tc.want, tc.wantErr)
			}
			if err == nil && gpunode.FormatOffer(got) != tc.in {
				t.Errorf("FormatOffer = %q, want %q", gpunode.FormatOffer(got), tc.in)
			}
		})
	}
}

// FuzzParseOffer: any annotation value parses to resources within the
// bounds or to an error, never a panic; what parses survives a round trip.
func FuzzParseOffer(f *testing.F) {
	for _, s := range []string{"nvidia.com/gpu=8", "nvidia.com/gpu=32", "nvidia.com/gpu.shared=32", "nvidia.com/gpu=4,nvidia.com/mig-1g.10gb=14", "", "=", "nvidia.com/gpu=1,nvidia.com/gpu=1", "nvidia.com/gpu=99999999999999999999"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, err := gpunode.ParseOffer(s)
		if err != nil {
			return
		}
		for k, v := range got {
			if v < 0 || v > gpunode.MaxGPUs*gpunode.MaxReplicas {
				t.Fatalf("accepted %s=%d", k, v)
			}
		}
		again, err := gpunode.ParseOffer(gpunode.FormatOffer(got))
		if err != nil || !maps.Equal(again, got) {
			t.Fatalf("round trip of %q: %v, %v", s, again, err)
		}
	})
}
