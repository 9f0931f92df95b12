package v1

import (
	"fmt"
	"path"
	"regexp"
	"slices"
	"strings"
)

// ResourcePrefix is the domain of every resource the plugin advertises.
const ResourcePrefix = "nvidia.com/"

var (
	resourceNameRE = regexp.MustCompile(`^[a-zA-Z0-9]([-a-zA-Z0-9_.]{0,61}[a-zA-Z0-9])?$`)
	migResourceRE  = regexp.MustCompile(`^mig-[0-9]+(c\.[0-9]+)?g\.[0-9]+gb([+-][a-z.]+)?$`)
)

// FullName returns a resource name with the nvidia.com/ prefix added when it
// has no domain.
func FullName(name string) string {
	if strings.Contains(name, "/") {
		return name
	}
	return ResourcePrefix + name
}

// ValidResourceName reports whether name (with or without the nvidia.com/
// prefix) is a valid extended resource name in the nvidia.com domain.
func ValidResourceName(name string) error {
	full := FullName(name)
	short, ok := strings.CutPrefix(full, ResourcePrefix)
	if !ok {
		return fmt.Errorf("resource %q must be in the %s domain", name, strings.TrimSuffix(ResourcePrefix, "/"))
	}
	if !resourceNameRE.MatchString(short) {
		return fmt.Errorf("resource %q: the part after %s must be 1-63 letters, digits, '-', '_' or '.', starting and ending with a letter or digit", name, ResourcePrefix)
	}
	return nil
}

// IsMIGResource reports whether name is a MIG resource such as
// nvidia.com/mig-1g.10gb.
func IsMIGResource(name string) bool {
	short, ok := strings.CutPrefix(FullName(name), ResourcePrefix)
	return ok && migResourceRE.MatchString(short)
}

// MIGStrategy returns flags.migStrategy with its default applied.
func (c *Config) MIGStrategy() string { return deref(c.Flags.MIGStrategy, MIGStrategyNone) }

// PassDeviceSpecs returns flags.plugin.passDeviceSpecs.
func (c *Config) PassDeviceSpecs() bool { return deref(c.Flags.Plugin.PassDeviceSpecs, false) }

// FailOnInitError returns flags.failOnInitError.
func (c *Config) FailOnInitError() bool { return deref(c.Flags.FailOnInitError, true) }

// DeviceIDStrategy returns flags.plugin.deviceIDStrategy.
func (c *Config) DeviceIDStrategy() string {
	return deref(c.Flags.Plugin.DeviceIDStrategy, DeviceIDStrategyUUID)
}

// DeviceListStrategies returns flags.plugin.deviceListStrategy.
func (c *Config) DeviceListStrategies() []string {
	if len(c.Flags.Plugin.DeviceListStrategy) == 0 {
		return []string{DeviceListStrategyEnvVar}
	}
	return c.Flags.Plugin.DeviceListStrategy
}

// CDIAnnotationPrefix returns flags.plugin.cdiAnnotationPrefix.
func (c *Config) CDIAnnotationPrefix() string {
	return deref(c.Flags.Plugin.CDIAnnotationPrefix, DefaultCDIAnnotationPrefix)
}

// MPSRoot returns flags.plugin.mpsRoot.
func (c *Config) MPSRoot() string { return deref(c.Flags.Plugin.MPSRoot, DefaultMPSRoot) }

// DriverRoot returns flags.nvidiaDriverRoot.
func (c *Config) DriverRoot() string { return deref(c.Flags.NvidiaDriverRoot, DefaultDriverRoot) }

func deref[T any](p *T, def T) T {
	if p == nil {
		return def
	}
	return *p
}

func oneOf(field, value string, allowed ...string) error {
	if slices.Contains(allowed, value) {
		return nil
	}
	return fmt.Errorf("config: %s: unknown value %q (allowed: %s): %w", field, value, strings.Join(allowed, ", "), ErrInvalid)
}

// Validate checks values and contradictions. Load calls it; callers that
// build a Config by hand call it too.
func (c *Config) Validate() error {
	if c.Version != Version {
		return fmt.Errorf("config: version: unknown version %q; this agent reads %q: %w", c.Version, Version, ErrInvalid)
	}
	if err := oneOf("flags.migStrategy", c.MIGStrategy(), MIGStrategyNone, MIGStrategySingle, MIGStrategyMixed); err != nil {
		return err
	}
	if err := oneOf("flags.plugin.deviceIDStrategy", c.DeviceIDStrategy(), DeviceIDStrategyUUID, DeviceIDStrategyIndex); err != nil {
		return err
	}
	seen := map[string]bool{}
	for i, s := range c.DeviceListStrategies() {
		field := fmt.Sprintf("flags.plugin.deviceListStrategy[%d]", i)
		if err := oneOf(field, s, DeviceListStrategyEnvVar, DeviceListStrategyVolumeMounts, DeviceListStrategyCDIAnnotations, DeviceListStrategyCDICRI); err != nil {
			return err
		}
		if seen[s] {
			return fmt.Errorf("config: %s: %q is listed twice: %w", field, s, ErrInvalid)
		}
		seen[s] = true
	}
	if d := c.Flags.DeviceDiscoveryStrategy; d != nil {
		if err := oneOf("flags.deviceDiscoveryStrategy", *d, "auto", "nvml", "tegra"); err != nil {
			return err
		}
	}
	if p := c.Flags.Plugin.CDIAnnotationPrefix; p != nil && !strings.HasSuffix(*p, "/") {
		return fmt.Errorf("config: flags.plugin.cdiAnnotationPrefix: %q must end with '/': %w", *p, ErrInvalid)
	}
	if err := c.Health.Quarantine.validate("health.quarantine"); err != nil {
		return err
	}
	if err := oneOf("sharing.allocationPolicy", c.Sharing.AllocationPolicy, AllocationDistributed, AllocationPacked, ""); err != nil {
		return err
	}
	known, err := c.knownResources()
	if err != nil {
		return err
	}
	if err := c.validateSharing("sharing.timeSlicing", &c.Sharing.TimeSlicing, known); err != nil {
		return err
	}
	if err := c.validateSharing("sharing.mps", &c.Sharing.MPS, known); err != nil {
		return err
	}
	if len(c.Sharing.MPS.Resources) > 0 && c.MIGStrategy() != MIGStrategyNone {
		return fmt.Errorf("config: sharing.mps: MPS cannot share MIG devices, but flags.migStrategy is %q; set flags.migStrategy to none or remove sharing.mps: %w", c.MIGStrategy(), ErrInvalid)
	}
	return c.validateModesDisjoint()
}

// knownResources lists the resource names this config can produce, before
// sharing renames them.
func (c *Config) knownResources() (map[string]bool, error) {
	known := map[string]bool{DefaultResourceName: true}
	for kind, list := range map[string][]NamedResource{"resources.gpus": c.Resources.GPUs, "resources.mig": c.Resources.MIGs} {
		for i, r := range list {
			field := fmt.Sprintf("%s[%d]", kind, i)
			if r.Pattern == "" {
				return nil, fmt.Errorf("config: %s.pattern: missing; give a glob such as \"*A100*\": %w", field, ErrInvalid)
			}
			if _, err := path.Match(r.Pattern, ""); err != nil {
				return nil, fmt.Errorf("config: %s.pattern: %q is not a valid glob: %w", field, r.Pattern, ErrInvalid)
			}
			if err := ValidResourceName(r.Name); err != nil {
				return nil, fmt.Errorf("config: %s.name: %w: %w", field, err, ErrInvalid)
			}
			known[FullName(r.Name)] = true
		}
	}
	return known, nil
}

func (c *Config) validateSharing(field string, s *ReplicatedResources, known map[string]bool) error {
	if len(s.Resources) > MaxResources {
		return fmt.Errorf("config: %s.resources: %d entries, at most %d: %w", field, len(s.Resources), MaxResources, ErrInvalid)
	}
	for i, r := range s.Resources {
		f := fmt.Sprintf("%s.resources[%d]", field, i)
		if r.Name == "" {
			return fmt.Errorf("config: %s.name: missing; name the resource to share, such as %s: %w", f, DefaultResourceName, ErrInvalid)
		}
		if err := ValidResourceName(r.Name); err != nil {
			return fmt.Errorf("config: %s.name: %w: %w", f, err, ErrInvalid)
		}
		name := FullName(r.Name)
		switch {
		case IsMIGResource(name) && c.MIGStrategy() == MIGStrategyMixed:
		case IsMIGResource(name):
			return fmt.Errorf("config: %s.name: %q is a MIG resource, which exists only with flags.migStrategy: mixed (it is %q): %w", f, r.Name, c.MIGStrategy(), ErrInvalid)
		case !known[name]:
			names := make([]string, 0, len(known))
			for k := range known {
				names = append(names, k)
			}
			slices.Sort(names)
			return fmt.Errorf("config: %s.name: unknown resource %q (known: %s, or nvidia.com/mig-<profile> with migStrategy mixed): %w", f, r.Name, strings.Join(names, ", "), ErrInvalid)
		}
		if r.Replicas < 1 || r.Replicas > MaxReplicas {
			return fmt.Errorf("config: %s.replicas: must be >= 1 and at most %d (each replica would hold less than a thousandth of the GPU), got %d: %w", f, MaxReplicas, r.Replicas, ErrInvalid)
		}
		if len(r.Devices.List) > MaxDevices {
			return fmt.Errorf("config: %s.devices: %d entries, at most %d: %w", f, len(r.Devices.List), MaxDevices, ErrInvalid)
		}
		if r.Rename != "" {
			if err := ValidResourceName(r.Rename); err != nil {
				return fmt.Errorf("config: %s.rename: %w: %w", f, err, ErrInvalid)
			}
		}
		for j, d := range r.Devices.List {
			if d == "" {
				return fmt.Errorf("config: %s.devices[%d]: empty device; give an index such as 0 or a UUID: %w", f, j, ErrInvalid)
			}
		}
	}
	// Several entries for one resource are gpuplane's per-GPU sharing; they
	// must select disjoint devices by list.
	for i, a := range s.Resources {
		for j := i + 1; j < len(s.Resources); j++ {
			b := s.Resources[j]
			if FullName(a.Name) != FullName(b.Name) {
				continue
			}
			if overlap(a.Devices, b.Devices) {
				return fmt.Errorf("config: %s.resources[%d] and [%d] both share %q on the same devices; give each an explicit, disjoint devices list: %w", field, i, j, a.Name, ErrInvalid)
			}
		}
	}
	return nil
}

// validateModesDisjoint allows time-slicing and MPS side by side only on
// disjoint device lists.
func (c *Config) validateModesDisjoint() error {
	for i, a := range c.Sharing.TimeSlicing.Resources {
		for j, b := range c.Sharing.MPS.Resources {
			if FullName(a.Name) == FullName(b.Name) && overlap(a.Devices, b.Devices) {
				return fmt.Errorf("config: sharing.timeSlicing.resources[%d] and sharing.mps.resources[%d] both share %q on the same devices; a GPU takes one sharing mode, so give each an explicit, disjoint devices list: %w", i, j, a.Name, ErrInvalid)
			}
		}
	}
	return nil
}

func overlap(a, b ReplicatedDevices) bool {
	if len(a.List) == 0 || len(b.List) == 0 {
		return true
	}
	for _, x := range a.List {
		for _, y := range b.List {
			if strings.EqualFold(x, y) {
				return true
			}
		}
	}
	return false
}
