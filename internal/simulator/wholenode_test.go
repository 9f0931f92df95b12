package simulator

import (
	"testing"

	"github.com/gpuplane/gpuplane/internal/scheduler/model"
	"github.com/gpuplane/gpuplane/internal/scheduler/schedtest"
)

func TestNeedsWholeNode(t *testing.T) {
	nodes := []model.Node{schedtest.Node("four", 32000, 1<<18).GPUs(4, "T4").Obj(), schedtest.Node("eight", 96000, 1<<19).GPUs(8, "A100").Obj()}
	wide := schedtest.GPU(4, 64000) // too much CPU for the 4-GPU node
	t4 := schedtest.GPU(4, 1000)
	t4.GPUModels = []string{"T4"}
	for _, tc := range []struct {
		name string
		req  model.Request
		want bool
	}{
		{"8 GPUs: only the 8-GPU node", schedtest.GPU(8, 1000), true},
		{"4 GPUs: the 8-GPU node holds it with GPUs to spare", schedtest.GPU(4, 1000), false},
		{"4 T4 GPUs: only the 4-GPU node's model", t4, true},
		{"a share of a GPU", model.Request{GPUMilli: 500, MilliCPU: 1000}, false},
		{"more GPUs than any node", schedtest.GPU(16, 1000), false},
		{"4 GPUs and the CPU only the 8-GPU node has", wide, false},
	} {
		if got := needsWholeNode(nodes, &tc.req); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}

// The whole-node class counts a job once, by any of its pods, and its
// wait from its creation to its first start.
func TestWholeNodeWaits(t *testing.T) {
	nodes := []model.Node{schedtest.Node("n", 96000, 1<<19).GPUs(8, "A100").Obj()}
	whole, part := schedtest.GPU(8, 1000), schedtest.GPU(2, 1000)
	pod := func(name, group string, r model.Request, created, started int64) *simPod {
		return &simPod{tp: &TracePod{Name: name, Request: r, CreatedAt: created}, group: group, started: started}
	}
	pods := []*simPod{
		pod("g1-a", "g1", part, 0, 100), pod("g1-b", "g1", whole, 0, 50), // one job, first start 50
		pod("s1", "s1", whole, 10, 310), // waits 300
		pod("s2", "s2", part, 0, 9000),  // not whole-node
		pod("s3", "s3", whole, 0, -1),   // never started
	}
	var ev EventStats
	wholeNodeWaits(nodes, pods, &ev)
	if ev.WholeNodeJobs != 3 || ev.WholeNodeWaitP50 != 50 || ev.WholeNodeWaitP95 != 300 {
		t.Fatalf("jobs %d, wait p50 %g p95 %g; want 3 jobs, 50 and 300", ev.WholeNodeJobs, ev.WholeNodeWaitP50, ev.WholeNodeWaitP95)
	}
}
