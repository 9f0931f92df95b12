package adapter

import (
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/gpuplane/gpuplane/api/scheduling/v1alpha1"
)

// A node marked as going away (a configured taint or condition) gives
// notice to every pod of the gangs with a pod on it, then evicts them,
// whole; pods of groups elsewhere are left alone, and nothing new lands
// there.
func TestDisruptedNodeGivesItsGangsNotice(t *testing.T) {
	tests := []struct {
		name   string
		mark   func(*corev1.Node)
		wantBy string
	}{
		{"Karpenter's disruption taint", func(n *corev1.Node) {
			n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: "karpenter.sh/disrupted", Effect: corev1.TaintEffectNoSchedule})
		}, "taint karpenter.sh/disrupted"},
		{"a spot notice as a node condition", func(n *corev1.Node) {
			n.Status.Conditions = append(n.Status.Conditions, corev1.NodeCondition{Type: "VMEventScheduled", Status: corev1.ConditionTrue})
		}, "condition VMEventScheduled"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newLoopFixture(t, Config{}, gpuNode("a", 4), gpuNode("b", 4), gpuNode("c", 4))
			f.cache.disruption.conditions = []string{"VMEventScheduled"}
			f.cache.upsertPodGroup(podGroup("train", 2))
			for i, node := range []string{"a", "b"} {
				p := newPod("ns", "train-"+string(rune('0'+i))).GPUs(4).Label(v1alpha1.PodGroupLabel, "train").Obj()
				p.Spec.NodeName = node
				f.cache.upsertPod(p)
			}
			solo := newPod("ns", "solo").GPUs(4).Obj()
			solo.Spec.NodeName = "c"
			f.cache.upsertPod(solo)
			f.cycle()
			if len(f.api.evicted) != 0 {
				t.Fatalf("evicted %v before any node goes away", f.api.evicted)
			}
			gone := gpuNode("a", 4)
			tc.mark(gone)
			f.cache.upsertNode(slimNode(gone))
			f.cycle()
			evicted := slices.Sorted(slices.Values(f.api.evicted))
			if !slices.Equal(evicted, []string{"ns/train-0", "ns/train-1"}) {
				t.Fatalf("evicted %v, want the whole gang and not solo", evicted)
			}
			for i, n := range f.api.notices {
				if n.Type != v1alpha1.ConditionPreemptionNotice || n.Reason != "NodeDisruption" {
					t.Errorf("%s: notice %+v, want PreemptionNotice NodeDisruption", f.api.evicted[i], n)
				}
				own := f.api.evicted[i] == "ns/train-0"
				if own && !strings.Contains(n.Message, "node a is going away ("+tc.wantBy+")") ||
					!own && !strings.Contains(n.Message, "another member of its gang") {
					t.Errorf("%s: notice message %q", f.api.evicted[i], n.Message)
				}
			}
		})
	}
}

// An elastic gang (minMember 2 of 3 pods) with one pod on a node going
// away loses only that pod, told that its group runs on; its members on
// the nodes that stay get no notice.
func TestDisruptedNodeShrinksAnElasticGang(t *testing.T) {
	f := newLoopFixture(t, Config{}, gpuNode("a", 4), gpuNode("b", 4), gpuNode("c", 4))
	f.cache.upsertPodGroup(podGroup("train", 2))
	for i, node := range []string{"a", "b", "c"} {
		p := newPod("ns", "train-"+string(rune('0'+i))).GPUs(4).Label(v1alpha1.PodGroupLabel, "train").Obj()
		p.Spec.NodeName = node
		f.cache.upsertPod(p)
	}
	f.cycle()
	if len(f.api.evicted) != 0 {
		t.Fatalf("evicted %v before any node goes away", f.api.evicted)
	}
	gone := gpuNode("a", 4)
	gone.Spec.Taints = append(gone.Spec.Taints, corev1.Taint{Key: "karpenter.sh/disrupted", Effect: corev1.TaintEffectNoSchedule})
	f.cache.upsertNode(slimNode(gone))
	f.cycle()
	if !slices.Equal(f.api.evicted, []string{"ns/train-0"}) {
		t.Fatalf("evicted %v, want only train-0, on the node going away", f.api.evicted)
	}
	n := f.api.notices[0]
	if n.Reason != "NodeDisruption" || !strings.Contains(n.Message, "node a is going away (taint karpenter.sh/disrupted)") ||
		!strings.Contains(n.Message, "runs on without it") {
		t.Errorf("notice %+v, want NodeDisruption naming node a and that its group runs on", n)
	}
}
