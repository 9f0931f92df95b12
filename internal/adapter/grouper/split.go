package grouper

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
)

// maxSplitGroups bounds the groups one workload is split into: a rule
// whose spec.groupBy gives every pod a key of its own would otherwise
// make a PodGroup per pod.
const maxSplitGroups = 10000

// split is the decision for a workload whose rule splits it by pod
// (spec.groupBy): the workload as read, and each key's group as decided
// when its first pod asked. groups is guarded by the Grouper's mu.
type split struct {
	rule   *Rule
	top    *unstructured.Unstructured
	groups map[string]*decision
}

// splitDecisionLocked works out pod p's key under split decision d of
// owner k and returns the key's group, nil while it is not decided. A pod
// whose key cannot be worked out is held with the error until the
// decision is made anew. Caller holds mu.
func (g *Grouper) splitDecisionLocked(k ownerKey, d *decision, p *corev1.Pod) (*decision, string, error) {
	s := d.split
	key, err := s.rule.GroupKey(s.top.Object, PodMeta{Name: p.Name, Namespace: p.Namespace, Labels: p.Labels, Annotations: p.Annotations})
	if err != nil {
		err = fmt.Errorf("%s %s: %w", s.top.GetKind(), s.top.GetName(), err)
		h := g.held[k.UID]
		if h == nil {
			h = &heldPods{key: k, pods: map[string]waitingPod{}}
			g.held[k.UID] = h
		}
		if len(h.pods) < maxWaiting {
			id := p.Namespace + "/" + p.Name
			h.pods[id] = waitingPod{NamespacedName: nameOf(p)}
		}
		g.queue.AddAfter(k, decisionTTL)
		return nil, "", err
	}
	return s.groups[key], key, nil
}

// decideKeys decides the group of every key that pods waiting on owner k
// give and split decision d has not decided yet. An error return is
// transient (the API): the pods stay waiting.
func (g *Grouper) decideKeys(ctx context.Context, k ownerKey, d *decision) error {
	s := d.split
	g.mu.Lock()
	var keys []string
	seen := map[string]bool{}
	for _, p := range g.waiting[k.UID] {
		if p.keyed && s.groups[p.key] == nil && !seen[p.key] {
			seen[p.key] = true
			keys = append(keys, p.key)
		}
	}
	g.mu.Unlock()
	for _, key := range keys {
		g.mu.Lock()
		n := len(s.groups)
		g.mu.Unlock()
		var sub *decision
		if n >= maxSplitGroups {
			sub = &decision{err: fmt.Errorf("%s %s: GroupingRule %s: spec.groupBy: more than %d groups; give pods fewer keys",
				s.top.GetKind(), s.top.GetName(), s.rule.Name, maxSplitGroups)}
		} else {
			var err error
			if sub, err = g.makeGroup(ctx, s.top, s.rule, key); err != nil {
				return err
			}
		}
		sub.at = g.now()
		g.mu.Lock()
		s.groups[key] = sub
		g.mu.Unlock()
	}
	return nil
}

func nameOf(p *corev1.Pod) types.NamespacedName {
	return types.NamespacedName{Namespace: p.Namespace, Name: p.Name}
}
