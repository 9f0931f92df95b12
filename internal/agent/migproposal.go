package agent

import (
	"context"
	"log/slog"
	"sync"

	corev1 "k8s.io/api/core/v1"

	"github.com/gpuplane/gpuplane/api/gpunode"
	"github.com/gpuplane/gpuplane/internal/mig"
)

// migProposals follows the node's gpuplane.io/mig-layout-policy label and
// gpuplane-scheduler's gpuplane.io/mig-proposal annotation: on a node
// that follows demand, the proposal's layouts are the MIG reconciler's
// per-GPU overrides (mig.Reconciler.Overrides); on any other node there
// are none, whatever the annotation says.
type migProposals struct {
	node    string
	client  *nodeClient
	trigger func()
	log     *slog.Logger

	mu     sync.Mutex
	follow bool
	value  string
}

// overrides implements mig.Reconciler.Overrides. An annotation that does
// not parse is an error: the reconciler ignores it and says so.
func (p *migProposals) overrides(context.Context) (map[int]mig.Layout, error) {
	p.mu.Lock()
	follow, value := p.follow, p.value
	p.mu.Unlock()
	if !follow || value == "" {
		return nil, nil
	}
	prop, err := gpunode.ParseMIGProposal(value)
	if err != nil {
		return nil, err
	}
	return mig.Overrides(prop), nil
}

// watch keeps the label and the annotation until ctx ends, triggering a
// pass when either changes.
func (p *migProposals) watch(ctx context.Context) (synced func() bool) {
	on := func(n *corev1.Node) {
		follow := n.Labels[gpunode.LabelMIGLayoutPolicy] == gpunode.MIGLayoutFollowDemand
		value := n.Annotations[gpunode.MIGProposalAnnotation]
		p.mu.Lock()
		changed := follow != p.follow || value != p.value
		p.follow, p.value = follow, value
		p.mu.Unlock()
		if changed {
			if p.log != nil && follow {
				p.log.Info("MIG proposal for this node", "proposal", value)
			}
			p.trigger()
		}
	}
	return watchNodeKeys(ctx, p.client, p.node, []string{gpunode.LabelMIGLayoutPolicy}, []string{gpunode.MIGProposalAnnotation}, on)
}
