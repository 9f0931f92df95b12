package nodeoffer

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"time"

	configv1 "github.com/gpuplane/gpuplane/api/config/v1"
	"github.com/gpuplane/gpuplane/internal/gpu/sim"
	"github.com/gpuplane/gpuplane/internal/labels"
	"github.com/gpuplane/gpuplane/internal/sharing"
)

// Offer is what one GPU node offers pods once its agent has run.
type Offer struct {
	// Labels are the GPU feature labels the agent writes on the Node, less
	// those that depend on the host rather than on its GPUs and config
	// (hostLabels).
	Labels map[string]string `json:"labels"`
	// Annotations are the Node annotations the agent writes (the GPU
	// topology gpuplane-scheduler places by).
	Annotations map[string]string `json:"annotations,omitempty"`
	// Resources are the device-plugin resources the node advertises, by
	// name, with how many devices each has.
	Resources map[string]int64 `json:"resources"`
}

// GPUs is how many physical GPUs the offer's node has (the
// nvidia.com/gpu.count label).
func (o *Offer) GPUs() string { return o.Labels[labels.Prefix+"gpu.count"] }

// hostLabels are the agent's labels that the machine decides, not its GPUs
// or config: the DMI product name, the GPUs' PCI class and the pass's
// timestamp. An offer leaves them out; the agent adds them when it runs.
var hostLabels = []string{labels.Prefix + "gpu.machine", labels.Prefix + "gpu.mode", labels.Prefix + "gfd.timestamp"}

// Compute works out the offer of a node whose GPUs are those of profile (a
// built-in simulator profile such as dgxh100, or a profile file with its
// MIG layout) and whose agent runs with cfg (nil: the default config).
func Compute(ctx context.Context, profile string, cfg *configv1.Config) (*Offer, error) {
	p, err := sim.Load(profile)
	if err != nil {
		return nil, fmt.Errorf("node offer: profile %q: %w", profile, err)
	}
	if cfg == nil {
		if cfg, err = configv1.Default(configv1.Options{}); err != nil {
			return nil, fmt.Errorf("node offer: default agent config: %w", err)
		}
	}
	b, err := sim.New(p, sim.Options{NodeName: "offer"})
	if err != nil {
		return nil, fmt.Errorf("node offer: profile %q: %w", profile, err)
	}
	defer func() { _ = b.Close() }()
	in, err := labels.ReadInput(ctx, b, time.Unix(0, 0))
	if err != nil {
		return nil, fmt.Errorf("node offer: profile %q: %w", profile, err)
	}
	lc := labels.FromDevicePluginConfig(cfg)
	// The host's files are not read: the labels they decide are dropped.
	tmp, err := os.MkdirTemp("", "gpuplane-offer-")
	if err != nil {
		return nil, err
	}
	defer func() { _ = os.RemoveAll(tmp) }()
	lc.MachineTypeFile, lc.SysfsRoot, lc.Timestamp = filepath.Join(tmp, "product_name"), tmp, false
	ls, err := labels.New(lc)
	if err != nil {
		return nil, fmt.Errorf("node offer: %w", err)
	}
	lbls, annotations, err := labels.Compute(ls, in)
	if err != nil {
		return nil, fmt.Errorf("node offer: profile %q: %w", profile, err)
	}
	for _, k := range hostLabels {
		delete(lbls, k)
	}
	rs, err := sharing.Build(cfg, in.Devices)
	if err != nil {
		return nil, fmt.Errorf("node offer: the resources of profile %q under its config: %w", profile, err)
	}
	out := &Offer{Labels: maps.Clone(lbls), Resources: map[string]int64{}}
	if len(annotations) > 0 {
		out.Annotations = maps.Clone(annotations)
	}
	for _, r := range rs {
		out.Resources[r.Name] += int64(len(r.Devices))
	}
	if len(out.Resources) == 0 {
		return nil, fmt.Errorf("node offer: profile %q offers no GPU resources", profile)
	}
	return out, nil
}

// String is the offer's resources, for messages: "nvidia.com/gpu=8".
func (o *Offer) String() string {
	parts := make([]string, 0, len(o.Resources))
	for _, k := range sortedKeys(o.Resources) {
		parts = append(parts, fmt.Sprintf("%s=%d", k, o.Resources[k]))
	}
	return strings.Join(parts, ",")
}
