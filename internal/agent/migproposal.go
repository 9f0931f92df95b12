package agent

import (
	"context"
	"log/slog"
	"sync"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/tools/cache"

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
	lw := cache.NewListWatchFromClient(p.client.rest, "nodes", metav1.NamespaceAll, fields.OneTermEqualSelector("metadata.name", p.node))
	on := func(obj any) {
		n, ok := obj.(*corev1.Node)
		if !ok {
			return
		}
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
	_, ctrl := cache.NewInformerWithOptions(cache.InformerOptions{
		ListerWatcher: lw, ObjectType: &corev1.Node{},
		// Only the label and the annotation are kept.
		Transform: func(obj any) (any, error) {
			n, ok := obj.(*corev1.Node)
			if !ok {
				return obj, nil
			}
			slim := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n.Name, ResourceVersion: n.ResourceVersion}}
			if v, ok := n.Labels[gpunode.LabelMIGLayoutPolicy]; ok {
				slim.Labels = map[string]string{gpunode.LabelMIGLayoutPolicy: v}
			}
			if v, ok := n.Annotations[gpunode.MIGProposalAnnotation]; ok {
				slim.Annotations = map[string]string{gpunode.MIGProposalAnnotation: v}
			}
			return slim, nil
		},
		Handler: cache.ResourceEventHandlerFuncs{AddFunc: on, UpdateFunc: func(_, obj any) { on(obj) }},
	})
	go ctrl.RunWithContext(ctx)
	return ctrl.HasSynced
}
