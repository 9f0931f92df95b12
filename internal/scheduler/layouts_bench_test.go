package scheduler_test

import (
	"fmt"
	"testing"

	"github.com/gpuplane/gpuplane/internal/scheduler"
	"github.com/gpuplane/gpuplane/internal/scheduler/model"
	"github.com/gpuplane/gpuplane/internal/scheduler/schedtest"
)

// BenchmarkCycleMIGDemand: 1,000 nodes x 8 whole H100s, seven of each
// node's GPUs busy, and 500 pending pods asking nvidia.com/mig-1g.10gb,
// which no GPU offers. "follow-demand": every node opts in, and the cycle
// proposes a layout for idle GPUs (72 of them: 500 instances at 7 per
// GPU); "static", the peer measured in the same run: the same cluster
// with no node opted in, so the cycle only finds that nothing fits.
func BenchmarkCycleMIGDemand(b *testing.B) {
	for _, follow := range []bool{false, true} {
		name := "static"
		if follow {
			name = "follow-demand"
		}
		b.Run(name, func(b *testing.B) {
			nodes := make([]model.Node, 1000)
			running := make([][]model.Allocation, len(nodes))
			for i := range nodes {
				nodes[i] = schedtest.Node(fmt.Sprintf("n%d", i), 128000, 1<<20).GPUs(8, "H100").Obj()
				if follow {
					nodes[i].MIG = &model.NodeMIG{Profiles: h100Profiles}
				}
				for g := range 7 {
					running[i] = append(running[i], on(fmt.Sprintf("r%d-%d", i, g), nodes[i].Name, g, false))
				}
			}
			var pending []model.PodGroup
			for i := range 500 {
				pending = append(pending, schedtest.Group(fmt.Sprintf("m%d", i)).Created(int64(i)).Pods(1, migReq("1g.10gb")).Obj())
			}
			snap := model.Snapshot{Nodes: nodes, RunningByNode: running, Pending: pending, Now: 1 << 20,
				Layouts: model.LayoutPolicy{MinWait: 10, Dwell: 300, Timeout: 120, MaxPerNode: 1}}
			s, err := scheduler.New(scheduler.Config{})
			if err != nil {
				b.Fatal(err)
			}
			if _, err := s.Cycle(&snap); err != nil {
				b.Fatal(err)
			}
			layouts := 0
			b.ResetTimer()
			for b.Loop() {
				d, err := s.Cycle(&snap)
				if err != nil {
					b.Fatal(err)
				}
				layouts = len(d.Layouts)
			}
			b.ReportMetric(float64(layouts), "layouts/cycle")
		})
	}
}
