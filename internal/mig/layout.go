package mig

import (
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/gpuplane/gpuplane/internal/gpu"
)

// Layout is the MIG state of one GPU: MIG mode, and how many MIG devices
// of each profile it holds. A profile is a GPU instance profile
// ("1g.10gb", "1g.10gb+me") for a device spanning its GPU instance, or
// "<c>c.<profile>" for a compute instance of c slices alone in a GPU
// instance of that profile.
type Layout struct {
	Enabled bool           `json:"enabled"`
	Devices map[string]int `json:"devices,omitempty"`
}

// Equal reports whether two layouts are the same state.
func (l Layout) Equal(o Layout) bool {
	if l.Enabled != o.Enabled {
		return false
	}
	n := 0
	for p, c := range l.Devices {
		if c == 0 {
			continue
		}
		n++
		if o.Devices[p] != c {
			return false
		}
	}
	for _, c := range o.Devices {
		if c != 0 {
			n--
		}
	}
	return n == 0
}

// Count is the number of MIG devices in the layout.
func (l Layout) Count() int {
	n := 0
	for _, c := range l.Devices {
		n += c
	}
	return n
}

// String renders a layout as "mig: 2x1g.10gb, 1x3g.40gb", "mig: none" or
// "whole GPU".
func (l Layout) String() string {
	if !l.Enabled {
		return "whole GPU"
	}
	if l.Count() == 0 {
		return "mig: none"
	}
	ps := make([]string, 0, len(l.Devices))
	for p, c := range l.Devices {
		if c > 0 {
			ps = append(ps, p)
		}
	}
	sortProfiles(ps)
	parts := make([]string, len(ps))
	for i, p := range ps {
		parts[i] = strconv.Itoa(l.Devices[p]) + "x" + p
	}
	return "mig: " + strings.Join(parts, ", ")
}

// Profiles lists the layout's device profiles, largest first, each as
// often as its count.
func (l Layout) Profiles() []string {
	ps := make([]string, 0, len(l.Devices))
	for p, c := range l.Devices {
		if c > 0 {
			ps = append(ps, p)
		}
	}
	sortProfiles(ps)
	var out []string
	for _, p := range ps {
		for range l.Devices[p] {
			out = append(out, p)
		}
	}
	return out
}

// sortProfiles orders profile names by GPU slices, largest first, then by
// name.
func sortProfiles(ps []string) {
	sort.Slice(ps, func(i, j int) bool {
		si, sj := giSlices(ps[i]), giSlices(ps[j])
		if si != sj {
			return si > sj
		}
		return ps[i] < ps[j]
	})
}

func giSlices(p string) int {
	_, gi := splitProfile(p)
	n, _ := strconv.Atoi(strings.SplitN(gi, "g.", 2)[0])
	return n
}

// splitProfile splits "1c.3g.40gb" into its compute slices (1) and GPU
// instance profile ("3g.40gb"); a plain profile has 0 compute slices.
func splitProfile(p string) (int, string) {
	head, rest, ok := strings.Cut(p, "c.")
	if !ok || strings.Contains(head, "g") {
		return 0, p
	}
	c, err := strconv.Atoi(head)
	if err != nil {
		return 0, p
	}
	return c, rest
}

// LayoutOf reads a GPU's current layout from the inventory. A GPU whose
// MIG mode change is pending counts as in its pending mode with no
// devices, which never equals a layout with devices and so is applied.
func LayoutOf(d *gpu.Device) Layout {
	if !d.MIG.Current {
		if d.MIG.Pending {
			return Layout{Enabled: true, Devices: map[string]int{}}
		}
		return Layout{}
	}
	l := Layout{Enabled: true, Devices: map[string]int{}}
	for _, m := range d.MIGDevices {
		l.Devices[m.Profile]++
	}
	return l
}

// Instance is one MIG device to create: a GPU instance of a profile at a
// placement, and a compute instance in it.
type Instance struct {
	// Profile is the device's name ("1g.10gb", "1c.3g.40gb").
	Profile string `json:"profile"`
	// GPUInstanceProfile is the GPU instance's profile ("3g.40gb").
	GPUInstanceProfile string `json:"gpuInstanceProfile"`
	// ComputeProfile is the compute instance's profile name for the
	// backend; empty for one spanning the GPU instance.
	ComputeProfile string        `json:"computeProfile,omitempty"`
	Placement      gpu.Placement `json:"placement"`
	// MemoryMiB and Slices describe the device, for display.
	MemoryMiB uint64 `json:"memoryMiB"`
	Slices    int    `json:"slices"`
}

// ErrDoesNotFit is wrapped by Fit when a layout does not fit a GPU.
var ErrDoesNotFit = errors.New("the layout does not fit the GPU")

// ErrUnknownProfile is wrapped by Fit when a GPU does not offer a profile.
var ErrUnknownProfile = errors.New("the GPU does not offer this MIG profile")

// Fit places a layout's devices on a GPU with the given profiles: every
// device gets a GPU instance placement, none overlapping, within each
// profile's instance count and the GPU's compute slices. It tries every
// assignment (at most a few hundred on a seven-slice GPU), so a layout fits
// exactly when the driver could create it. path names the layout in
// errors ("mig-configs.all-balanced[3].mig-devices").
func Fit(path string, profiles []gpu.MIGProfile, l Layout) ([]Instance, error) {
	if !l.Enabled || l.Count() == 0 {
		return nil, nil
	}
	byName := make(map[string]*gpu.MIGProfile, len(profiles))
	computeSlices, memSlices := 0, 0
	for i := range profiles {
		p := &profiles[i]
		byName[p.Name] = p
		computeSlices = max(computeSlices, p.SliceCount)
		for _, pl := range p.Placements {
			memSlices = max(memSlices, pl.Start+pl.Size)
		}
	}
	offered := func() string {
		names := make([]string, len(profiles))
		for i, p := range profiles {
			names[i] = p.Name
		}
		return strings.Join(names, ", ")
	}
	want := l.Profiles()
	if len(want) > 64 {
		return nil, fmt.Errorf("%s: %d MIG devices: %w (at most %d GPU instances)", path, len(want), ErrDoesNotFit, gpu.MaxGPUInstances)
	}
	type need struct {
		inst Instance
		prof *gpu.MIGProfile
	}
	needs := make([]need, len(want))
	perProfile := map[string]int{}
	slices := 0
	for i, name := range want {
		c, giName := splitProfile(name)
		p, ok := byName[giName]
		if !ok {
			return nil, fmt.Errorf("%s.%q: %w (it offers %s)", path, name, ErrUnknownProfile, offered())
		}
		inst := Instance{Profile: name, GPUInstanceProfile: giName, MemoryMiB: p.MemoryMiB, Slices: p.SliceCount}
		if c > 0 {
			if c > p.SliceCount {
				return nil, fmt.Errorf("%s.%q: %w: a compute instance of %d slices in a GPU instance of %d", path, name, ErrUnknownProfile, c, p.SliceCount)
			}
			if c < p.SliceCount {
				inst.ComputeProfile = name
			} else {
				inst.Profile = giName
			}
		}
		needs[i] = need{inst: inst, prof: p}
		perProfile[giName]++
		slices += p.SliceCount
	}
	for name, n := range perProfile {
		if p := byName[name]; n > p.InstanceCount {
			return nil, fmt.Errorf("%s.%q: %w: %d devices asked, the GPU holds at most %d", path, name, ErrDoesNotFit, n, p.InstanceCount)
		}
	}
	if slices > computeSlices {
		return nil, fmt.Errorf("%s: %w: %s needs %d compute slices, the GPU has %d", path, ErrDoesNotFit, l, slices, computeSlices)
	}
	used := make([]bool, memSlices)
	out := make([]Instance, len(needs))
	var place func(i int) bool
	place = func(i int) bool {
		if i == len(needs) {
			return true
		}
		for _, pl := range needs[i].prof.Placements {
			if pl.Start < 0 || pl.Size <= 0 || pl.Start+pl.Size > memSlices || anyUsed(used[pl.Start:pl.Start+pl.Size]) {
				continue
			}
			// Devices of one profile take placements in order, so the
			// search does not try their permutations.
			if i > 0 && needs[i-1].inst.Profile == needs[i].inst.Profile && pl.Start < out[i-1].Placement.Start {
				continue
			}
			setUsed(used[pl.Start:pl.Start+pl.Size], true)
			out[i] = needs[i].inst
			out[i].Placement = pl
			if place(i + 1) {
				return true
			}
			setUsed(used[pl.Start:pl.Start+pl.Size], false)
		}
		return false
	}
	if !place(0) {
		return nil, fmt.Errorf("%s: %w: no placement of %s leaves its GPU instances apart on the GPU's %d memory slices", path, ErrDoesNotFit, l, memSlices)
	}
	return out, nil
}

func anyUsed(b []bool) bool {
	for _, x := range b {
		if x {
			return true
		}
	}
	return false
}

func setUsed(b []bool, v bool) {
	for i := range b {
		b[i] = v
	}
}
