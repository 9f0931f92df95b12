package mig

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"sigs.k8s.io/yaml"
)

// Version is the only version of mig-parted's config format.
const Version = "v1"

// Bounds of a config. They are far above any real config (mig-parted's
// default has about 90 configs of at most 12 entries) and keep a hostile
// ConfigMap from costing memory or time.
const (
	// MaxBytes is the largest config read.
	MaxBytes = 1 << 20
	// MaxConfigs is the most named configs in one file.
	MaxConfigs = 1024
	// MaxEntries is the most entries in one named config.
	MaxEntries = 64
	// MaxFilters is the most device IDs in one device-filter.
	MaxFilters = 64
	// MaxGPUs is the highest GPU index plus one that devices may name.
	MaxGPUs = 64
	// MaxProfiles is the most profiles in one mig-devices.
	MaxProfiles = 32
	// MaxCount is the largest count of one profile (a GPU holds at most
	// seven MIG devices of one profile so far).
	MaxCount = 64
	// MaxNameLen bounds a config's name, as a Kubernetes label value is
	// bounded (nvidia.com/mig.config names it).
	MaxNameLen = 63
)

// Spec is a mig-parted config file: named MIG configs, each a list of
// entries that select GPUs and give their layout.
type Spec struct {
	Version string
	// Configs are the named configs ("all-1g.10gb", "all-balanced").
	Configs map[string]Config
}

// Config is one named config: its entries, in file order. An entry that
// selects a GPU overrides the entries before it for that GPU, as
// mig-parted, which applies them in turn, leaves the last one in place.
type Config []Entry

// Entry is one item of a named config.
type Entry struct {
	// Path names the entry in the file ("mig-configs.all-balanced[3]"), for
	// errors.
	Path string
	// DeviceFilter lists the PCI device IDs the entry is for; empty means
	// every GPU model.
	DeviceFilter []DeviceID
	// AllDevices is devices: all; otherwise Devices lists GPU indices.
	AllDevices bool
	Devices    []int
	// Layout is mig-enabled and mig-devices.
	Layout Layout
}

// DeviceID is a PCI device and vendor ID as mig-parted writes it
// ("0x233010DE": device 0x2330, vendor 0x10DE) and NVML reports it.
type DeviceID uint32

func (d DeviceID) String() string { return fmt.Sprintf("0x%08X", uint32(d)) }

// ParseDeviceID reads "0x233010DE" (the 0x is optional, case is not
// significant).
func ParseDeviceID(s string) (DeviceID, error) {
	h := strings.TrimPrefix(strings.TrimPrefix(s, "0x"), "0X")
	if len(h) != 8 {
		return 0, fmt.Errorf("%q is not a PCI device ID: want 0x followed by 8 hex digits, device then vendor (0x233010DE)", s)
	}
	v, err := strconv.ParseUint(h, 16, 32)
	if err != nil {
		return 0, fmt.Errorf("%q is not a PCI device ID: want 0x followed by 8 hex digits, device then vendor (0x233010DE)", s)
	}
	return DeviceID(v), nil
}

// Matches reports whether the entry's device-filter admits a GPU with PCI
// device ID id.
func (e *Entry) Matches(id DeviceID) bool {
	if len(e.DeviceFilter) == 0 {
		return true
	}
	for _, f := range e.DeviceFilter {
		if f == id {
			return true
		}
	}
	return false
}

// Selects reports whether the entry's devices include GPU index.
func (e *Entry) Selects(index int) bool {
	if e.AllDevices {
		return true
	}
	for _, d := range e.Devices {
		if d == index {
			return true
		}
	}
	return false
}

// Names returns the config names, sorted.
func (s *Spec) Names() []string {
	out := make([]string, 0, len(s.Configs))
	for n := range s.Configs {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// Lookup returns the named config, or an error that lists the names there
// are.
func (s *Spec) Lookup(name string) (Config, error) {
	if c, ok := s.Configs[name]; ok {
		return c, nil
	}
	names := s.Names()
	if len(names) > 12 {
		names = append(names[:12], fmt.Sprintf("... (%d in all)", len(s.Configs)))
	}
	return nil, fmt.Errorf("mig-configs: no config named %q: %w (the file has %s)", name, ErrUnknownConfig, strings.Join(names, ", "))
}

// ErrUnknownConfig is wrapped by Spec.Lookup for a name the file lacks.
var ErrUnknownConfig = errors.New("unknown config name")

// profileRE is the form of a MIG device name in mig-devices: an optional
// compute-instance part, slices and memory, and attributes ("1g.10gb",
// "1c.3g.40gb", "1g.10gb+me", "1g.24gb+me.all", "1g.24gb-me",
// "2g.48gb+gfx").
var profileRE = regexp.MustCompile(`^(?:[1-9]c\.)?[1-9]g\.[1-9][0-9]{0,3}gb(?:\+(?:me|me\.all|gfx)|-me)?$`)

// Parse reads a mig-parted config (YAML or JSON) strictly: an unknown or
// missing field, a value of the wrong type or a malformed profile name is
// an error naming the field's path. It reads at most MaxBytes.
func Parse(r io.Reader) (*Spec, error) {
	data, err := io.ReadAll(io.LimitReader(r, MaxBytes+1))
	if err != nil {
		return nil, fmt.Errorf("reading the MIG config: %w", err)
	}
	if len(data) > MaxBytes {
		return nil, fmt.Errorf("the MIG config is larger than %d bytes", MaxBytes)
	}
	return ParseBytes(data)
}

// ParseBytes is Parse of data in memory.
func ParseBytes(data []byte) (*Spec, error) {
	if len(data) > MaxBytes {
		return nil, fmt.Errorf("the MIG config is larger than %d bytes", MaxBytes)
	}
	js, err := yaml.YAMLToJSONStrict(data)
	if err != nil {
		return nil, fmt.Errorf("the MIG config is not valid YAML: %w", err)
	}
	dec := json.NewDecoder(bytes.NewReader(js))
	dec.UseNumber()
	var raw any
	if err := dec.Decode(&raw); err != nil {
		return nil, fmt.Errorf("the MIG config is not valid YAML: %w", err)
	}
	top, ok := raw.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("the MIG config: want a mapping with version and mig-configs, got %s", describe(raw))
	}
	if err := knownKeys("", top, "version", "mig-configs"); err != nil {
		return nil, err
	}
	s := &Spec{}
	v, ok := top["version"]
	if !ok {
		return nil, fmt.Errorf("version: missing; want %q", Version)
	}
	if s.Version, ok = v.(string); !ok || s.Version != Version {
		return nil, fmt.Errorf("version: want %q, got %s", Version, describe(v))
	}
	rawConfigs, ok := top["mig-configs"].(map[string]any)
	if !ok {
		return nil, fmt.Errorf("mig-configs: want a mapping of config names to lists of entries, got %s", describe(top["mig-configs"]))
	}
	if len(rawConfigs) == 0 {
		return nil, errors.New("mig-configs: at least one config is needed")
	}
	if len(rawConfigs) > MaxConfigs {
		return nil, fmt.Errorf("mig-configs: %d configs, at most %d are read", len(rawConfigs), MaxConfigs)
	}
	s.Configs = make(map[string]Config, len(rawConfigs))
	names := make([]string, 0, len(rawConfigs))
	for n := range rawConfigs {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, name := range names {
		path := "mig-configs." + name
		if name == "" || len(name) > MaxNameLen {
			return nil, fmt.Errorf("%s: a config name must have 1 to %d characters (it is the value of a node label)", path, MaxNameLen)
		}
		list, ok := rawConfigs[name].([]any)
		if !ok {
			return nil, fmt.Errorf("%s: want a list of entries, got %s", path, describe(rawConfigs[name]))
		}
		if len(list) == 0 {
			return nil, fmt.Errorf("%s: at least one entry is needed", path)
		}
		if len(list) > MaxEntries {
			return nil, fmt.Errorf("%s: %d entries, at most %d are read", path, len(list), MaxEntries)
		}
		c := make(Config, len(list))
		for i, item := range list {
			if err := parseEntry(fmt.Sprintf("%s[%d]", path, i), item, &c[i]); err != nil {
				return nil, err
			}
		}
		s.Configs[name] = c
	}
	return s, nil
}

func parseEntry(path string, raw any, e *Entry) error {
	e.Path = path
	m, ok := raw.(map[string]any)
	if !ok {
		return fmt.Errorf("%s: want a mapping with devices, mig-enabled and mig-devices, got %s", path, describe(raw))
	}
	if err := knownKeys(path, m, "device-filter", "devices", "mig-enabled", "mig-devices"); err != nil {
		return err
	}
	if f, ok := m["device-filter"]; ok {
		var err error
		if e.DeviceFilter, err = parseFilter(path+".device-filter", f); err != nil {
			return err
		}
	}
	d, ok := m["devices"]
	if !ok {
		return fmt.Errorf("%s.devices: missing; want all or a list of GPU indices", path)
	}
	if err := parseDevices(path+".devices", d, e); err != nil {
		return err
	}
	en, ok := m["mig-enabled"]
	if !ok {
		return fmt.Errorf("%s.mig-enabled: missing; want true or false", path)
	}
	if e.Layout.Enabled, ok = en.(bool); !ok {
		return fmt.Errorf("%s.mig-enabled: want true or false, got %s", path, describe(en))
	}
	md, has := m["mig-devices"]
	if e.Layout.Enabled && (!has || md == nil) {
		return fmt.Errorf("%s.mig-devices: missing; mig-enabled: true needs it ({} for MIG mode with no devices)", path)
	}
	if !has || md == nil {
		return nil
	}
	devs, ok := md.(map[string]any)
	if !ok {
		return fmt.Errorf("%s.mig-devices: want a mapping of MIG profiles to counts (\"1g.10gb\": 7), got %s", path, describe(md))
	}
	if len(devs) > MaxProfiles {
		return fmt.Errorf("%s.mig-devices: %d profiles, at most %d are read", path, len(devs), MaxProfiles)
	}
	if !e.Layout.Enabled && len(devs) > 0 {
		return fmt.Errorf("%s.mig-devices: must be empty when mig-enabled is false", path)
	}
	profiles := make([]string, 0, len(devs))
	for p := range devs {
		profiles = append(profiles, p)
	}
	sort.Strings(profiles)
	e.Layout.Devices = make(map[string]int, len(devs))
	positive := false
	for _, p := range profiles {
		fp := fmt.Sprintf("%s.mig-devices.%q", path, p)
		if !profileRE.MatchString(p) {
			return fmt.Errorf("%s: not a MIG profile name; want <slices>g.<memory>gb with an optional <c>c. before and +me, +me.all, +gfx or -me after (1g.10gb, 1c.3g.40gb, 1g.10gb+me)", fp)
		}
		n, err := count(devs[p])
		if err != nil {
			return fmt.Errorf("%s: %w", fp, err)
		}
		positive = positive || n > 0
		if n > 0 {
			e.Layout.Devices[p] = n
		}
	}
	if len(profiles) > 0 && !positive {
		return fmt.Errorf("%s.mig-devices: every count is 0; give at least one device, or {} for MIG mode with none", path)
	}
	return nil
}

func count(raw any) (int, error) {
	num, ok := raw.(json.Number)
	if !ok {
		return 0, fmt.Errorf("want a count from 0 to %d, got %s", MaxCount, describe(raw))
	}
	n, err := strconv.ParseInt(num.String(), 10, 64)
	if err != nil || n < 0 || n > MaxCount {
		return 0, fmt.Errorf("want a count from 0 to %d, got %s", MaxCount, num)
	}
	return int(n), nil
}

func parseFilter(path string, raw any) ([]DeviceID, error) {
	var items []any
	switch v := raw.(type) {
	case string:
		if v == "" {
			return nil, nil
		}
		items = []any{v}
	case []any:
		items = v
	default:
		return nil, fmt.Errorf("%s: want a PCI device ID or a list of them (\"0x233010DE\"), got %s", path, describe(raw))
	}
	if len(items) > MaxFilters {
		return nil, fmt.Errorf("%s: %d device IDs, at most %d are read", path, len(items), MaxFilters)
	}
	out := make([]DeviceID, 0, len(items))
	for i, it := range items {
		s, ok := it.(string)
		if !ok {
			return nil, fmt.Errorf("%s[%d]: want a PCI device ID such as \"0x233010DE\", got %s", path, i, describe(it))
		}
		id, err := ParseDeviceID(s)
		if err != nil {
			return nil, fmt.Errorf("%s[%d]: %w", path, i, err)
		}
		out = append(out, id)
	}
	return out, nil
}

func parseDevices(path string, raw any, e *Entry) error {
	switch v := raw.(type) {
	case string:
		if v != "all" {
			return fmt.Errorf("%s: want all or a list of GPU indices, got %q", path, v)
		}
		e.AllDevices = true
		return nil
	case []any:
		if len(v) > MaxGPUs {
			return fmt.Errorf("%s: %d indices, at most %d are read", path, len(v), MaxGPUs)
		}
		seen := map[int]bool{}
		for i, it := range v {
			num, ok := it.(json.Number)
			n, err := strconv.ParseInt(string(num), 10, 64)
			if !ok || err != nil || n < 0 || n >= MaxGPUs {
				return fmt.Errorf("%s[%d]: want a GPU index from 0 to %d, got %s", path, i, MaxGPUs-1, describe(it))
			}
			if seen[int(n)] {
				return fmt.Errorf("%s[%d]: GPU %d is listed twice", path, i, n)
			}
			seen[int(n)] = true
			e.Devices = append(e.Devices, int(n))
		}
		return nil
	}
	return fmt.Errorf("%s: want all or a list of GPU indices, got %s", path, describe(raw))
}

func knownKeys(path string, m map[string]any, allowed ...string) error {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		ok := false
		for _, a := range allowed {
			ok = ok || a == k
		}
		if !ok {
			p := k
			if path != "" {
				p = path + "." + k
			}
			return fmt.Errorf("%s: unknown field (allowed: %s)", p, strings.Join(allowed, ", "))
		}
	}
	return nil
}

func describe(raw any) string {
	switch v := raw.(type) {
	case map[string]any:
		return "a mapping"
	case []any:
		return "a list"
	case nil:
		return "nothing"
	case string:
		if len(v) > 40 {
			v = v[:40] + "..."
		}
		return strconv.Quote(v)
	}
	b, _ := json.Marshal(raw)
	if len(b) > 40 {
		b = append(b[:40], "..."...)
	}
	return string(b)
}
