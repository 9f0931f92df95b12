package placement

import "github.com/gpuplane/gpuplane/internal/scheduler/model"

// What volumes take between the placements of one cycle
// (model.PodVolumes), kept with the rest of the free state:
//
//   - attachments, per node with attach limits: how many pods use each
//     attached volume and how many distinct volumes each driver has
//     attached, which Assign and Release change like CPU;
//   - exclusive uses, cluster-wide: how many pods use each value
//     (a ReadWriteOncePod claim), changed by Assign and Release too;
//   - PVs bound, cluster-wide: the PVs the cycle's placements took
//     for their claims. Assign chooses them and journals the choice, so
//     that Rollback gives back exactly those; Release gives none back
//     (a placed pod's claims are bound: model.PodVolumes.Placed), and
//     Commit forgets them all, since the next snapshot no longer offers
//     a PV that was bound.
//
// None of it is in a node's signature: a request without volumes
// (model.PodVolumes.Dynamic false) never reads it, and the Placer scans
// every node afresh for one with volumes, since taking a PV or an
// exclusive use on one node changes what every other node offers.

// Reasons the volume filters give (Why).
const (
	// FilterVolumeBinding: no PV a claim may bind is left on the node,
	// and its class does not provision (kube-scheduler's VolumeBinding).
	FilterVolumeBinding = "no available persistent volume to bind"
	// FilterVolumeLimits: the pod's volumes would take the node past its
	// attach limit for their driver (NodeVolumeLimits).
	FilterVolumeLimits = "node's volume attach limit reached"
	// FilterVolumeInUse: a ReadWriteOncePod claim of the pod is used by a
	// pod placed before it (VolumeRestrictions).
	FilterVolumeInUse = "ReadWriteOncePod claim in use"
)

// nodeVolumes is the attach state of a node with attach limits.
type nodeVolumes struct {
	users     map[model.Attachment]int
	perDriver map[string]int
}

// volumeState is the cluster-wide part.
type volumeState struct {
	exclusive map[string]int
	pvTaken   map[string]bool
	// lastPVs is what the last Assign chose for its request's claims
	// (LastVolumes).
	lastPVs []string
}

// volumeWhy returns why req's volumes refuse node i as the state is now,
// or "".
func (s *State) volumeWhy(i int, req *model.Request) string {
	v := req.Volumes
	if !v.Dynamic() {
		return ""
	}
	for _, x := range v.Exclusive {
		if s.vol.exclusive[x] > 0 {
			return FilterVolumeInUse
		}
	}
	if !s.attachFits(&s.Nodes[i], v) {
		return FilterVolumeLimits
	}
	if _, ok := s.choosePVs(i, v); !ok {
		return FilterVolumeBinding
	}
	return ""
}

// attachFits reports whether the pod's new attachments keep node ns
// within its limits: volumes already attached there count nothing.
func (s *State) attachFits(ns *NodeState, v *model.PodVolumes) bool {
	if ns.Node.Volumes == nil || len(v.Attach) == 0 {
		return true
	}
	var added map[string]int
	for k, a := range v.Attach {
		if firstOf(v.Attach, k) != k || ns.vol != nil && ns.vol.users[a] > 0 {
			continue
		}
		limit, ok := ns.Node.Volumes.Limit(a.Driver)
		if !ok {
			continue
		}
		if added == nil {
			added = map[string]int{}
		}
		added[a.Driver]++
		used := 0
		if ns.vol != nil {
			used = ns.vol.perDriver[a.Driver]
		}
		if used+added[a.Driver] > limit {
			return false
		}
	}
	return true
}

// firstOf is the index of the first attachment of as equal to as[k].
func firstOf(as []model.Attachment, k int) int {
	for j := range k {
		if as[j] == as[k] {
			return j
		}
	}
	return k
}

// choosePVs returns, for each claim of v in order, the PV it takes on node
// i (the first of its PVs reachable there that neither the cycle nor an
// earlier claim of the pod took), or "" where the claim's class
// provisions instead; false when a claim has neither.
func (s *State) choosePVs(i int, v *model.PodVolumes) ([]string, bool) {
	if v == nil || len(v.Claims) == 0 {
		return nil, true
	}
	node := s.Nodes[i].Node.Name
	out := make([]string, len(v.Claims))
	for k := range v.Claims {
		c := &v.Claims[k]
		found := false
		for p := range c.PVs {
			pv := &c.PVs[p]
			if s.vol.pvTaken[pv.Name] || !pv.Reachable(node) || chosen(out[:k], pv.Name) {
				continue
			}
			out[k], found = pv.Name, true
			break
		}
		if !found && !c.Provisions(node) {
			return nil, false
		}
	}
	return out, true
}

func chosen(names []string, name string) bool {
	for _, n := range names {
		if n == name {
			return true
		}
	}
	return false
}

// takePVs marks pvs taken.
func (s *State) takePVs(pvs []string, take bool) {
	for _, pv := range pvs {
		if pv == "" {
			continue
		}
		if take {
			if s.vol.pvTaken == nil {
				s.vol.pvTaken = map[string]bool{}
			}
			s.vol.pvTaken[pv] = true
		} else {
			delete(s.vol.pvTaken, pv)
		}
	}
}

// applyVolumes counts req's attachments on node i and its exclusive uses,
// or uncounts them.
func (s *State) applyVolumes(i int, req *model.Request, add bool) {
	v := req.Volumes
	if !v.Dynamic() {
		return
	}
	sign := 1
	if !add {
		sign = -1
	}
	for _, x := range v.Exclusive {
		if s.vol.exclusive == nil {
			s.vol.exclusive = map[string]int{}
		}
		if s.vol.exclusive[x] += sign; s.vol.exclusive[x] <= 0 {
			delete(s.vol.exclusive, x)
		}
	}
	ns := &s.Nodes[i]
	if ns.Node.Volumes == nil || len(v.Attach) == 0 {
		return
	}
	if ns.vol == nil {
		ns.vol = &nodeVolumes{users: map[model.Attachment]int{}, perDriver: map[string]int{}}
	}
	for k, a := range v.Attach {
		if firstOf(v.Attach, k) != k {
			continue
		}
		before := ns.vol.users[a]
		after := before + sign
		if after <= 0 {
			delete(ns.vol.users, a)
		} else {
			ns.vol.users[a] = after
		}
		switch {
		case before == 0 && after > 0:
			ns.vol.perDriver[a.Driver]++
		case before > 0 && after <= 0:
			if ns.vol.perDriver[a.Driver]--; ns.vol.perDriver[a.Driver] <= 0 {
				delete(ns.vol.perDriver, a.Driver)
			}
		}
	}
}

// LastVolumes returns what the last successful Assign chose for its
// request's claims, aligned with them (model.Bind.Volumes): a PV's name,
// or "" for a volume to provision. Nil for a request without claims.
func (s *State) LastVolumes() []string { return s.vol.lastPVs }

// staticVolumeFit reports whether node n could serve req's claims were no
// PV taken: each claim has a PV that may be used there, or provisions.
func staticVolumeFit(n *model.Node, req *model.Request) bool {
	if req.Volumes == nil {
		return true
	}
	for k := range req.Volumes.Claims {
		c := &req.Volumes.Claims[k]
		if c.Provisions(n.Name) {
			continue
		}
		ok := false
		for p := range c.PVs {
			if c.PVs[p].Reachable(n.Name) {
				ok = true
				break
			}
		}
		if !ok {
			return false
		}
	}
	return true
}
