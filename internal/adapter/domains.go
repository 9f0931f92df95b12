package adapter

import (
	"maps"

	corev1 "k8s.io/api/core/v1"

	"github.com/gpuplane/gpuplane/internal/scheduler/model"
)

// A node's labels reach the core in two ways: those a pod's node selector,
// affinity or tolerations read, as class labels (classes.go), and those
// read as topology keys (a pod affinity term's or spread constraint's
// topologyKey, a gang topology's levels), in model.Node.Domains. Only the
// keys some pod or gang has read are passed as domains: a label nothing
// reads (a labeller's timestamp, say) changes no model node, so the core
// keeps its state, and a label that is read changes only its node, which
// the core patches in place. A key stays read once it was, for as long as
// the builder lives: dropping it when its last pod goes would change
// every node that carries it.

// nodeDomains is the Domains of a node as built from one Node object with
// a number of domain keys.
type nodeDomains struct {
	node *corev1.Node
	keys int
	m    map[string]string
}

// readDomains notes keys as read as topology keys.
func (b *builder) readDomains(keys ...string) {
	for _, k := range keys {
		if !b.domainKeys[k] {
			b.domainKeys[k] = true
		}
	}
}

// readRequestDomains notes the topology keys of req's pod affinity terms
// and spread constraints.
func (b *builder) readRequestDomains(req *model.Request) {
	if a := req.Affinity; a != nil {
		for _, terms := range [][]model.PodAffinityTerm{a.Required, a.RequiredAnti, a.Preferred, a.PreferredAnti} {
			for i := range terms {
				b.readDomains(terms[i].TopologyKey)
			}
		}
	}
	for i := range req.Spread {
		b.readDomains(req.Spread[i].TopologyKey)
	}
}

// domainsOf returns node n's labels of the keys read as topology keys:
// the map passed last while neither the node nor the keys changed, or
// while its entries stay the same, so that the core finds it unchanged by
// identity.
func (b *builder) domainsOf(n *nodeInfo) map[string]string {
	last, ok := b.domains[n.node.Name]
	if ok && last.node == n.node && last.keys == len(b.domainKeys) {
		return last.m
	}
	var m map[string]string
	for k, v := range n.node.Labels {
		if b.domainKeys[k] {
			if m == nil {
				m = map[string]string{}
			}
			m[k] = v
		}
	}
	if ok && maps.Equal(m, last.m) {
		m = last.m
	}
	b.domains[n.node.Name] = nodeDomains{node: n.node, keys: len(b.domainKeys), m: m}
	return m
}
