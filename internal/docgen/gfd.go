package docgen

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/gpuplane/gpuplane/internal/gpu/sim"
	"github.com/gpuplane/gpuplane/internal/labels"
)

// featureLabels runs the agent's labellers, as it runs them on a node, over
// simulated nodes (a DGX H100 time-sliced four ways under the mixed MIG
// strategy, a GB200 NVL72 compute tray) and returns each label key with the
// values it took, for the GPU feature labels table.
func featureLabels() (map[string][]string, error) {
	tmp, err := os.MkdirTemp("", "gpuplane-docgen-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	machine := filepath.Join(tmp, "product_name")
	if err := os.WriteFile(machine, []byte("DGX H100\n"), 0o644); err != nil {
		return nil, err
	}
	nodes := []struct {
		profile string
		cfg     labels.Config
	}{
		{"dgxh100", labels.Config{MIGStrategy: labels.MIGStrategyMixed,
			Sharing: map[string]labels.Sharing{"nvidia.com/gpu": {Strategy: labels.SharingTimeSlicing, Replicas: 4}}}},
		{"gb200-nvl72", labels.Config{}},
	}
	out := map[string][]string{}
	for _, n := range nodes {
		p, err := sim.Builtin(n.profile)
		if err != nil {
			return nil, err
		}
		backend, err := sim.New(p, sim.Options{NodeName: "docs"})
		if err != nil {
			return nil, err
		}
		in, err := labels.ReadInput(context.Background(), backend, time.Unix(0, 0))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", n.profile, err)
		}
		n.cfg.MachineTypeFile, n.cfg.SysfsRoot = machine, tmp
		ls, err := labels.New(n.cfg)
		if err != nil {
			return nil, err
		}
		got, _, err := labels.Compute(ls, in)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", n.profile, err)
		}
		for k, v := range got {
			if !contains(out[k], v) {
				out[k] = append(out[k], v)
			}
		}
	}
	return out, nil
}

// featureLabelsSection is the table of GPU feature labels.
func featureLabelsSection() (string, error) {
	got, err := featureLabels()
	if err != nil {
		return "", err
	}
	if len(got) < 10 {
		return "", fmt.Errorf("the labellers wrote only %d labels: the run is broken", len(got))
	}
	var b strings.Builder
	b.WriteString("\n## GPU feature labels\n\nThe labels gpuplane-agent writes on its Node, with GPU Feature Discovery's names and values, as\n" +
		"the agent's labellers write them for two simulated nodes: a DGX H100 time-sliced four ways under the\n" +
		"mixed MIG strategy, and a GB200 NVL72 compute tray (`gpu.machine` and `gpu.mode` are read from the\n" +
		"node's DMI and PCI data).\n\n| label | values on the simulated nodes |\n| --- | --- |\n")
	for _, k := range sortedKeys(got) {
		vals := make([]string, len(got[k]))
		for i, v := range got[k] {
			vals[i] = code(v)
		}
		fmt.Fprintf(&b, "| `%s` | %s |\n", k, cell(strings.Join(vals, ", ")))
	}
	return b.String(), nil
}
