package scheduler_test

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gpuplane/gpuplane/api/scheduling/v1alpha1"
	"github.com/gpuplane/gpuplane/internal/adapter"
	"github.com/gpuplane/gpuplane/internal/cli/status"
	"github.com/gpuplane/gpuplane/test/integration/framework"
)

// TestGpuplaneStatus reads a scheduled cluster back with `gpuplane
// status`: GPUs per node with their holders, queues with usage and fair
// share, and a waiting gang with the scheduler's reason.
func TestGpuplaneStatus(t *testing.T) {
	nodes := gpuNodes(1, "status")
	nodes[0].Label("nvidia.com/gpu.sharing-strategy", "time-slicing").Label("nvidia.com/gpu.replicas", "1")
	node := nodes[0].Obj().Name
	c := newCluster(t, nodes...)
	q := "status-" + c.ns
	c.queue(q, "", 4, 0)
	c.run(adapter.Config{})
	c.podGroup("runs", 2, q)
	c.podGroup("waits", 2, q)
	for i := range 2 {
		c.create(c.pod(fmt.Sprintf("runs-%d", i)).GPUs(2).Label(v1alpha1.PodGroupLabel, "runs").Label("gang", "runs"))
		c.create(c.pod(fmt.Sprintf("waits-%d", i)).GPUs(4).Label(v1alpha1.PodGroupLabel, "waits").Label("gang", "waits"))
	}
	c.waitBound("gang=runs", 2, 30*time.Second)
	// Three more pods of the queue without a group: they wait for room
	// and are counted on one row.
	for i := range 3 {
		c.create(c.pod(fmt.Sprintf("lone-%d", i)).GPUs(8).Label(v1alpha1.QueueLabel, q))
	}

	var st *status.Status
	framework.Eventually(t, 30*time.Second, "status shows the queue's usage and the waiting gang", func(ctx context.Context) (bool, error) {
		var err error
		if st, err = status.Collect(ctx, env.Config, c.scheduler); err != nil {
			return false, err
		}
		var usage string
		for _, qs := range st.Queues {
			if qs.Name == q {
				usage = qs.Usage
			}
		}
		var why string
		var lone int32
		for _, g := range st.Waiting {
			if g.Namespace == c.ns && g.Kind == status.KindPodGroup && g.Name == "waits" {
				why = g.Why
			}
			if g.Namespace == c.ns && g.Kind == status.KindPods && strings.Contains(g.Why, "insufficient nvidia.com/gpu") {
				lone += g.Count
			}
		}
		return usage == "4" && strings.Contains(why, "gang") && lone == 3,
			fmt.Errorf("queue usage %q, waiting gang reason %q, %d lone pods waiting for GPUs", usage, why, lone)
	})
	var n *status.Node
	for i := range st.Nodes {
		if st.Nodes[i].Name == node {
			n = &st.Nodes[i]
		}
	}
	if n == nil {
		t.Fatalf("node %s missing from %+v", node, st.Nodes)
	}
	if n.Used != 4 || n.Capacity != 8 || n.Sharing != "time-slicing x1" || len(n.Holders) != 2 || n.Holders[0].Source != "scheduler" {
		t.Errorf("node = %+v, want 4/8 GPUs used by two pods placed by the scheduler, time-slicing x1", *n)
	}
	var out bytes.Buffer
	if err := status.Print(&out, st, true); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"NODES", node, "GPU HOLDERS", "QUEUES", q, "WAITING", c.ns + "/waits", c.ns + "/lone-0"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("status -o wide lacks %q:\n%s", want, out.String())
		}
	}
	holder := false
	for _, line := range strings.Split(out.String(), "\n") {
		f := strings.Fields(line)
		holder = holder || len(f) >= 3 && f[0] == node && f[1] == c.ns+"/runs-0" && f[2] == "GPU"
	}
	if !holder {
		t.Errorf("status -o wide has no GPU HOLDERS row for %s/runs-0 on %s:\n%s", c.ns, node, out.String())
	}
}
