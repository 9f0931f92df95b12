package adapter

import (
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"

	"github.com/gpuplane/gpuplane/api/scheduling/v1alpha1"
	"github.com/gpuplane/gpuplane/internal/scheduler/model"
)

// Nodes about to go away. A node that carries one of the configured
// taints (any effect) or node conditions (status True) is given to the
// core as model.Node.Disrupted: the core takes no new pods there and
// evicts, whole, every group with a pod on it (model.EvictDisruption), or,
// for an elastic group that keeps its minimum on other nodes, only its
// pods on the node (model.Eviction.Shrink): the group runs on, and its
// workload's replacements for those pods wait to rejoin it.
// The binder carries each of those evictions out as it does preemption's:
// the pod's PreemptionNotice condition and event first (reason
// NodeDisruption), then the eviction, with the grace period of the pod's
// Queue (spec.preemptionGracePeriodSeconds), so that a job can checkpoint.

// DefaultDisruptionTaints are the taints that say a node is about to go
// away: Karpenter's disruption taint (v1), Cluster Autoscaler's scale-down
// taint, AWS Node Termination Handler's spot interruption taint, GKE's
// impending termination of a spot or preemptible VM, and AKS's auto-drain
// of a spot node with a scheduled preempt event.
var DefaultDisruptionTaints = []string{
	"karpenter.sh/disrupted",
	"ToBeDeletedByClusterAutoscaler",
	"aws-node-termination-handler/spot-itn",
	"cloud.google.com/impending-node-termination",
	"remediator.aks.microsoft.com/unschedulable",
}

// disruptionMarks are the taint keys and condition types that mark a node
// about to go away.
type disruptionMarks struct {
	taints     []string
	conditions []string
}

// disruptedBy names what marks n as about to go away ("taint K",
// "condition T"), or "" when nothing does.
func (d disruptionMarks) disruptedBy(n *corev1.Node) string {
	for _, t := range n.Spec.Taints {
		if slices.Contains(d.taints, t.Key) {
			return "taint " + t.Key
		}
	}
	for _, c := range n.Status.Conditions {
		if c.Status == corev1.ConditionTrue && slices.Contains(d.conditions, string(c.Type)) {
			return "condition " + string(c.Type)
		}
	}
	return ""
}

// keptConditions is what the node informer keeps of a node's conditions:
// the type of each that is True, but Ready (true of every working node),
// for disruptedBy to read; the rest (heartbeats, messages) is dropped.
func keptConditions(cs []corev1.NodeCondition) []corev1.NodeCondition {
	var out []corev1.NodeCondition
	for _, c := range cs {
		if c.Status == corev1.ConditionTrue && c.Type != corev1.NodeReady {
			out = append(out, corev1.NodeCondition{Type: c.Type, Status: c.Status})
		}
	}
	return out
}

// disruptionNotice is the notice a pod evicted for a node's disruption
// gets: its own node's mark, or its gang's member's node, and the grace
// of its Queue (nil: the pod's own).
func disruptionNotice(in *cycleInput, e model.Eviction, grace *int64) notice {
	msg := "another member of its gang runs on a node that is going away"
	for _, ni := range in.nodes {
		if ni.node.Name == e.Node && ni.disruptedBy != "" {
			msg = fmt.Sprintf("node %s is going away (%s)", e.Node, ni.disruptedBy)
			break
		}
	}
	then := "; its group is placed again whole"
	if e.Shrink {
		then = "; its group is elastic and runs on without it, and the pod waits to rejoin it"
	}
	msg = "gpuplane-scheduler evicts this pod: " + msg + then
	if grace != nil {
		msg += fmt.Sprintf("; it has %ds after SIGTERM to checkpoint", *grace)
	}
	return notice{Type: v1alpha1.ConditionPreemptionNotice, Reason: "NodeDisruption", Message: msg, Grace: grace}
}
