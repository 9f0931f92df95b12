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

// BenchmarkGangOnComingNodes times a gang of 8 pods of 8 GPUs each on an
// empty pool whose nodes register without their GPUs (withholdGPUs): from
// the moment its nodes' GPUs register, once all 8 nodes are up and the
// gang's pods say NodesComing, to all its members running (ns/op). It
// reports the nodes bought per node needed in the worst run (the most
// NodeClaims Karpenter had, while the nodes came up without their GPUs
// and after, over 8) and the mean seconds from the gang's creation until
// its pods all said NodesComing.
//
//	GPUPLANE_INTEGRATION=1 GPUPLANE_CONTROLPLANE_BIN=$PWD/bin go test -run '^$' -bench GangOnComingNodes -benchtime 3x ./test/integration/karpenter/
func BenchmarkGangOnComingNodes(b *testing.B) {
	const members = 8
	c := newCluster(b, options{idle: 5 * time.Second})
	c.withholdGPUs()
	var worst, coming float64
	b.ResetTimer()
	for i := range b.N {
		b.StopTimer()
		name := fmt.Sprintf("c%d", i)
		most := 0
		start := time.Now()
		c.gang(name, members, members, c.gpusPerNode, "")
		framework.Eventually(b, 5*time.Minute, "the gang waiting for its nodes' GPUs", c.waitingForComing(name, members, &most))
		coming += time.Since(start).Seconds()
		nodes, err := c.nodes(b.Context())
		if err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		for _, n := range nodes {
			c.registerGPUs(n.Name)
		}
		framework.Eventually(b, 5*time.Minute, "the gang running on its nodes", c.gangRunningOnNewNodes(name, members, &most))
		b.StopTimer()
		worst = max(worst, float64(most)/members)
		c.deletePods("gang=" + name)
		framework.Eventually(b, 5*time.Minute, "the pool back to zero nodes", c.noNodes)
		b.StartTimer()
	}
	b.ReportMetric(worst, "bought/needed")
	b.ReportMetric(coming/float64(b.N), "s-to-coming")
}
