package labels

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/gpuplane/gpuplane/api/gpunode"
	"github.com/gpuplane/gpuplane/internal/gpu"
)

// Prefix is the prefix of GPU Feature Discovery's labels.
const Prefix = "nvidia.com/"

// Labels maps label keys to values.
type Labels map[string]string

// Keys returns the keys in ascending order.
func (l Labels) Keys() []string { return slices.Sorted(maps.Keys(l)) }

// Input is what the labelers see of the node in one pass. It is read once
// per pass so that every labeler describes the same moment.
type Input struct {
	System   gpu.SystemInfo
	Devices  []gpu.Device
	Topology *gpu.Topology
	// Fabrics is each GPU's multi-node NVLink fabric, by index; nil when
	// the backend cannot tell (gpu.FabricReader), a GPU without a fabric
	// has FabricNotSupported.
	Fabrics []gpu.Fabric
	Now     time.Time
}

// ReadInput reads the node's GPUs from inv.
func ReadInput(ctx context.Context, inv gpu.Inventory, now time.Time) (*Input, error) {
	sys, err := inv.System(ctx)
	if err != nil {
		return nil, fmt.Errorf("reading driver versions: %w", err)
	}
	devs, err := inv.Devices(ctx)
	if err != nil {
		return nil, fmt.Errorf("listing GPUs: %w", err)
	}
	topo, err := inv.Topology(ctx)
	if err != nil {
		return nil, fmt.Errorf("reading GPU topology: %w", err)
	}
	fabrics, err := readFabrics(ctx, inv, len(devs))
	if err != nil {
		return nil, err
	}
	return &Input{System: sys, Devices: devs, Topology: topo, Fabrics: fabrics, Now: now}, nil
}

// readFabrics reads each GPU's fabric when inv can. A GPU or driver that
// knows no fabric has none; any other failure fails the pass, as GPU
// Feature Discovery's does, rather than drop a label the GPUs may earn.
func readFabrics(ctx context.Context, inv gpu.Inventory, n int) ([]gpu.Fabric, error) {
	r, ok := inv.(gpu.FabricReader)
	if !ok {
		return nil, nil
	}
	out := make([]gpu.Fabric, n)
	for i := range n {
		f, err := r.GPUFabric(ctx, i)
		switch {
		case errors.Is(err, gpu.ErrNotSupported):
			f = gpu.Fabric{State: gpu.FabricNotSupported}
		case err != nil:
			return nil, fmt.Errorf("reading the NVLink fabric of GPU %d: %w", i, err)
		}
		out[i] = f
	}
	return out, nil
}

// Labeler adds one group of labels.
type Labeler interface {
	// Name identifies the labeler in logs and errors.
	Name() string
	// Label adds the labeler's labels for in to out.
	Label(in *Input, out Labels) error
}

// Annotator is an optional capability of a Labeler: it also produces node
// annotations. Only NodeSink writes them.
type Annotator interface {
	Annotate(in *Input, out Labels) error
}

// Sharing strategies, as gpu.sharing-strategy shows them.
const (
	SharingNone        = "none"
	SharingTimeSlicing = "time-slicing"
	SharingMPS         = "mps"
)

// MIG strategies, as mig.strategy shows them.
const (
	MIGStrategyNone   = "none"
	MIGStrategySingle = "single"
	MIGStrategyMixed  = "mixed"
)

// Sharing says how one resource is shared.
type Sharing struct {
	// Strategy is SharingNone, SharingTimeSlicing or SharingMPS.
	Strategy string
	// Replicas is how many pods may share one device; 1 when not shared.
	Replicas int
	// Renamed is set when the shared resource is advertised as
	// <name>.shared; the product label then keeps its plain name, since the
	// resource name already tells pods the GPU is shared.
	Renamed bool
}

// Config is what the labels need to know about the agent's configuration.
// The agent maps its own config onto it.
type Config struct {
	// MIGStrategy is MIGStrategyNone, MIGStrategySingle or
	// MIGStrategyMixed; empty means none.
	MIGStrategy string
	// Sharing is keyed by resource name ("nvidia.com/gpu",
	// "nvidia.com/mig-1g.10gb"). A resource not listed is not shared.
	Sharing map[string]Sharing
	// MachineTypeFile holds the machine's product name;
	// /sys/class/dmi/id/product_name when empty.
	MachineTypeFile string
	// SysfsRoot is where /sys is mounted; "/sys" when empty. The PCI class
	// of each GPU, read below it, decides gpu.mode.
	SysfsRoot string
	// Timestamp adds nvidia.com/gfd.timestamp (seconds since the epoch).
	Timestamp bool
}

func (c *Config) defaults() {
	if c.MIGStrategy == "" {
		c.MIGStrategy = MIGStrategyNone
	}
	if c.MachineTypeFile == "" {
		c.MachineTypeFile = "/sys/class/dmi/id/product_name"
	}
	if c.SysfsRoot == "" {
		c.SysfsRoot = "/sys"
	}
}

// Validate checks the config and names the field that is wrong.
func (c *Config) Validate() error {
	switch c.MIGStrategy {
	case "", MIGStrategyNone, MIGStrategySingle, MIGStrategyMixed:
	default:
		return fmt.Errorf("labels config: migStrategy: must be none, single or mixed, got %q", c.MIGStrategy)
	}
	for _, name := range slices.Sorted(maps.Keys(c.Sharing)) {
		s := c.Sharing[name]
		switch s.Strategy {
		case SharingNone, SharingTimeSlicing, SharingMPS:
		default:
			return fmt.Errorf("labels config: sharing[%s].strategy: must be none, time-slicing or mps, got %q", name, s.Strategy)
		}
		if s.Replicas < 1 || s.Replicas > gpunode.MaxReplicas {
			return fmt.Errorf("labels config: sharing[%s].replicas: must be >= 1 and at most %d, got %d", name, gpunode.MaxReplicas, s.Replicas)
		}
		if s.Strategy == SharingNone && s.Replicas != 1 {
			return fmt.Errorf("labels config: sharing[%s].replicas: must be 1 when strategy is none, got %d", name, s.Replicas)
		}
	}
	return nil
}

// sharing returns how resource is shared, "none" with one replica when the
// config does not list it.
func (c *Config) sharing(resource string) Sharing {
	if s, ok := c.Sharing[resource]; ok {
		return s
	}
	return Sharing{Strategy: SharingNone, Replicas: 1}
}

// shared reports whether the sharing makes several pods use one device.
func (s Sharing) shared() bool { return s.Strategy != SharingNone && s.Replicas > 1 }

// productName turns a GPU name into a label value the way GPU Feature
// Discovery does: words joined by "-", then invalid characters dropped.
func productName(name string) string {
	return sanitizeValue(strings.Join(strings.Fields(name), "-"))
}

var invalidValueChars = regexp.MustCompile(`[^-A-Za-z0-9_.]`)

// sanitizeValue makes s a valid label value: at most 63 characters of
// [-A-Za-z0-9_.], starting and ending with an alphanumeric character.
func sanitizeValue(s string) string {
	s = invalidValueChars.ReplaceAllString(s, "")
	if len(s) > 63 {
		s = s[:63]
	}
	return strings.Trim(s, "-_.")
}

// New returns the standard labelers for cfg, in the order they run.
func New(cfg Config) ([]Labeler, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.defaults()
	var ls []Labeler
	add := func(l Labeler, err error) error {
		if err != nil {
			return err
		}
		ls = append(ls, l)
		return nil
	}
	for _, err := range []error{
		add(NewVersionLabeler()),
		add(NewMachineLabeler(cfg.MachineTypeFile, cfg.SysfsRoot)),
		add(NewResourceLabeler(cfg)),
		add(NewMIGLabeler(cfg)),
		add(NewSharingLabeler(cfg)),
		add(NewTopologyLabeler()),
		add(NewCliqueLabeler()),
	} {
		if err != nil {
			return nil, err
		}
	}
	if cfg.Timestamp {
		if err := add(NewTimestampLabeler()); err != nil {
			return nil, err
		}
	}
	return ls, nil
}

// Compute runs every labeler over in and returns the labels and the
// annotations.
func Compute(ls []Labeler, in *Input) (labels, annotations Labels, err error) {
	labels, annotations = Labels{}, Labels{}
	for _, l := range ls {
		if err := l.Label(in, labels); err != nil {
			return nil, nil, fmt.Errorf("labeler %s: %w", l.Name(), err)
		}
		if a, ok := l.(Annotator); ok {
			if err := a.Annotate(in, annotations); err != nil {
				return nil, nil, fmt.Errorf("labeler %s: annotations: %w", l.Name(), err)
			}
		}
	}
	return labels, annotations, nil
}
