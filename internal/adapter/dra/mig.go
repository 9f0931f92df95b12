package dra

import (
	"cmp"
	"slices"

	resourceapi "k8s.io/api/resource/v1"

	apidra "github.com/gpuplane/gpuplane/api/dra"
)

// MaxMIGSlices bounds the compute slices one GPU's counter set may
// declare (7 on the GPUs that have MIG).
const MaxMIGSlices = 64

// MIGDevices groups a node's MIG devices (type mig) by the GPU they live
// on (parentIndex) into one GPU in MIG mode each: its compute slices are
// the compute-slices counter of the counter set its devices consume from
// (api/dra.CounterComputeSlices), each device's the amount it consumes.
// A device without a parent index, or that consumes no compute slices of
// a counter set its pool declares, or from another set than its GPU's
// other devices, is left out; so is a GPU whose devices come from more
// than one pool. The devices are ordered by slices, then profile, then
// name.
func MIGDevices(current []*resourceapi.ResourceSlice) map[int64]*Device {
	// pool -> counter set -> compute slices.
	counters := map[string]map[string]int{}
	for _, s := range current {
		for _, cs := range s.Spec.SharedCounters {
			c, ok := cs.Counters[apidra.CounterComputeSlices]
			if !ok || c.Value.Sign() <= 0 || c.Value.Value() > MaxMIGSlices {
				continue
			}
			if counters[s.Spec.Pool.Name] == nil {
				counters[s.Spec.Pool.Name] = map[string]int{}
			}
			counters[s.Spec.Pool.Name][cs.Name] = int(c.Value.Value())
		}
	}
	out := map[int64]*Device{}
	sets := map[int64]string{}
	bad := map[int64]bool{}
	for _, s := range current {
		pool := s.Spec.Pool.Name
		for i := range s.Spec.Devices {
			d := &s.Spec.Devices[i]
			if t := d.Attributes[apidra.AttrType]; t.StringValue == nil || *t.StringValue != apidra.TypeMIG {
				continue
			}
			a := d.Attributes[apidra.AttrParentIndex]
			if a.IntValue == nil || *a.IntValue < 0 || len(d.ConsumesCounters) != 1 {
				continue
			}
			idx, use := *a.IntValue, d.ConsumesCounters[0]
			total, ok := counters[pool][use.CounterSet]
			c, has := use.Counters[apidra.CounterComputeSlices]
			if !ok || !has || c.Value.Sign() <= 0 || c.Value.Value() > int64(total) {
				continue
			}
			g := out[idx]
			switch {
			case g == nil:
				g = &Device{Pool: pool, Slices: total}
				out[idx], sets[idx] = g, use.CounterSet
			case g.Pool != pool || sets[idx] != use.CounterSet:
				bad[idx] = true
			}
			profile := ""
			if p := d.Attributes[apidra.AttrMIGProfile]; p.StringValue != nil {
				profile = *p.StringValue
			}
			g.MIGs = append(g.MIGs, &Device{Pool: pool, Name: d.Name, Dev: d, Slices: int(c.Value.Value()), Profile: profile})
		}
	}
	for idx, g := range out {
		if bad[idx] {
			delete(out, idx)
			continue
		}
		slices.SortFunc(g.MIGs, func(a, b *Device) int {
			return cmp.Or(cmp.Compare(a.Slices, b.Slices), cmp.Compare(a.Profile, b.Profile), cmp.Compare(a.Name, b.Name))
		})
	}
	return out
}
