package simulator

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/gpuplane/gpuplane/internal/scheduler/model"
)

// TestOrderTreeMatchesSliceDeletion: taking the k-th present position is
// what deleting index k from a shrinking slice does, for any draw.
func TestOrderTreeMatchesSliceDeletion(t *testing.T) {
	for _, n := range []int{1, 2, 3, 7, 8, 9, 100, 1000} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(uint64(n), 1))
			tree := newOrderTree(n)
			list := make([]int, n)
			for i := range list {
				list[i] = i
			}
			for len(list) > 0 {
				k := rng.IntN(len(list))
				if got, want := tree.take(k), list[k]; got != want {
					t.Fatalf("take(%d) = %d, want %d", k, got, want)
				}
				list = slices.Delete(list, k, k+1)
			}
		})
	}
}

func repeatedPods(n int) []TracePod {
	pods := make([]TracePod, n)
	for i := range pods {
		pods[i] = TracePod{Name: fmt.Sprintf("p-%d", i), Request: model.Request{MilliCPU: 4000, GPUMilli: int64(100 + i%900)}, CreatedAt: int64(i)}
	}
	return pods
}

// BenchmarkTuneDown drops half the demand of traces ten times apart in
// size: the time per pod stays flat when tuning is linear in the trace.
func BenchmarkTuneDown(b *testing.B) {
	for _, n := range []int{20_000, 200_000} {
		pods := repeatedPods(n)
		var total int64
		for i := range pods {
			total += pods[i].Request.GPUMilliTotal()
		}
		b.Run(fmt.Sprintf("pods=%d", n), func(b *testing.B) {
			for b.Loop() {
				if _, err := Tune(pods, total, 0.5, 1, false); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n), "ns/pod")
		})
	}
}
