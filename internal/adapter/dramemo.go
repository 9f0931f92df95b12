package adapter

import (
	"slices"
	"strconv"
	"time"

	"github.com/gpuplane/gpuplane/internal/adapter/dra"
)

// draMemo is what the builder keeps of DRA between cycles: the device sets
// of pending pods' claims (drasets.go, draext.go), kept while slices,
// classes and nodes stay the same (resetSets), and the sets the last model
// nodes were given. It lives on the cycle goroutine with the builder.
type draMemo struct {
	// sets are the device sets by claim shape (and by extended resource
	// over a shape); claimSets by claim object, for the common pod of one
	// claim.
	sets      map[string]*deviceSet
	claimSets map[string]claimSetMemo
	// erSets memoizes, by pending pod object, its extended-resource
	// claim not made yet and the claim's device set (draext.go).
	erSets map[string]erMemo
	// exact are the device sets made exact on a node for a pod whose
	// claims refused the core's choice there (exactSet), by pod.
	exact map[string]exactMemo
	// version and nodes are the cache's DRA version and the builder's
	// nodes version the sets were made for.
	version, nodes int
	nextSet        int
	setNames       []string
	// devices are the builder's nodes' GPUs as device sets are evaluated
	// on them, made again when the sets are reset.
	devices []dra.NodeDevices
}

// nodeDevices returns the nodes' GPUs for dra.EvalDeviceSet, aligned
// with nodes.
func (m *draMemo) nodeDevices(nodes []*nodeInfo) []dra.NodeDevices {
	if m.devices == nil {
		m.devices = make([]dra.NodeDevices, len(nodes))
		for i, n := range nodes {
			m.devices[i] = dra.NodeDevices{Name: n.node.Name, Devs: n.devs}
		}
	}
	return m.devices
}

// exactMemo is a device set exactSet made, with what it was made from.
type exactMemo struct {
	base    *deviceSet
	refusal choiceRefusal
	set     *deviceSet
}

// podClaims resolves what a pending pod asks through ResourceClaims, or
// for its extended resources through a claim (nil, nil when neither),
// with its device set made exact where its claims refused the core's last
// choice. Caller holds c.mu.
func (b *builder) podClaims(c *clusterCache, pi *podInfo, now time.Time) (*podClaims, *BadInputError) {
	var pc *podClaims
	var bad *BadInputError
	if len(pi.pod.Spec.ResourceClaims) > 0 {
		pc, bad = b.resolveClaims(c, pi)
	} else {
		pc, bad = b.resolveExtended(c, pi)
	}
	if pc != nil && pc.set != nil {
		pc.set = b.exactSet(c, pi.key, pc.set, now)
	}
	return pc, bad
}

// exactSet returns a pod's device set, narrowed on the node where the
// pod's claims refused the core's last choice to the GPUs that can serve
// them there (none: the node is out of the set), while that refusal
// stands (choiceRefusal). So the core, the only chooser of GPUs, chooses
// again: that node with GPUs that satisfy the claims, or another node.
// Caller holds c.mu.
func (b *builder) exactSet(c *clusterCache, pod string, set *deviceSet, now time.Time) *deviceSet {
	r, ok := c.dra.refused[pod]
	if !ok || r.version != c.dra.version || now.Sub(r.at) > choiceRefusalTTL {
		return set
	}
	if m, ok := b.dra.exact[pod]; ok && m.base == set && m.refusal == r {
		return m.set
	}
	i := slices.IndexFunc(b.nodes, func(n *nodeInfo) bool { return n.node.Name == r.node })
	if i < 0 {
		return set
	}
	s := *set
	s.Masks = slices.Clone(set.Masks)
	s.Masks[i] &= r.gpus
	b.dra.nextSet++
	s.Name = set.Name + "/exact-" + strconv.Itoa(b.dra.nextSet)
	if b.dra.exact == nil || len(b.dra.exact) >= maxClaimSets {
		b.dra.exact = map[string]exactMemo{}
	}
	b.dra.exact[pod] = exactMemo{base: set, refusal: r, set: &s}
	return &s
}
