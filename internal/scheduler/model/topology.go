package model

import (
	"fmt"
	"slices"
)

// GangTopology places a gang by the network. Levels are node label keys,
// widest first (for example a zone, a block, a rack, an NVLink domain's
// nvidia.com/gpu.clique, kubernetes.io/hostname); a domain of a level is
// the set of nodes sharing one value of its key, read from Node.Domains
// (then Node.Labels), and a node without the key belongs to no domain of
// that level.
//
// Required, Preferred and SliceRequired name levels by their key:
//   - Required: every pod of the gang placed together lands inside one
//     domain of that level, or none is placed;
//   - Preferred: the gang spans as few domains as it can, as close to that
//     level as the cluster allows (one domain of it, else one of the next
//     wider level, and so on);
//   - SliceRequired: each slice of the gang lands inside one domain of
//     that level, while the whole gang keeps Required or Preferred. A
//     slice is the pods sharing one Pod.Slice (with SliceSize 0, a pod
//     without one is in no slice); with SliceSize set and a pod that
//     names none, it is SliceSize pods in the order of PodGroup.Pods.
//     Running members (Allocation.Slice) pin their named slice's domain.
//
// The core chooses the domains (the scheduling core's topology placement);
// drivers only translate what users wrote into this.
type GangTopology struct {
	// Name names where the levels come from (a Topology object, or the
	// one label key written), for messages.
	Name          string   `json:"name,omitempty"`
	Levels        []string `json:"levels"`
	Required      string   `json:"required,omitempty"`
	Preferred     string   `json:"preferred,omitempty"`
	SliceRequired string   `json:"sliceRequired,omitempty"`
	SliceSize     int      `json:"sliceSize,omitempty"`
}

// MaxTopologyLevels bounds GangTopology.Levels.
const MaxTopologyLevels = 16

// Level returns the index of key among t's levels (0 is the widest), or
// -1.
func (t *GangTopology) Level(key string) int {
	return slices.Index(t.Levels, key)
}

// Check reports the first field of t that means nothing: no levels, a
// level repeated or empty, a required, preferred or slice level that is
// not one of the levels, a preferred level wider than the required one, a
// slice level wider than the gang's, a negative slice size or one without
// a slice level. Field names are relative to field.
func (t *GangTopology) Check(field string) error {
	switch {
	case len(t.Levels) == 0:
		return fmt.Errorf("%s.levels: must name at least one node label key", field)
	case len(t.Levels) > MaxTopologyLevels:
		return fmt.Errorf("%s.levels: %d levels, at most %d", field, len(t.Levels), MaxTopologyLevels)
	}
	for i, l := range t.Levels {
		if l == "" {
			return fmt.Errorf("%s.levels[%d]: must be a node label key, got an empty one", field, i)
		}
		if j := slices.Index(t.Levels[:i], l); j >= 0 {
			return fmt.Errorf("%s.levels[%d]: %q is levels[%d] already", field, i, l, j)
		}
	}
	in := func(name, key string) (int, error) {
		if key == "" {
			return -1, nil
		}
		i := t.Level(key)
		if i < 0 {
			return -1, fmt.Errorf("%s.%s: %q is not one of the levels %v", field, name, key, t.Levels)
		}
		return i, nil
	}
	req, err := in("required", t.Required)
	if err != nil {
		return err
	}
	pref, err := in("preferred", t.Preferred)
	if err != nil {
		return err
	}
	slice, err := in("sliceRequired", t.SliceRequired)
	if err != nil {
		return err
	}
	switch {
	case req >= 0 && pref >= 0 && pref < req:
		return fmt.Errorf("%s.preferred: %q is wider than the required level %q: prefer a narrower level or drop it", field, t.Preferred, t.Required)
	case slice >= 0 && slice < max(req, pref):
		return fmt.Errorf("%s.sliceRequired: %q is wider than the gang's level %q: a slice sits inside the gang's domain", field, t.SliceRequired, t.Levels[max(req, pref)])
	case t.SliceSize < 0:
		return fmt.Errorf("%s.sliceSize: must be at least 0, got %d", field, t.SliceSize)
	case t.SliceSize > 0 && slice < 0:
		return fmt.Errorf("%s.sliceSize: a slice size needs sliceRequired, the level each slice sits in", field)
	}
	return nil
}
