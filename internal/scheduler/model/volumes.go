package model

import "slices"

// PodVolumes is what a pod's volumes ask of the core beyond the nodes
// they allow (which a driver expresses through the node selector): what
// one cycle's placements take from each other. A nil *PodVolumes asks
// nothing.
type PodVolumes struct {
	// Claims are the pod's unbound claims of a class that binds when the
	// pod is placed (volumeBindingMode WaitForFirstConsumer): each takes
	// one of its PVs on the chosen node, or, where none is left and the
	// class provisions, a volume provisioned there.
	Claims []ClaimNeed `json:"claims,omitempty"`
	// Attach are the volumes the pod attaches to its node, counted once
	// per node however many pods use one, against the node's limit for
	// their driver (Node.Volumes).
	Attach []Attachment `json:"attach,omitempty"`
	// Exclusive names what only one pod may use at a time (a claim with
	// the ReadWriteOncePod access mode): two pods that name one value
	// are never both placed.
	Exclusive []string `json:"exclusive,omitempty"`
}

// ClaimNeed is one unbound claim: the PVs that may serve it, best first
// (the smallest that fits, as kube-scheduler chooses), and whether a
// volume may be provisioned for it instead.
type ClaimNeed struct {
	Claim string `json:"claim"`
	PVs   []PV   `json:"pvs,omitempty"`
	// Provision: the claim's class provisions volumes, so a node where
	// no PV is left serves it too: any node, or, when ProvisionNodes is
	// not nil, those it lists (sorted), which the class's allowed
	// topologies admit.
	Provision      bool     `json:"provision,omitempty"`
	ProvisionNodes []string `json:"provisionNodes,omitempty"`
}

// Provisions reports whether the claim may be provisioned on the named
// node.
func (c *ClaimNeed) Provisions(node string) bool {
	if !c.Provision {
		return false
	}
	if c.ProvisionNodes == nil {
		return true
	}
	_, ok := slices.BinarySearch(c.ProvisionNodes, node)
	return ok
}

// PV is an available persistent volume a claim may bind: its name and
// the nodes its node affinity allows, sorted; nil Nodes means any node.
type PV struct {
	Name  string   `json:"name"`
	Nodes []string `json:"nodes,omitempty"`
}

// Reachable reports whether the PV may be used on the named node.
func (v *PV) Reachable(node string) bool {
	if v.Nodes == nil {
		return true
	}
	_, ok := slices.BinarySearch(v.Nodes, node)
	return ok
}

// Attachment is a volume attached to a node by a driver (a CSI driver's
// name) under an ID unique for that driver.
type Attachment struct {
	Driver string `json:"driver"`
	ID     string `json:"id"`
}

// NodeVolumes is what a node allows of volumes.
type NodeVolumes struct {
	// Limits caps, per driver, how many distinct volumes may be attached
	// to the node at once (a CSINode's allocatable count).
	Limits []AttachLimit `json:"limits,omitempty"`
}

// AttachLimit is a node's limit of attached volumes of one driver.
type AttachLimit struct {
	Driver string `json:"driver"`
	Max    int    `json:"max"`
}

// Limit returns the node's attach limit for driver, and false when it has
// none.
func (nv *NodeVolumes) Limit(driver string) (int, bool) {
	if nv == nil {
		return 0, false
	}
	for _, l := range nv.Limits {
		if l.Driver == driver {
			return l.Max, true
		}
	}
	return 0, false
}

// Dynamic reports whether placing the pod changes what others may be
// placed, or depends on what was placed before it in the same cycle:
// it has claims to bind, volumes to attach or exclusive uses.
func (v *PodVolumes) Dynamic() bool {
	return v != nil && (len(v.Claims) > 0 || len(v.Attach) > 0 || len(v.Exclusive) > 0)
}

// ClaimsBound is the request of the pod once bound by b: the alternative
// b chose (Alt), its volume claims bound (PodVolumes.Placed), and an
// AllOfSet request's GPUs the ones b gave it; the rest as it was.
func (r *Request) ClaimsBound(b *Bind) Request {
	out := *r.Alt(b.Alternative)
	out.Volumes = out.Volumes.Placed()
	if out.AllOfSet {
		out.GPUs, out.AllOfSet = len(b.GPUs), false
	}
	return out
}

// dropBoundPVs takes the PVs binds bound out of what the pending pods'
// claims may still take.
func dropBoundPVs(pending []PodGroup, binds []Bind) {
	var taken map[string]bool
	for _, b := range binds {
		for _, pv := range b.Volumes {
			if pv != "" {
				if taken == nil {
					taken = map[string]bool{}
				}
				taken[pv] = true
			}
		}
	}
	if taken == nil {
		return
	}
	// Apply made every pending group's Pods afresh: they may be written.
	for i := range pending {
		for k := range pending[i].Pods {
			r := &pending[i].Pods[k].Request
			r.Volumes = r.Volumes.withoutPVs(taken)
		}
	}
}

// Placed is the pod's volumes once it is bound with the PVs chosen
// (Bind.Volumes): its claims are bound, so it asks for none any more,
// while what it attaches and uses exclusively stays with it.
func (v *PodVolumes) Placed() *PodVolumes {
	if v == nil || len(v.Claims) == 0 {
		return v
	}
	if len(v.Attach) == 0 && len(v.Exclusive) == 0 {
		return nil
	}
	return &PodVolumes{Attach: v.Attach, Exclusive: v.Exclusive}
}

// withoutPVs returns v with the PVs in taken no longer offered to its
// claims: they were bound to other pods' claims.
func (v *PodVolumes) withoutPVs(taken map[string]bool) *PodVolumes {
	if v == nil || len(v.Claims) == 0 {
		return v
	}
	var out *PodVolumes
	for i, c := range v.Claims {
		if !slices.ContainsFunc(c.PVs, func(pv PV) bool { return taken[pv.Name] }) {
			continue
		}
		if out == nil {
			out = &PodVolumes{Claims: slices.Clone(v.Claims), Attach: v.Attach, Exclusive: v.Exclusive}
		}
		out.Claims[i].PVs = slices.DeleteFunc(slices.Clone(c.PVs), func(pv PV) bool { return taken[pv.Name] })
	}
	if out == nil {
		return v
	}
	return out
}
