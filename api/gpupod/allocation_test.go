package gpupod_test

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpuplane/gpuplane/api/gpupod"
)

func podWith(annotation string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p",
		Annotations: map[string]string{gpupod.AllocationAnnotation: annotation}}}
}

func TestReadAllocation(t *testing.T) {
	tests := []struct {
		name, in, wantErr string
		wantIDs           []string
	}{
		{name: "a record", in: `{"node":"n","containers":[{"name":"c","devices":{"nvidia.com/gpu":["GPU-a","GPU-b"]}}]}`, wantIDs: []string{"GPU-a", "GPU-b"}},
		{name: "not json", in: `{`, wantErr: "reading annotation gpuplane.io/allocation of pod ns/p"},
		{name: "too large", in: `{"node":"` + strings.Repeat("n", gpupod.MaxAllocationBytes) + `"}`, wantErr: "more than the 65536 a record needs"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, err := gpupod.ReadAllocation(podWith(tt.in))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := a.DeviceIDs("nvidia.com/gpu"); strings.Join(got, ",") != strings.Join(tt.wantIDs, ",") {
				t.Errorf("device IDs %v, want %v", got, tt.wantIDs)
			}
		})
	}
	if a, err := gpupod.ReadAllocation(&corev1.Pod{}); a != nil || err != nil {
		t.Errorf("a pod without the annotation: %v, %v", a, err)
	}
}

func FuzzReadAllocation(f *testing.F) {
	f.Add(`{"node":"n","containers":[{"name":"c","devices":{"nvidia.com/gpu":["GPU-a"]},"env":{"NVIDIA_VISIBLE_DEVICES":"GPU-a"}}]}`)
	f.Add(`{"containers":null}`)
	f.Add(`[`)
	f.Add(`{"node":"n","containers":[{"name":"i","init":true,"devices":{},"env":{},"cdiDevices":["nvidia.com/gpu=0"],` +
		`"mounts":[{"hostPath":"/a","containerPath":"/b","readOnly":true}],"deviceNodes":["/dev/nvidia0"],"annotations":{"k":"v"}}]}`)
	f.Fuzz(func(t *testing.T, s string) {
		a, err := gpupod.ReadAllocation(podWith(s))
		if err != nil {
			return
		}
		if a == nil {
			t.Fatal("no record and no error for a present annotation")
		}
		out, err := gpupod.FormatAllocation(a)
		if err != nil {
			t.Fatal(err)
		}
		if len(out) > gpupod.MaxAllocationBytes {
			// JSON's escapes can lengthen a record near the bound; the
			// reader refuses what no node writes.
			return
		}
		back, err := gpupod.ReadAllocation(podWith(out))
		if err != nil || !equality.Semantic.DeepEqual(back, a) {
			t.Fatalf("round trip of %q through %q: %+v, %v; want %+v", s, out, back, err, a)
		}
		if again, err := gpupod.FormatAllocation(back); err != nil || again != out {
			t.Fatalf("FormatAllocation is not stable: %q, then %q, %v", out, again, err)
		}
	})
}
