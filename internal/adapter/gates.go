package adapter

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gpuplane/gpuplane/api/scheduling/v1alpha1"
	"github.com/gpuplane/gpuplane/internal/scheduler/model"
)

// Scheduling gates (v1alpha1.SchedulingGate). gpuplane's admission policy
// gates every pod created for gpuplane-scheduler, so that no autoscaler
// buys a node for it before the core has said what it waits for. The
// gate is lifted in two places only, each carrying out a decision of the
// core: when the pod is bound (apiWriter.doBind lifts it first, since the
// API server binds no gated pod), and when the core says the pod's group
// waits for capacity, which more nodes would give (release). A pod that
// waits for its queue's quota, its gang's missing members, the pods
// evicted for it or a change to its spec keeps it. A gate cannot be put
// back once lifted: a pod released for capacity that later waits for
// something else says so by its PodScheduled reason alone, which is never
// Unschedulable then, and autoscalers read that reason too.
//
// Nothing here strands a pod: every cycle, a new leader's first included,
// offers every gated pending pod to the core and acts on its answer.

// hasOurGate reports whether gpuplane's gate holds the pod.
func hasOurGate(p *corev1.Pod) bool {
	for _, g := range p.Spec.SchedulingGates {
		if g.Name == v1alpha1.SchedulingGate {
			return true
		}
	}
	return false
}

// foreignGated reports whether a gate other than gpuplane's holds the pod:
// another controller has yet to let it be scheduled.
func foreignGated(p *corev1.Pod) bool {
	for _, g := range p.Spec.SchedulingGates {
		if g.Name != v1alpha1.SchedulingGate {
			return true
		}
	}
	return false
}

// ungatePatch removes gpuplane's gate and leaves any other: a strategic
// merge patch deletes the list entry by its name, so it neither races
// with another controller's removal nor fails when the gate is gone.
var ungatePatch = []byte(`{"spec":{"schedulingGates":[{"$patch":"delete","name":"` + v1alpha1.SchedulingGate + `"}]}}`)

// ungatePatchType is the patch type of ungatePatch.
const ungatePatchType = types.StrategicMergePatchType

// ungateRetry is how long a request to lift a gate is left to land
// before release sends it again.
const ungateRetry = 10 * time.Second

// ungateAsk is a request to lift a pod's gate: which pod (its UID) and
// when it was sent.
type ungateAsk struct {
	uid types.UID
	at  time.Time
}

// release lifts the gate of the pending pods whose group the core says
// waits for capacity (model.WaitCapacity), so that their PodScheduled
// condition, written once the gate is gone (report), calls them
// Unschedulable and autoscalers see them. A request still in flight is
// not sent again before ungateRetry.
func (l *loop) release(ctx context.Context, in *cycleInput, d *model.Decisions, placed map[string]bool) {
	asked := map[string]ungateAsk{}
	for _, u := range d.Unplaced {
		g := in.groups[u.Group]
		if g == nil || placed[u.Group] || u.Wait != model.WaitCapacity {
			continue
		}
		for _, pi := range g.pending {
			if !hasOurGate(pi.pod) {
				continue
			}
			if a, ok := l.ungating[pi.key]; ok && a.uid == pi.pod.UID && in.startedAt.Sub(a.at) < ungateRetry {
				asked[pi.key] = a
				continue
			}
			asked[pi.key] = ungateAsk{uid: pi.pod.UID, at: in.startedAt}
			l.api.ungate(ctx, pi.pod)
		}
	}
	// Pods no longer gated, gone or bound are forgotten.
	l.ungating = asked
}
