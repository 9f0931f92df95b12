package karpenter_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/gpuplane/gpuplane/test/integration/framework"
)

// BenchmarkGangOnEmptyNodePool times a gang of 8 pods of 8 GPUs each from
// its creation to all its members running on nodes Karpenter bought for it
// from an empty pool (ns/op), and reports the nodes bought per node needed
// in the worst run (the most NodeClaims Karpenter had meanwhile over 8) and
// the mean seconds from
// the gang's end until the pool is back to zero nodes, with the pool's idle
// time (consolidateAfter) at 5s.
//
//	GPUPLANE_INTEGRATION=1 GPUPLANE_CONTROLPLANE_BIN=$PWD/bin go test -run '^$' -bench GangOnEmptyNodePool -benchtime 3x ./test/integration/karpenter/
func BenchmarkGangOnEmptyNodePool(b *testing.B) {
	const (
		members = 8
		idle    = 5 * time.Second
	)
	c := newCluster(b, options{idle: idle})
	var worst, zero float64
	b.ResetTimer()
	for i := range b.N {
		name := fmt.Sprintf("g%d", i)
		most := 0
		c.gang(name, members, members, c.gpusPerNode, "")
		framework.Eventually(b, 5*time.Minute, "the gang running on new nodes", c.gangRunningOnNewNodes(name, members, &most))
		b.StopTimer()
		worst = max(worst, float64(most)/members)
		start := time.Now()
		c.deletePods("gang=" + name)
		framework.Eventually(b, 5*time.Minute, "the pool back to zero nodes", c.noNodes)
		zero += time.Since(start).Seconds()
		b.StartTimer()
	}
	b.ReportMetric(worst, "bought/needed")
	b.ReportMetric(zero/float64(b.N), "s-to-zero")
}
