package custommetrics

import (
	"strings"
	"testing"
	"time"
)

func TestParseAgent(t *testing.T) {
	at := time.Unix(1000, 0)
	text := `# TYPE gpuplane_pod_gpu_utilization_ratio gauge
gpuplane_pod_gpu_utilization_ratio{gpu="0",UUID="GPU-0",namespace="ml",pod="two-gpus",container="main"} 0.5
gpuplane_pod_gpu_utilization_ratio{gpu="1",UUID="GPU-1",namespace="ml",pod="two-gpus",container="main"} 0.3
gpuplane_pod_gpu_utilization_ratio{gpu="2",UUID="GPU-2",namespace="ml",pod="sidecars",container="a"} 0.25
gpuplane_pod_gpu_utilization_ratio{gpu="2",UUID="GPU-2",namespace="ml",pod="sidecars",container="b"} 0.5
gpuplane_pod_gpu_utilization_ratio{gpu="3",UUID="GPU-3",GPU_I_ID="1",namespace="ml",pod="mig",container="main"} 0.9
gpuplane_pod_gpu_utilization_ratio{gpu="4",UUID="GPU-4",namespace="",pod="",container=""} 0.7
gpuplane_pod_gpu_utilization_ratio{gpu="5",UUID="GPU-5",namespace="ml",pod="bad",container="main"} NaN
# TYPE gpuplane_pod_gpu_memory_used_bytes gauge
gpuplane_pod_gpu_memory_used_bytes{gpu="0",UUID="GPU-0",namespace="ml",pod="two-gpus",container="main"} 1048576
gpuplane_pod_gpu_memory_used_bytes{gpu="1",UUID="GPU-1",namespace="ml",pod="two-gpus",container="main"} 2097152
gpuplane_pod_gpu_memory_used_bytes{gpu="6",UUID="GPU-6",namespace="ml",pod="memory-only",container="main"} 5242880
# TYPE DCGM_FI_DEV_GPU_UTIL gauge
DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-0",namespace="ml",pod="two-gpus"} 99
`
	got := map[PodKey]PodGPU{}
	if err := ParseAgent(strings.NewReader(text), at, got); err != nil {
		t.Fatal(err)
	}
	want := map[PodKey]PodGPU{
		{"ml", "two-gpus"}:    {UtilPercent: 40, MemMiB: 3, At: at}, // the mean of 50% and 30%, the sum of 1 and 2 MiB
		{"ml", "sidecars"}:    {UtilPercent: 75, At: at},            // two containers on one GPU add up
		{"ml", "mig"}:         {UtilPercent: 90, At: at},
		{"ml", "memory-only"}: {MemMiB: 5, At: at},
	}
	if len(got) != len(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	for k, w := range want {
		g := got[k]
		if g.At != w.At || !close(g.UtilPercent, w.UtilPercent) || !close(g.MemMiB, w.MemMiB) {
			t.Errorf("%v = %+v, want %+v", k, g, w)
		}
	}
	if err := ParseAgent(strings.NewReader("not { metrics"), at, got); err == nil {
		t.Error("a malformed answer parsed")
	}
}

func close(a, b float64) bool { return a-b < 1e-9 && b-a < 1e-9 }

func TestStoreServesOnlyFreshValues(t *testing.T) {
	s := NewStore()
	s.Replace(map[PodKey]PodGPU{{"ml", "p"}: {UtilPercent: 10, At: time.Unix(100, 0)}})
	if _, ok := s.Get(PodKey{"ml", "p"}, time.Unix(101, 0)); ok {
		t.Error("a value older than asked was served")
	}
	if v, ok := s.Get(PodKey{"ml", "p"}, time.Unix(100, 0)); !ok || v.UtilPercent != 10 {
		t.Errorf("got %+v, %v; want the value", v, ok)
	}
}
