package v1

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"reflect"
	"strconv"
	"strings"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/gpuplane/gpuplane/api/gpunode"
)

// Defaults.
const (
	DefaultProbation           = 60 * time.Second
	DefaultCDIAnnotationPrefix = "cdi.k8s.io/"
	DefaultMPSRoot             = "/run/nvidia/mps"
	DefaultDriverRoot          = "/"
)

// ErrInvalid wraps every error about the content of a config.
var ErrInvalid = errors.New("invalid config")

// Overrides are settings given on the command line or in the environment;
// nil fields are not set there.
type Overrides struct {
	MIGStrategy        *string
	FailOnInitError    *bool
	PassDeviceSpecs    *bool
	DeviceListStrategy []string
	DeviceIDStrategy   *string
	NvidiaDriverRoot   *string
	MPSRoot            *string
}

// Environment variables read by OverridesFromEnv; the same names as
// NVIDIA's device plugin.
const (
	EnvMIGStrategy        = "MIG_STRATEGY"
	EnvFailOnInitError    = "FAIL_ON_INIT_ERROR"
	EnvPassDeviceSpecs    = "PASS_DEVICE_SPECS"
	EnvDeviceListStrategy = "DEVICE_LIST_STRATEGY"
	EnvDeviceIDStrategy   = "DEVICE_ID_STRATEGY"
	EnvNvidiaDriverRoot   = "NVIDIA_DRIVER_ROOT"
	EnvMPSRoot            = "MPS_ROOT"
)

// OverridesFromEnv reads the overrides from environment variables through
// lookup (os.LookupEnv in production).
func OverridesFromEnv(lookup func(string) (string, bool)) (Overrides, error) {
	var o Overrides
	str := func(name string) *string {
		if v, ok := lookup(name); ok && v != "" {
			return &v
		}
		return nil
	}
	boolean := func(name string) (*bool, error) {
		s := str(name)
		if s == nil {
			return nil, nil
		}
		b, err := strconv.ParseBool(*s)
		if err != nil {
			return nil, fmt.Errorf("environment variable %s: want true or false, got %q: %w", name, *s, ErrInvalid)
		}
		return &b, nil
	}
	var err error
	o.MIGStrategy = str(EnvMIGStrategy)
	if o.FailOnInitError, err = boolean(EnvFailOnInitError); err != nil {
		return o, err
	}
	if o.PassDeviceSpecs, err = boolean(EnvPassDeviceSpecs); err != nil {
		return o, err
	}
	if s := str(EnvDeviceListStrategy); s != nil {
		for _, part := range strings.Split(*s, ",") {
			if part = strings.TrimSpace(part); part != "" {
				o.DeviceListStrategy = append(o.DeviceListStrategy, part)
			}
		}
	}
	o.DeviceIDStrategy = str(EnvDeviceIDStrategy)
	o.NvidiaDriverRoot = str(EnvNvidiaDriverRoot)
	o.MPSRoot = str(EnvMPSRoot)
	return o, nil
}

// Over returns o with every unset field taken from lower: o wins.
func (o Overrides) Over(lower Overrides) Overrides {
	out := lower
	if o.MIGStrategy != nil {
		out.MIGStrategy = o.MIGStrategy
	}
	if o.FailOnInitError != nil {
		out.FailOnInitError = o.FailOnInitError
	}
	if o.PassDeviceSpecs != nil {
		out.PassDeviceSpecs = o.PassDeviceSpecs
	}
	if o.DeviceListStrategy != nil {
		out.DeviceListStrategy = o.DeviceListStrategy
	}
	if o.DeviceIDStrategy != nil {
		out.DeviceIDStrategy = o.DeviceIDStrategy
	}
	if o.NvidiaDriverRoot != nil {
		out.NvidiaDriverRoot = o.NvidiaDriverRoot
	}
	if o.MPSRoot != nil {
		out.MPSRoot = o.MPSRoot
	}
	return out
}

// Options tune Load.
type Options struct {
	// Overrides are the flag and environment settings, already merged
	// (flags.Over(env)); they win over the file.
	Overrides Overrides
	// Logger receives notes such as the sharing.mig alias; nil discards.
	Logger *slog.Logger
}

// Bounds of a config: the agent runs under a small memory limit, and a
// config beyond these is a mistake, never a node's real sharing.
const (
	// MaxBytes is the largest config Load reads.
	MaxBytes = 1 << 20
	// MaxReplicas is the most replicas one GPU may be shared as
	// (api/gpunode.MaxReplicas, which the scheduler holds a node to).
	MaxReplicas = gpunode.MaxReplicas
	// MaxResources is the most sharing entries of one mode, and
	// MaxDevices the most devices one entry may list.
	MaxResources = 256
	MaxDevices   = 1024
)

// Load reads a v1 config from r, applies opts.Overrides over it, fills in
// defaults and validates the result. An empty reader is an empty config.
func Load(r io.Reader, opts Options) (*Config, error) {
	data, err := io.ReadAll(io.LimitReader(r, MaxBytes+1))
	if err != nil {
		return nil, fmt.Errorf("reading config: %w", err)
	}
	if len(data) > MaxBytes {
		return nil, fmt.Errorf("config: more than %d bytes (%d KiB); a config that large is not one: check the file (or ConfigMap key) it is read from: %w", MaxBytes, MaxBytes>>10, ErrInvalid)
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	cfg := &Config{}
	if len(bytes.TrimSpace(data)) > 0 {
		if err := parse(data, cfg, log); err != nil {
			return nil, err
		}
	} else {
		cfg.Version = Version
	}
	cfg.apply(opts.Overrides)
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return cfg, nil
}

// Default is the config with no file: defaults and overrides only.
func Default(opts Options) (*Config, error) { return Load(strings.NewReader(""), opts) }

func parse(data []byte, cfg *Config, log *slog.Logger) error {
	js, err := yaml.YAMLToJSON(data)
	if err != nil {
		return fmt.Errorf("config: not valid YAML or JSON: %w: %w", err, ErrInvalid)
	}
	var raw any
	dec := json.NewDecoder(bytes.NewReader(js))
	dec.UseNumber()
	if err := dec.Decode(&raw); err != nil {
		return fmt.Errorf("config: decoding: %w: %w", err, ErrInvalid)
	}
	top, ok := raw.(map[string]any)
	if !ok {
		return fmt.Errorf("config: want a mapping with version: v1 at the top, got %s: %w", describe(raw), ErrInvalid)
	}
	if err := checkVersion(top["version"]); err != nil {
		return err
	}
	if err := migAlias(top, log); err != nil {
		return err
	}
	if err := decodeInto("", numbersToFloat(top), reflect.ValueOf(cfg).Elem()); err != nil {
		return fmt.Errorf("config: %w: %w", err, ErrInvalid)
	}
	return nil
}

func checkVersion(v any) error {
	s, _ := v.(string)
	switch {
	case v == nil:
		return fmt.Errorf("config: version: missing; add \"version: v1\": %w", ErrInvalid)
	case s != Version:
		return fmt.Errorf("config: version: unknown version %s; this agent reads %q: %w", describe(v), Version, ErrInvalid)
	}
	return nil
}

// migAlias moves sharing.mig.strategy, found in articles, to
// flags.migStrategy.
func migAlias(top map[string]any, log *slog.Logger) error {
	sharing, _ := top["sharing"].(map[string]any)
	if sharing == nil {
		return nil
	}
	rawMIG, ok := sharing["mig"]
	if !ok {
		return nil
	}
	mig, ok := rawMIG.(map[string]any)
	if !ok {
		return fmt.Errorf("config: sharing.mig: want a mapping with strategy, got %s: %w", describe(rawMIG), ErrInvalid)
	}
	for k := range mig {
		if k != "strategy" {
			return fmt.Errorf("config: sharing.mig.%s: unknown field %q (sharing.mig only accepts strategy, an alias of flags.migStrategy): %w", k, k, ErrInvalid)
		}
	}
	strategy, ok := mig["strategy"].(string)
	if !ok {
		return fmt.Errorf("config: sharing.mig.strategy: want a string, got %s: %w", describe(mig["strategy"]), ErrInvalid)
	}
	delete(sharing, "mig")
	flags, _ := top["flags"].(map[string]any)
	if flags == nil {
		if _, present := top["flags"]; present && top["flags"] != nil {
			return fmt.Errorf("config: flags: want a mapping, got %s: %w", describe(top["flags"]), ErrInvalid)
		}
		flags = map[string]any{}
		top["flags"] = flags
	}
	if prev, ok := flags["migStrategy"]; ok {
		if p, _ := prev.(string); p != strategy {
			return fmt.Errorf("config: sharing.mig.strategy %q contradicts flags.migStrategy %s; keep only flags.migStrategy: %w", strategy, describe(prev), ErrInvalid)
		}
	} else {
		flags["migStrategy"] = strategy
	}
	log.Info("config: sharing.mig.strategy is not part of the v1 format; reading it as flags.migStrategy", "strategy", strategy)
	return nil
}

// numbersToFloat turns json.Number into int64 or float64 so that leaf
// decoding sees plain numbers.
func numbersToFloat(v any) any {
	switch t := v.(type) {
	case map[string]any:
		for k, x := range t {
			t[k] = numbersToFloat(x)
		}
	case []any:
		for i, x := range t {
			t[i] = numbersToFloat(x)
		}
	case json.Number:
		if i, err := t.Int64(); err == nil {
			return i
		}
		f, _ := t.Float64()
		return f
	}
	return v
}

func (c *Config) apply(o Overrides) {
	if o.MIGStrategy != nil {
		c.Flags.MIGStrategy = o.MIGStrategy
	}
	if o.FailOnInitError != nil {
		c.Flags.FailOnInitError = o.FailOnInitError
	}
	if o.PassDeviceSpecs != nil {
		c.Flags.Plugin.PassDeviceSpecs = o.PassDeviceSpecs
	}
	if o.DeviceListStrategy != nil {
		c.Flags.Plugin.DeviceListStrategy = o.DeviceListStrategy
	}
	if o.DeviceIDStrategy != nil {
		c.Flags.Plugin.DeviceIDStrategy = o.DeviceIDStrategy
	}
	if o.NvidiaDriverRoot != nil {
		c.Flags.NvidiaDriverRoot = o.NvidiaDriverRoot
	}
	if o.MPSRoot != nil {
		c.Flags.Plugin.MPSRoot = o.MPSRoot
	}
}

func setDefault[T any](p **T, v T) {
	if *p == nil {
		*p = &v
	}
}

func (c *Config) setDefaults() {
	f := &c.Flags
	setDefault(&f.MIGStrategy, MIGStrategyNone)
	setDefault(&f.FailOnInitError, true)
	setDefault(&f.NvidiaDriverRoot, DefaultDriverRoot)
	setDefault(&f.NvidiaDevRoot, *f.NvidiaDriverRoot)
	setDefault(&f.Plugin.PassDeviceSpecs, false)
	setDefault(&f.Plugin.DeviceIDStrategy, DeviceIDStrategyUUID)
	setDefault(&f.Plugin.CDIAnnotationPrefix, DefaultCDIAnnotationPrefix)
	setDefault(&f.Plugin.MPSRoot, DefaultMPSRoot)
	if len(f.Plugin.DeviceListStrategy) == 0 {
		f.Plugin.DeviceListStrategy = DeviceListStrategy{DeviceListStrategyEnvVar}
	}
	if c.Sharing.AllocationPolicy == "" {
		c.Sharing.AllocationPolicy = AllocationDistributed
	}
	setDefault(&c.Health.Probation, Duration{DefaultProbation})
	c.Health.Quarantine.setDefaults()
}
