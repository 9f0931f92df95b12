package differential

import (
	"context"
	"maps"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// shrink finds a smaller case than c on which the schedulers still
// differ in the same way (difference.kind): only the pending pod they differ on, then greedily fewer nodes,
// fewer running pods, and fewer labels, taints, resources, tolerations,
// selector entries and affinity requirements, one at a time, keeping each
// change after which they still differ, until none is left to take away.
func shrink(ctx context.Context, o *oracle, c *cluster, d *difference) *cluster {
	want := d.kind()
	differs := func(x *cluster) bool {
		dd, err := differ(ctx, o, x)
		return err == nil && dd != nil && dd.kind() == want
	}
	cur := &cluster{nodes: c.nodes, running: c.running, pending: []*corev1.Pod{d.pod}, objects: c.objects}
	if !differs(cur) {
		cur = c
	}
	for {
		shrunk := false
		for _, x := range smaller(cur) {
			if differs(x) {
				cur, shrunk = x, true
				break
			}
		}
		if !shrunk {
			return cur
		}
	}
}

// smaller lists the cases one step smaller than c, largest steps first.
func smaller(c *cluster) []*cluster {
	var out []*cluster
	for i := range c.nodes {
		x := c.clone()
		gone := x.nodes[i].Name
		x.nodes = slices.Delete(x.nodes, i, i+1)
		x.running = slices.DeleteFunc(x.running, func(p *corev1.Pod) bool { return p.Spec.NodeName == gone })
		out = append(out, x)
	}
	for i := range c.running {
		x := c.clone()
		x.running = slices.Delete(x.running, i, i+1)
		out = append(out, x)
	}
	for i := range c.objects {
		x := c.clone()
		x.objects = slices.Delete(x.objects, i, i+1)
		out = append(out, x)
	}
	for i := range c.nodes {
		n := c.nodes[i]
		edit := func(f func(n *corev1.Node)) {
			x := c.clone()
			f(x.nodes[i])
			out = append(out, x)
		}
		if n.Spec.Unschedulable {
			edit(func(n *corev1.Node) { n.Spec.Unschedulable = false })
		}
		for k := range n.Spec.Taints {
			edit(func(n *corev1.Node) { n.Spec.Taints = slices.Delete(n.Spec.Taints, k, k+1) })
		}
		for _, k := range slices.Sorted(maps.Keys(n.Labels)) {
			edit(func(n *corev1.Node) { delete(n.Labels, k) })
		}
		for _, r := range slices.Sorted(maps.Keys(n.Status.Allocatable)) {
			if r == corev1.ResourcePods {
				continue
			}
			edit(func(n *corev1.Node) { delete(n.Status.Allocatable, r); delete(n.Status.Capacity, r) })
		}
	}
	for i := range c.running {
		out = append(out, podEdits(c, func(x *cluster) *corev1.Pod { return x.running[i] })...)
	}
	for i := range c.pending {
		out = append(out, podEdits(c, func(x *cluster) *corev1.Pod { return x.pending[i] })...)
	}
	return out
}

// podEdits lists the cases with one thing less in the pod at(c): a
// container, a resource, a toleration, a selector entry, an affinity term
// or requirement.
func podEdits(c *cluster, at func(*cluster) *corev1.Pod) []*cluster {
	var out []*cluster
	p := at(c)
	edit := func(f func(p *corev1.Pod)) {
		x := c.clone()
		f(at(x))
		out = append(out, x)
	}
	if len(p.Spec.InitContainers) > 0 {
		edit(func(p *corev1.Pod) { p.Spec.InitContainers = nil })
	}
	if len(p.Spec.Containers) > 1 {
		edit(func(p *corev1.Pod) { p.Spec.Containers = p.Spec.Containers[:1] })
	}
	for _, cs := range [][]corev1.Container{p.Spec.InitContainers, p.Spec.Containers} {
		for k := range cs {
			name := cs[k].Name
			for _, r := range slices.Sorted(maps.Keys(cs[k].Resources.Requests)) {
				edit(func(p *corev1.Pod) {
					for _, cs := range [][]corev1.Container{p.Spec.InitContainers, p.Spec.Containers} {
						for k := range cs {
							if cs[k].Name == name {
								delete(cs[k].Resources.Requests, r)
								delete(cs[k].Resources.Limits, r)
							}
						}
					}
				})
			}
		}
	}
	for k := range p.Spec.Tolerations {
		edit(func(p *corev1.Pod) { p.Spec.Tolerations = slices.Delete(p.Spec.Tolerations, k, k+1) })
	}
	for _, k := range slices.Sorted(maps.Keys(p.Spec.NodeSelector)) {
		edit(func(p *corev1.Pod) { delete(p.Spec.NodeSelector, k) })
	}
	if a := p.Spec.Affinity; a != nil {
		if a.NodeAffinity != nil {
			edit(func(p *corev1.Pod) { p.Spec.Affinity.NodeAffinity = nil })
			terms := a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
			for k := range terms {
				if len(terms) > 1 {
					edit(func(p *corev1.Pod) {
						sel := p.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution
						sel.NodeSelectorTerms = slices.Delete(sel.NodeSelectorTerms, k, k+1)
					})
				}
				for e := range terms[k].MatchExpressions {
					if len(terms[k].MatchExpressions)+len(terms[k].MatchFields) > 1 {
						edit(func(p *corev1.Pod) {
							t := &p.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms[k]
							t.MatchExpressions = slices.Delete(t.MatchExpressions, e, e+1)
						})
					}
				}
				if len(terms[k].MatchFields) > 0 && len(terms[k].MatchExpressions) > 0 {
					edit(func(p *corev1.Pod) {
						p.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms[k].MatchFields = nil
					})
				}
			}
		}
		if a.PodAffinity != nil {
			edit(func(p *corev1.Pod) { p.Spec.Affinity.PodAffinity = nil })
		}
		if a.PodAntiAffinity != nil {
			edit(func(p *corev1.Pod) { p.Spec.Affinity.PodAntiAffinity = nil })
		}
	}
	for k := range p.Spec.Volumes {
		edit(func(p *corev1.Pod) { p.Spec.Volumes = slices.Delete(p.Spec.Volumes, k, k+1) })
	}
	if len(p.Spec.TopologySpreadConstraints) > 0 {
		edit(func(p *corev1.Pod) { p.Spec.TopologySpreadConstraints = nil })
	}
	if p.Spec.Resources != nil {
		edit(func(p *corev1.Pod) { p.Spec.Resources = nil })
	}
	if p.Spec.Overhead != nil {
		edit(func(p *corev1.Pod) { p.Spec.Overhead, p.Spec.RuntimeClassName = nil, nil })
	}
	for k := range p.Spec.Containers {
		if len(p.Spec.Containers[k].Ports) > 0 {
			edit(func(p *corev1.Pod) { p.Spec.Containers[k].Ports = nil })
		}
	}
	return out
}

// clone deep-copies every object of c.
func (c *cluster) clone() *cluster {
	x := &cluster{}
	for _, n := range c.nodes {
		x.nodes = append(x.nodes, n.DeepCopy())
	}
	for _, p := range c.running {
		x.running = append(x.running, p.DeepCopy())
	}
	for _, p := range c.pending {
		x.pending = append(x.pending, p.DeepCopy())
	}
	for _, o := range c.objects {
		x.objects = append(x.objects, o.DeepCopyObject())
	}
	return x
}

// kind names how the schedulers differ on the first node where they do:
// which of them takes the pod, and the filter of the one that refuses it
// (up to the first colon: the plugin, or gpuplane's reason without its
// details). Shrinking keeps it, so that taking something away never turns
// one difference into another (a label a node needs, say).
func (d *difference) kind() string {
	for _, n := range slices.Sorted(maps.Keys(d.kube)) {
		k, g := d.kube[n], d.ours[n]
		if (k == "") == (g == "") {
			continue
		}
		if k == "" {
			g, _, _ = strings.Cut(g, ":")
			return "gpuplane refuses: " + g
		}
		k, _, _ = strings.Cut(k, ":")
		return "kube-scheduler refuses: " + k
	}
	return ""
}
