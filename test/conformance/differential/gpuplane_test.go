package differential

import (
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/runtime"

	"github.com/gpuplane/gpuplane/api/scheduling/v1alpha1"
	"github.com/gpuplane/gpuplane/internal/adapter"
	"github.com/gpuplane/gpuplane/internal/scheduler/placement"
)

// gpuplaneFeasible returns, for each pending pod of objs, the nodes
// gpuplane-scheduler finds feasible for it and why it refuses the others,
// on the path a pod takes: the adapter's view of the objects
// (adapter.ViewOf: node conversion, predicate classes, pod requests,
// running allocations), then the core's placement state with every running
// allocation assigned, asked node by node (placement.State.Why) as the core
// explains a waiting pod. A pod the adapter holds back before the core, or
// one missing from the view, is refused everywhere with the reason; a node
// the adapter leaves out refuses every pod.
func gpuplaneFeasible(objs []runtime.Object, nodes, pending []string) (map[string]verdicts, error) {
	view, err := adapter.ViewOf(v1alpha1.SchedulerName, objs, time.Unix(1_800_000_000, 0))
	if err != nil {
		return nil, err
	}
	snap := &view.Snapshot
	st := placement.NewState(snap.Nodes)
	for i := range snap.RunningByNode {
		for k := range snap.RunningByNode[i] {
			a := &snap.RunningByNode[i][k]
			if err := st.Hold(i, &a.Request, a.GPUs); err != nil {
				return nil, fmt.Errorf("the adapter's view over-allocates: running pod %s: %w", a.Pod, err)
			}
		}
	}
	out := map[string]verdicts{}
	for _, pod := range pending {
		v := verdicts{}
		for _, n := range nodes {
			v[n] = "pod not offered to the core"
			if why, ok := view.Held[pod]; ok {
				v[n] = "held by the adapter: " + why
			}
			if why, ok := view.LeftOut[n]; ok {
				v[n] = "node left out by the adapter: " + why
			}
		}
		out[pod] = v
	}
	for _, g := range snap.Pending {
		for k := range g.Pods {
			p := &g.Pods[k]
			v, ok := out[p.Name]
			if !ok {
				return nil, fmt.Errorf("the core is offered pod %s, which is not among the pending pods", p.Name)
			}
			for i := range st.Nodes {
				// A node takes the pod when it takes one of its
				// alternatives (a claim's firstAvailable), else says why
				// it refuses the first.
				why := ""
				for k := range max(1, len(p.Request.FirstOf)) {
					alt := p.Request.Alt(k)
					w := st.Why(i, alt)
					if (w == "") != (st.Options(i, alt) != nil) {
						return nil, fmt.Errorf("pod %s on node %s: the core's Why says %q but its Options %v", p.Name, st.Nodes[i].Node.Name, w, st.Options(i, alt))
					}
					if w == "" {
						why = ""
						break
					}
					if k == 0 {
						why = w
					}
				}
				v[st.Nodes[i].Node.Name] = why
			}
		}
	}
	return out, nil
}
