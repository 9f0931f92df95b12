package quarantine

import (
	"time"

	configv1 "github.com/gpuplane/gpuplane/api/config/v1"
)

// Policy is what the controller does, with every default applied.
type Policy struct {
	Window            time.Duration
	EvictionTimeout   time.Duration
	ResetTimeout      time.Duration
	Validation        time.Duration
	ValidationTimeout time.Duration
	RetryHeldAfter    time.Duration
	// Classes are the effective classes; the one without XIDs, if any, is
	// the catch-all.
	Classes []configv1.QuarantineClass
}

// PolicyFrom reads the config's quarantine section; its unset fields take
// their defaults.
func PolicyFrom(q configv1.Quarantine) Policy {
	d := func(v *configv1.Duration, def time.Duration) time.Duration {
		if v == nil {
			return def
		}
		return v.Duration
	}
	return Policy{
		Window:            d(q.Window, configv1.DefaultQuarantineWindow),
		EvictionTimeout:   d(q.EvictionTimeout, configv1.DefaultQuarantineEvictionTimeout),
		ResetTimeout:      d(q.ResetTimeout, configv1.DefaultQuarantineResetTimeout),
		Validation:        d(q.Validation, configv1.DefaultQuarantineValidation),
		ValidationTimeout: d(q.ValidationTimeout, configv1.DefaultQuarantineValidationTimeout),
		RetryHeldAfter:    d(q.RetryHeldAfter, configv1.DefaultQuarantineRetryHeldAfter),
		Classes:           q.EffectiveClasses(),
	}
}

// classOf returns the class of an XID: the class listing it, else the
// catch-all, else a class that evicts and resets the GPU alone.
func (p Policy) classOf(xid uint64) configv1.QuarantineClass {
	var catchAll *configv1.QuarantineClass
	for i, c := range p.Classes {
		if len(c.XIDs) == 0 {
			catchAll = &p.Classes[i]
			continue
		}
		for _, x := range c.XIDs {
			if x == xid {
				return c
			}
		}
	}
	if catchAll != nil {
		return *catchAll
	}
	return configv1.QuarantineClass{Name: "other", Scope: configv1.ScopeGPU}
}

// classByName finds a class by name, for a record read back from the Node.
func (p Policy) classByName(name string, xid uint64) configv1.QuarantineClass {
	for _, c := range p.Classes {
		if c.Name == name {
			return c
		}
	}
	return p.classOf(xid)
}
