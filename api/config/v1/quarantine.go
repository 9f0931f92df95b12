package v1

import (
	"fmt"
	"slices"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"
)

// Defaults of Quarantine.
const (
	DefaultQuarantineWindow            = time.Hour
	DefaultQuarantineEvictionTimeout   = 5 * time.Minute
	DefaultQuarantineResetTimeout      = 2 * time.Minute
	DefaultQuarantineValidation        = 30 * time.Second
	DefaultQuarantineValidationTimeout = 5 * time.Minute
	DefaultQuarantineRetryHeldAfter    = time.Hour
)

// Scopes of a quarantine class: what a fault of the class takes out of
// service.
const (
	// ScopeGPU withdraws the failed GPU's devices only.
	ScopeGPU = "gpu"
	// ScopeNode also taints the node NoSchedule (gpunode.TaintGPUFault).
	ScopeNode = "node"
)

// Bounds of Quarantine.
const (
	MaxQuarantineClasses  = 64
	MaxXIDsPerClass       = 256
	maxQuarantineDuration = 7 * 24 * time.Hour
)

// Quarantine is what gpuplane-agent does after a critical GPU fault (a
// gpuplane extension, under health.quarantine). Zero values take the
// defaults above.
type Quarantine struct {
	// Disabled leaves a failed GPU to the device plugin alone: its devices
	// are withdrawn and come back after health.probation, with no taint,
	// condition, eviction or reset.
	Disabled bool `json:"disabled,omitempty"`
	// Window: a GPU that fails again within this long after it returned
	// to service stays quarantined (held) instead of being reset again.
	Window *Duration `json:"window,omitempty"`
	// EvictionTimeout bounds the wait for the pods on the failed GPU to
	// leave (PodDisruptionBudgets can refuse); the reset is tried after it
	// whether or not they left.
	EvictionTimeout *Duration `json:"evictionTimeout,omitempty"`
	// ResetTimeout bounds one GPU reset.
	ResetTimeout *Duration `json:"resetTimeout,omitempty"`
	// Validation is how long a GPU must answer, with no critical event,
	// before it returns to service.
	Validation *Duration `json:"validation,omitempty"`
	// ValidationTimeout bounds the wait for a GPU to answer after its
	// reset; past it the GPU is held.
	ValidationTimeout *Duration `json:"validationTimeout,omitempty"`
	// RetryHeldAfter is how long a held GPU waits before it is reset and
	// revalidated again.
	RetryHeldAfter *Duration `json:"retryHeldAfter,omitempty"`
	// Classes group XIDs by what their fault needs. They are merged with
	// DefaultQuarantineClasses: a class named like a default replaces it,
	// and the XIDs a class lists are taken out of every default class.
	Classes []QuarantineClass `json:"classes,omitempty"`
}

// QuarantineClass is the policy of a group of XIDs.
type QuarantineClass struct {
	// Name names the class in events, metrics and the Node's record; a
	// DNS label.
	Name string `json:"name"`
	// XIDs are the class's XID codes. A class without XIDs is the
	// catch-all: critical events no class lists (also a GPU found lost
	// by a probe, XID 79 aside, and a double-bit ECC event, XID 48 aside).
	XIDs []uint64 `json:"xids,omitempty"`
	// Scope is ScopeGPU (default) or ScopeNode.
	Scope string `json:"scope,omitempty"`
	// Evict evicts the pods on the failed GPU through the Eviction API;
	// default true.
	Evict *bool `json:"evict,omitempty"`
	// Reset resets the GPU through the driver before revalidating it;
	// default true.
	Reset *bool `json:"reset,omitempty"`
}

// DoesEvict is Evict with its default.
func (c QuarantineClass) DoesEvict() bool { return deref(c.Evict, true) }

// DoesReset is Reset with its default.
func (c QuarantineClass) DoesReset() bool { return deref(c.Reset, true) }

// NodeWide reports whether the class taints the node.
func (c QuarantineClass) NodeWide() bool { return c.Scope == ScopeNode }

// DefaultQuarantineClasses are the classes of NVIDIA's XID catalogue whose
// documented resolution is a GPU reset:
//
//   - bus (79, GPU has fallen off the bus): the node is tainted, as the
//     bus or its power may be at fault;
//   - memory-uncorrectable (48 double-bit ECC error, 95 uncontained ECC
//     error): every application on the GPU is affected;
//   - memory-contained (94 contained ECC error): the application that hit
//     it must restart, and the reset applies the row remapping;
//   - row-remap (63 row-remapping or page-retirement event, 64 its
//     failure): a reset applies the pending remapping;
//   - nvlink (74 NVLink error);
//   - gsp (119 GSP RPC timeout, 120 GSP error);
//   - other: any other critical event.
func DefaultQuarantineClasses() []QuarantineClass {
	return []QuarantineClass{
		{Name: "bus", XIDs: []uint64{79}, Scope: ScopeNode},
		{Name: "memory-uncorrectable", XIDs: []uint64{48, 95}, Scope: ScopeGPU},
		{Name: "memory-contained", XIDs: []uint64{94}, Scope: ScopeGPU},
		{Name: "row-remap", XIDs: []uint64{63, 64}, Scope: ScopeGPU},
		{Name: "nvlink", XIDs: []uint64{74}, Scope: ScopeGPU},
		{Name: "gsp", XIDs: []uint64{119, 120}, Scope: ScopeGPU},
		{Name: "other", Scope: ScopeGPU},
	}
}

// EffectiveClasses merges the configured classes over the defaults, as
// Quarantine.Classes says.
func (q *Quarantine) EffectiveClasses() []QuarantineClass {
	taken := map[uint64]bool{}
	named := map[string]bool{}
	catchAll := false
	for _, c := range q.Classes {
		named[c.Name] = true
		for _, x := range c.XIDs {
			taken[x] = true
		}
		catchAll = catchAll || len(c.XIDs) == 0
	}
	out := slices.Clone(q.Classes)
	for _, d := range DefaultQuarantineClasses() {
		if named[d.Name] || (len(d.XIDs) == 0 && catchAll) {
			continue
		}
		if len(d.XIDs) > 0 {
			d.XIDs = slices.DeleteFunc(slices.Clone(d.XIDs), func(x uint64) bool { return taken[x] })
			if len(d.XIDs) == 0 {
				continue
			}
		}
		out = append(out, d)
	}
	for i := range out {
		if out[i].Scope == "" {
			out[i].Scope = ScopeGPU
		}
	}
	return out
}

func (q *Quarantine) setDefaults() {
	setDefault(&q.Window, Duration{DefaultQuarantineWindow})
	setDefault(&q.EvictionTimeout, Duration{DefaultQuarantineEvictionTimeout})
	setDefault(&q.ResetTimeout, Duration{DefaultQuarantineResetTimeout})
	setDefault(&q.Validation, Duration{DefaultQuarantineValidation})
	setDefault(&q.ValidationTimeout, Duration{DefaultQuarantineValidationTimeout})
	setDefault(&q.RetryHeldAfter, Duration{DefaultQuarantineRetryHeldAfter})
}

// validate checks the quarantine policy; field is its path in the file.
func (q *Quarantine) validate(field string) error {
	durations := []struct {
		name string
		d    *Duration
		min  time.Duration
	}{
		{"window", q.Window, 0},
		{"evictionTimeout", q.EvictionTimeout, time.Second},
		{"resetTimeout", q.ResetTimeout, time.Second},
		{"validation", q.Validation, 0},
		{"validationTimeout", q.ValidationTimeout, time.Second},
		{"retryHeldAfter", q.RetryHeldAfter, time.Second},
	}
	for _, d := range durations {
		if d.d == nil {
			continue
		}
		if d.d.Duration < d.min || d.d.Duration > maxQuarantineDuration {
			return fmt.Errorf("config: %s.%s: must be %s to %s, got %s: %w", field, d.name, d.min, maxQuarantineDuration, d.d.Duration, ErrInvalid)
		}
	}
	if q.Validation != nil && q.ValidationTimeout != nil && q.ValidationTimeout.Duration < q.Validation.Duration {
		return fmt.Errorf("config: %s.validationTimeout: %s is shorter than validation (%s); a GPU could never pass: %w", field, q.ValidationTimeout.Duration, q.Validation.Duration, ErrInvalid)
	}
	if len(q.Classes) > MaxQuarantineClasses {
		return fmt.Errorf("config: %s.classes: %d classes, at most %d: %w", field, len(q.Classes), MaxQuarantineClasses, ErrInvalid)
	}
	names := map[string]int{}
	xids := map[uint64]int{}
	catchAll := -1
	for i, c := range q.Classes {
		cf := fmt.Sprintf("%s.classes[%d]", field, i)
		if errs := validation.IsDNS1123Label(c.Name); len(errs) > 0 {
			return fmt.Errorf("config: %s.name: %q: %s: %w", cf, c.Name, errs[0], ErrInvalid)
		}
		if j, ok := names[c.Name]; ok {
			return fmt.Errorf("config: %s.name: %q is also the name of classes[%d]: %w", cf, c.Name, j, ErrInvalid)
		}
		names[c.Name] = i
		if c.Scope != "" {
			if err := oneOf(cf+".scope", c.Scope, ScopeGPU, ScopeNode); err != nil {
				return err
			}
		}
		if len(c.XIDs) > MaxXIDsPerClass {
			return fmt.Errorf("config: %s.xids: %d XIDs, at most %d: %w", cf, len(c.XIDs), MaxXIDsPerClass, ErrInvalid)
		}
		if len(c.XIDs) == 0 {
			if catchAll >= 0 {
				return fmt.Errorf("config: %s.xids: empty, but classes[%d] is already the catch-all (the class without XIDs); list this class's XIDs: %w", cf, catchAll, ErrInvalid)
			}
			catchAll = i
		}
		for k, x := range c.XIDs {
			if x == 0 || x > 1<<16 {
				return fmt.Errorf("config: %s.xids[%d]: %d is not an XID (1 to 65536): %w", cf, k, x, ErrInvalid)
			}
			if j, ok := xids[x]; ok {
				return fmt.Errorf("config: %s.xids[%d]: XID %d is also in classes[%d]; an XID belongs to one class: %w", cf, k, x, j, ErrInvalid)
			}
			xids[x] = i
		}
	}
	return nil
}
