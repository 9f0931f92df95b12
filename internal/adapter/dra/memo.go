package dra

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/klog/v2"

	"github.com/gpuplane/gpuplane/internal/scheduler/model"
)

// Memo is what the snapshot builder keeps of DRA between cycles: the
// device sets of pending pods' claims, kept while slices, classes and the
// builder's nodes stay the same (resetSets), and the sets the last model
// nodes were given. It reads a State and lives with the builder, which
// calls it under the lock that guards the State. The zero Memo is ready.
type Memo struct {
	// Log receives why a pod's extended resource is left to the device
	// plugin.
	Log klog.Logger
	// SetNames are the device sets the builder's last model nodes were
	// given, sorted: while they and the nodes stay the same, so do the
	// model nodes.
	SetNames []string

	// sets are the device sets by claim shape (and by extended resource
	// over a shape); claimSets by claim object, for the common pod of one
	// claim.
	sets      map[string]*DeviceSet
	claimSets map[string]claimSetMemo
	// erSets memoizes, by pending pod object, its extended-resource
	// claim not made yet and the claim's device set (extended.go).
	erSets map[string]erMemo
	// exact are the device sets made exact on a node for a pod whose
	// claims refused the core's choice there (exactSet), by pod.
	exact map[string]exactMemo
	// version and nodes are the State's version and the builder's nodes
	// version the sets were made for.
	version, nodes int
	nextSet        int
	// views and devices are the builder's nodes, and their GPUs as device
	// sets are evaluated on them, made again when the sets are reset.
	views   []NodeView
	devices []NodeDevices
}

// Nodes are the builder's nodes, which device sets' masks are aligned
// with: Version changes whenever the list or a node's model changes; List
// returns them, and is called once per Version at most.
type Nodes struct {
	Version int
	List    func() []NodeView
}

// claimSetMemo is the device set of one claim object.
type claimSetMemo struct {
	claim *resourceapi.ResourceClaim
	set   *DeviceSet
}

// exactMemo is a device set exactSet made, with what it was made from.
type exactMemo struct {
	base    *DeviceSet
	refusal refusal
	set     *DeviceSet
}

// maxDeviceSets and maxClaimSets bound the device sets kept between
// cycles, by shape and by claim.
const (
	maxDeviceSets = 1024
	maxClaimSets  = 1 << 17
)

// PodClaims resolves what a pending pod asks through ResourceClaims, or
// for its extended resources through a claim (nil, nil when neither),
// with its device set made exact where its claims refused the core's last
// choice (AllocateChoice); or why it waits.
func (m *Memo) PodClaims(s *State, nodes Nodes, pp Pending, now time.Time) (*Claims, *Wait) {
	var pc *Claims
	var w *Wait
	if len(pp.Pod.Spec.ResourceClaims) > 0 {
		pc, w = m.resolveClaims(s, &nodes, pp)
	} else {
		pc, w = m.resolveExtended(s, &nodes, pp)
	}
	if pc != nil && pc.Set != nil {
		pc.Set = m.exactSet(s, &nodes, pp.Key, pc.Set, now)
	}
	return pc, w
}

// nodeViews returns the builder's nodes, listed once per reset.
func (m *Memo) nodeViews(nodes *Nodes) []NodeView {
	if m.views == nil {
		m.views = nodes.List()
	}
	return m.views
}

// nodeDevices returns the nodes' GPUs for EvalDeviceSet, aligned with the
// builder's nodes.
func (m *Memo) nodeDevices(nodes *Nodes) []NodeDevices {
	if m.devices == nil {
		views := m.nodeViews(nodes)
		m.devices = make([]NodeDevices, len(views))
		for i, n := range views {
			m.devices[i] = NodeDevices{Name: n.Node.Name, Devs: n.Devs}
		}
	}
	return m.devices
}

// deviceSet returns the device set of a list of claim specs, evaluated
// once per shape while slices, classes and nodes stay the same.
func (m *Memo) deviceSet(s *State, nodes *Nodes, specs []ClaimSpec) *DeviceSet {
	m.resetSets(s, nodes)
	raw, err := json.Marshal(specs)
	if err != nil {
		return &DeviceSet{Err: fmt.Sprintf("encoding its requests: %v", err), ErrCode: "InvalidResourceClaim"}
	}
	key := string(raw)
	if set := m.sets[key]; set != nil {
		return set
	}
	set := EvalDeviceSet(m.nodeDevices(nodes), specs, s.classes, s.cel)
	m.nextSet++
	set.Name = deviceSetPrefix + strconv.Itoa(m.nextSet)
	for k, alt := range set.FirstOf {
		alt.Name = set.Name + "." + strconv.Itoa(k)
	}
	if len(m.sets) >= maxDeviceSets {
		clear(m.sets)
	}
	m.sets[key] = set
	return set
}

// resetSets forgets the device sets once slices, classes or nodes
// changed.
func (m *Memo) resetSets(s *State, nodes *Nodes) {
	if m.version != s.version || m.nodes != nodes.Version || m.sets == nil {
		m.sets = map[string]*DeviceSet{}
		m.claimSets = map[string]claimSetMemo{}
		m.erSets = map[string]erMemo{}
		m.exact = nil
		m.views, m.devices = nil, nil
		m.version, m.nodes = s.version, nodes.Version
	}
}

// exactSet returns a pod's device set, narrowed on the node where the
// pod's claims refused the core's last choice to the GPUs that can serve
// them there (none: the node is out of the set), while that refusal
// stands. So the core, the only chooser of GPUs, chooses again: that node
// with GPUs that satisfy the claims, or another node.
func (m *Memo) exactSet(s *State, nodes *Nodes, pod string, set *DeviceSet, now time.Time) *DeviceSet {
	r, ok := s.refusalFor(pod, now)
	if !ok {
		return set
	}
	m.resetSets(s, nodes)
	if e, ok := m.exact[pod]; ok && e.base == set && e.refusal == r {
		return e.set
	}
	i := slices.IndexFunc(m.nodeViews(nodes), func(n NodeView) bool { return n.Node.Name == r.node })
	if i < 0 {
		return set
	}
	m.nextSet++
	name := set.Name + "/exact-" + strconv.Itoa(m.nextSet)
	x := narrowed(set, i, r.gpus, name)
	if len(set.FirstOf) > 0 {
		// Only the alternative the allocator chose stays on the node,
		// on the GPUs it chose: the core cannot choose an earlier one
		// there that the claims' constraints refuse.
		x.FirstOf = make([]*DeviceSet, len(set.FirstOf))
		for k, alt := range set.FirstOf {
			gpus := r.gpus
			if k != r.alt {
				gpus = 0
			}
			x.FirstOf[k] = narrowed(alt, i, gpus, name+"."+strconv.Itoa(k))
		}
	}
	if m.exact == nil || len(m.exact) >= maxClaimSets {
		m.exact = map[string]exactMemo{}
	}
	m.exact[pod] = exactMemo{base: set, refusal: r, set: x}
	return x
}

// narrowed is set with only the GPUs in gpus left of node i's, named
// name.
func narrowed(set *DeviceSet, i int, gpus uint64, name string) *DeviceSet {
	x := *set
	x.Name = name
	if x.Masks != nil {
		x.Masks = slices.Clone(set.Masks)
		x.Masks[i] &= gpus
	}
	if x.AdminNodes != nil {
		// Claims with admin access are allocated over all of the node's
		// devices: a refusal there excludes the node.
		x.AdminNodes = slices.Clone(set.AdminNodes)
		x.AdminNodes[i] = x.AdminNodes[i] && gpus != 0
	}
	return &x
}

// WithDeviceSets returns the GPUs of node i with the device sets in use
// they belong to; the node's own slice when none.
func WithDeviceSets(gpus []model.GPU, i int, sets []*DeviceSet) []model.GPU {
	var out []model.GPU
	for _, s := range sets {
		m := s.Masks[i]
		if m == 0 {
			continue
		}
		if out == nil {
			out = make([]model.GPU, len(gpus))
			for g := range gpus {
				out[g] = gpus[g]
				out[g].DeviceSets = ""
			}
		}
		for g := range out {
			if g < 64 && m&(1<<uint(g)) != 0 {
				if out[g].DeviceSets != "" {
					out[g].DeviceSets += ","
				}
				out[g].DeviceSets += s.Name
			}
		}
	}
	if out == nil {
		return gpus
	}
	return out
}
