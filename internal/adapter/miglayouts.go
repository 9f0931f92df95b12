package adapter

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gpuplane/gpuplane/api/gpunode"
	"github.com/gpuplane/gpuplane/internal/scheduler/model"
)

// MIG layouts that follow demand: what the adapter reads of a node that
// opts in (gpuplane.io/mig-layout-policy: follow-demand) and how it writes
// the core's proposals (gpuplane.io/mig-proposal).

// nodeMIG reads an opted-in node's MIG profiles from the agent's
// gpuplane.io/mig-layout annotation and its standing proposals from
// gpuplane.io/mig-proposal, with which of them the agent has not reported
// applied. A node that does not opt in gets nil; one that opts in but
// whose annotations cannot be used gets nil and a warning: it is placed
// as it is and never proposed for.
func nodeMIG(n *corev1.Node, gpus []model.GPU) (*model.NodeMIG, string) {
	if n.Labels[gpunode.LabelMIGLayoutPolicy] != gpunode.MIGLayoutFollowDemand {
		return nil, ""
	}
	s, ok := n.Annotations[gpunode.MIGLayoutAnnotation]
	if !ok {
		return nil, fmt.Sprintf("label %s=%s: the node has no %s annotation yet (gpuplane-agent writes it), so no layout is proposed for it",
			gpunode.LabelMIGLayoutPolicy, gpunode.MIGLayoutFollowDemand, gpunode.MIGLayoutAnnotation)
	}
	layout, err := gpunode.ParseMIGLayout(s)
	if err != nil {
		return nil, "annotation " + err.Error() + "; no MIG layout is proposed for the node"
	}
	if len(layout.GPUs) != len(gpus) || len(gpus) == 0 {
		return nil, fmt.Sprintf("annotation %s describes %d GPUs but the node has %d; no MIG layout is proposed for it", gpunode.MIGLayoutAnnotation, len(layout.GPUs), len(gpus))
	}
	id := layout.GPUs[0].DeviceID
	for _, g := range layout.GPUs {
		if g.DeviceID != id {
			return nil, fmt.Sprintf("annotation %s: GPUs of more than one model (%s, %s); no MIG layout is proposed for the node", gpunode.MIGLayoutAnnotation, id, g.DeviceID)
		}
	}
	m := &model.NodeMIG{}
	for _, p := range layout.Models[id] {
		if sl := model.ProfileSlices(p.Name); sl > 0 {
			m.Profiles = append(m.Profiles, model.MIGProfile{Name: p.Name, Slices: sl, Instances: p.Instances})
		}
	}
	if len(m.Profiles) == 0 {
		return nil, fmt.Sprintf("annotation %s: the node's GPUs (%s) offer no MIG profile; no MIG layout is proposed for it", gpunode.MIGLayoutAnnotation, id)
	}
	s, ok = n.Annotations[gpunode.MIGProposalAnnotation]
	if !ok {
		return m, ""
	}
	prop, err := gpunode.ParseMIGProposal(s)
	if err != nil {
		// The next proposal replaces it; until then the node is proposed
		// for as though it had none.
		return m, "annotation " + err.Error() + "; read as no proposal"
	}
	for _, p := range prop.GPUs {
		if p.Index >= len(layout.GPUs) {
			continue
		}
		m.Proposals = append(m.Proposals, p)
		if !p.ReportedBy(&layout.GPUs[p.Index]) {
			m.Pending = append(m.Pending, p.Index)
		}
	}
	return m, ""
}

// markRepartitioning has the GPUs of proposals the nodes have not
// reported applied, younger than the policy's timeout, serve nothing new:
// the agent would not re-partition a GPU a pod was bound to meanwhile. A
// proposal older than that is given up on (its GPU serves as its node
// reports it). Only nodes with such GPUs are copied.
func markRepartitioning(snap *model.Snapshot) {
	cloned := false
	for i := range snap.Nodes {
		m := snap.Nodes[i].MIG
		if m == nil || len(m.Pending) == 0 {
			continue
		}
		var gpus []model.GPU
		for _, g := range m.Pending {
			p, ok := m.Proposal(g)
			if !ok || snap.Layouts.Timeout > 0 && snap.Now-p.At >= snap.Layouts.Timeout || g >= len(snap.Nodes[i].GPUs) {
				continue
			}
			if gpus == nil {
				gpus = slices.Clone(snap.Nodes[i].GPUs)
			}
			gpus[g].Repartitioning = true
		}
		if gpus == nil {
			continue
		}
		if !cloned {
			snap.Nodes, cloned = slices.Clone(snap.Nodes), true
		}
		snap.Nodes[i].GPUs = gpus
	}
}

// layoutPolicy is the core's hysteresis from the config, in the
// snapshot's unit (milliseconds).
func layoutPolicy(c Config) model.LayoutPolicy {
	return model.LayoutPolicy{MinWait: c.MIGDemandMinWait.Milliseconds(), Dwell: c.MIGLayoutDwell.Milliseconds(),
		Timeout: c.MIGProposalTimeout.Milliseconds(), MaxPerNode: c.MIGMaxProposalsPerNode}
}

// assumeProposalFor bounds how long a written proposal the node does not
// show is taken as on it: an informer is that far behind only when
// something is wrong.
const assumeProposalFor = 10 * time.Second

// layoutWriter is the optional capability of a clusterWriter to write a
// node's MIG proposals.
type layoutWriter interface {
	// proposeLayouts writes value as the node's gpuplane.io/mig-proposal.
	proposeLayouts(ctx context.Context, node, value string) error
}

// proposeLayouts implements layoutWriter with a merge patch of the one
// annotation.
func (w *apiWriter) proposeLayouts(ctx context.Context, node, value string) error {
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{gpunode.MIGProposalAnnotation: value}}})
	if err != nil {
		return err
	}
	_, err = w.client.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: "gpuplane-scheduler"})
	return err
}

// writeLayouts writes the cycle's layout proposals onto their nodes: each
// node's standing proposals with the new ones replacing those for the
// same GPUs, so that the node's annotation says once what each GPU should
// be. It is done in the cycle, before the next one reads the node back.
func (l *loop) writeLayouts(ctx context.Context, in *cycleInput, ls []model.LayoutProposal) {
	if len(ls) == 0 {
		return
	}
	w, ok := l.api.(layoutWriter)
	if !ok {
		return
	}
	byNode := map[int][]model.LayoutProposal{}
	for _, p := range ls {
		byNode[p.NodeIndex] = append(byNode[p.NodeIndex], p)
	}
	for _, i := range slices.Sorted(maps.Keys(byNode)) {
		if i < 0 || i >= len(in.snap.Nodes) || in.snap.Nodes[i].MIG == nil {
			continue
		}
		n := &in.snap.Nodes[i]
		gpus := slices.Clone(n.MIG.Proposals)
		for _, p := range byNode[i] {
			gpus = slices.DeleteFunc(gpus, func(g gpunode.MIGProposalGPU) bool { return g.Index == p.Index })
			gpus = append(gpus, p.MIGProposalGPU)
			l.log.Info("proposing a MIG layout", "node", n.Name, "gpu", p.Index, "layout", p.String(), "for", p.For)
		}
		slices.SortFunc(gpus, func(a, b gpunode.MIGProposalGPU) int { return a.Index - b.Index })
		value, err := json.Marshal(gpunode.MIGProposal{V: 1, GPUs: gpus})
		if err != nil {
			l.log.Error(err, "encoding a MIG proposal", "node", n.Name)
			continue
		}
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err = w.proposeLayouts(wctx, n.Name, string(value))
		cancel()
		if err != nil {
			l.log.Error(err, "writing a MIG proposal", "node", n.Name)
			continue
		}
		l.metrics.layouts.Add(float64(len(byNode[i])))
		if l.proposed == nil {
			l.proposed = map[string][]gpunode.MIGProposalGPU{}
		}
		for _, p := range byNode[i] {
			l.proposed[n.Name] = append(l.proposed[n.Name], p.MIGProposalGPU)
		}
	}
}

// assumeLayouts adds to the snapshot's nodes the proposals written to
// them that the cache does not show yet, as pending, so that a cycle
// running before the node's update arrives neither proposes the same
// demand again nor binds a pod to a GPU about to be re-partitioned. A
// proposal the node shows (the same GPU, as new or newer) is no longer
// assumed, nor one older than assumeProposalFor (its write was lost or
// overwritten).
func (l *loop) assumeLayouts(snap *model.Snapshot) {
	if len(l.proposed) == 0 {
		return
	}
	seen := map[string]bool{}
	cloned := false
	for i := range snap.Nodes {
		n := &snap.Nodes[i]
		ps, ok := l.proposed[n.Name]
		if !ok {
			continue
		}
		seen[n.Name] = true
		if n.MIG == nil {
			delete(l.proposed, n.Name)
			continue
		}
		ps = slices.DeleteFunc(ps, func(p gpunode.MIGProposalGPU) bool {
			q, ok := n.MIG.Proposal(p.Index)
			return ok && q.At >= p.At || snap.Now-p.At > assumeProposalFor.Milliseconds()
		})
		if len(ps) == 0 {
			delete(l.proposed, n.Name)
			continue
		}
		l.proposed[n.Name] = ps
		if !cloned {
			snap.Nodes, cloned = slices.Clone(snap.Nodes), true
			n = &snap.Nodes[i]
		}
		m := *n.MIG
		m.Proposals, m.Pending = slices.Clone(m.Proposals), slices.Clone(m.Pending)
		for _, p := range ps {
			m.Proposals = slices.DeleteFunc(m.Proposals, func(q gpunode.MIGProposalGPU) bool { return q.Index == p.Index })
			m.Proposals = append(m.Proposals, p)
			if !slices.Contains(m.Pending, p.Index) {
				m.Pending = append(m.Pending, p.Index)
			}
		}
		slices.SortFunc(m.Proposals, func(a, b gpunode.MIGProposalGPU) int { return a.Index - b.Index })
		n.MIG = &m
	}
	for name := range l.proposed {
		if !seen[name] {
			delete(l.proposed, name)
		}
	}
}
