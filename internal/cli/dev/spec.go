package dev

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/gpuplane/gpuplane/api/gpunode"
	"github.com/gpuplane/gpuplane/internal/cliutil"
	"github.com/gpuplane/gpuplane/internal/gpu/sim"
	"github.com/gpuplane/gpuplane/internal/mig"
)

// Sharing modes of a simulated node.
const (
	ModeWhole       = "whole"
	ModeMIGMixed    = "mig-mixed"
	ModeTimeSlicing = "time-slicing"
	// ModeMIGDynamic puts GPUs 0 and 1 in MIG mode with no MIG devices:
	// the DRA driver creates them for the claims that ask (dynamic MIG).
	ModeMIGDynamic = "mig-dynamic"
)

// How `dev up` installs gpuplane.
const (
	// InstallProcesses runs the agents and the scheduler as processes of
	// the supervisor.
	InstallProcesses = "processes"
	// InstallChart installs gpuplane's Helm chart; the node simulators run
	// its pods.
	InstallChart = "chart"
)

// Schedulers `dev up` can run.
const (
	SchedulerKube     = "kube-scheduler"
	SchedulerGPUPlane = "gpuplane"
	SchedulerNone     = "none"
)

// Spec is the resolved description of a dev cluster: written by `up`, read
// by the supervisor.
type Spec struct {
	// Install is InstallProcesses or InstallChart.
	Install         string `json:"install,omitempty"`
	BinDir          string `json:"binDir"`
	AgentBinary     string `json:"agentBinary"`
	Scheduler       string `json:"scheduler"`
	SchedulerBinary string `json:"schedulerBinary,omitempty"`
	// CRDDir holds the Queue and PodGroup CRDs gpuplane-scheduler needs.
	CRDDir      string     `json:"crdDir,omitempty"`
	Nodes       []NodeSpec `json:"nodes"`
	KwokNodes   int        `json:"kwokNodes"`
	KwokProduct string     `json:"kwokProduct"`
	KwokGPUs    int        `json:"kwokGPUs"`
	// Operators are the workload operators to run beside the scheduler
	// (localcluster.Operators), from OperatorsDir.
	Operators    []string `json:"operators,omitempty"`
	OperatorsDir string   `json:"operatorsDir,omitempty"`
	// DRA runs every agent's DRA driver and installs gpuplane's
	// DeviceClasses.
	DRA bool `json:"dra,omitempty"`
	// Layout places the nodes in blocks, racks and NVL72 NVLink domains
	// (--topology); nil leaves them unplaced.
	Layout *Layout `json:"layout,omitempty"`
	// Karpenter runs Karpenter with GPU node pools (--karpenter-pools).
	Karpenter *KarpenterSpec `json:"karpenter,omitempty"`
}

// NodeSpec is one simulated node.
type NodeSpec struct {
	Name string `json:"name"`
	// Profile is what the user asked for (dgxh100, dgxh100:mig-mixed, ...).
	Profile string `json:"profile"`
	// SimProfile is what the agent's --simulate gets: a built-in name or a
	// generated profile file.
	SimProfile string `json:"simProfile"`
	Mode       string `json:"mode"`
	Replicas   int    `json:"replicas,omitempty"`
	// AgentConfig is the agent's config file, empty for none.
	AgentConfig string `json:"agentConfig,omitempty"`
	// ConfigName names the node's config in the chart's config.map (the
	// node's nvidia.com/device-plugin.config label).
	ConfigName string `json:"configName,omitempty"`
	// Resources are the device-plugin resources the node must report
	// before the cluster counts as up.
	Resources []string `json:"resources"`
	// Labels are the node's block and rack labels from the layout.
	Labels map[string]string `json:"labels,omitempty"`
	// Fabric is the NVLink fabric its simulated GPUs report (the agent's
	// --simulate-fabric), empty outside NVL72 racks.
	Fabric string `json:"fabric,omitempty"`
}

// parseNodeProfile reads PROFILE[:MODE], MODE being whole, mig-mixed or
// time-slicing[=REPLICAS] (default 4).
func parseNodeProfile(s string) (profile, mode string, replicas int, err error) {
	profile, mode, _ = strings.Cut(strings.TrimSpace(s), ":")
	if profile == "" {
		return "", "", 0, cliutil.Usagef("node profile %q: want PROFILE[:MODE], e.g. dgxh100, dgxh100:mig-mixed, dgxh100:time-slicing=4", s)
	}
	if _, err := sim.Load(profile); err != nil {
		return "", "", 0, cliutil.Usagef("node profile %q: %w", s, err)
	}
	mode, rep, hasRep := strings.Cut(mode, "=")
	switch mode {
	case "", ModeWhole:
		mode = ModeWhole
	case ModeMIGMixed, ModeMIGDynamic:
	case ModeTimeSlicing:
		replicas = 4
	default:
		return "", "", 0, cliutil.Usagef("node profile %q: unknown mode %q (want whole, mig-mixed, mig-dynamic or time-slicing[=REPLICAS])", s, mode)
	}
	if hasRep {
		if mode != ModeTimeSlicing {
			return "", "", 0, cliutil.Usagef("node profile %q: only time-slicing takes =REPLICAS", s)
		}
		replicas, err = strconv.Atoi(rep)
		if err != nil || replicas < 2 {
			return "", "", 0, cliutil.Usagef("node profile %q: replicas must be a number >= 2, got %q", s, rep)
		}
	}
	return profile, mode, replicas, nil
}

// prepareNode writes the files a node needs into dir (its profile with MIG
// devices, its agent config) and returns its spec.
func prepareNode(ctx context.Context, name, arg, dir string) (NodeSpec, error) {
	profile, mode, replicas, err := parseNodeProfile(arg)
	if err != nil {
		return NodeSpec{}, err
	}
	n := NodeSpec{Name: name, Profile: arg, SimProfile: profile, Mode: mode, Replicas: replicas, Resources: []string{gpunode.ResourceGPU}, ConfigName: mode}
	if replicas > 0 {
		n.ConfigName = fmt.Sprintf("%s-%d", mode, replicas)
	}
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return n, fmt.Errorf("creating the directory of node %s: %w", name, err)
	}
	switch mode {
	case ModeTimeSlicing:
		n.AgentConfig = filepath.Join(dir, "agent-config.yaml")
		cfg := fmt.Sprintf("version: v1\nsharing:\n  timeSlicing:\n    resources:\n    - name: nvidia.com/gpu\n      replicas: %d\n", replicas)
		if err := os.WriteFile(n.AgentConfig, []byte(cfg), 0o600); err != nil {
			return n, fmt.Errorf("writing the agent config of node %s: %w", name, err)
		}
	case ModeMIGDynamic:
		file, err := writeMIGDynamicProfile(profile, filepath.Join(dir, "profile.yaml"))
		if err != nil {
			return n, fmt.Errorf("node %s (%s): %w", name, arg, err)
		}
		n.SimProfile = file
	case ModeMIGMixed:
		file, resources, err := writeMIGProfile(ctx, profile, filepath.Join(dir, "profile.yaml"))
		if err != nil {
			return n, fmt.Errorf("node %s (%s): %w", name, arg, err)
		}
		n.SimProfile = file
		n.Resources = append(n.Resources, resources...)
		n.AgentConfig = filepath.Join(dir, "agent-config.yaml")
		if err := os.WriteFile(n.AgentConfig, []byte("version: v1\nflags:\n  migStrategy: mixed\n"), 0o600); err != nil {
			return n, fmt.Errorf("writing the agent config of node %s: %w", name, err)
		}
	}
	return n, nil
}

// writeMIGProfile writes a profile file of the built-in profile whose first
// GPU is split into seven 1-slice MIG devices and whose second into two
// 3-slice ones, the rest left whole, and returns the MIG resources the node
// will offer.
func writeMIGProfile(ctx context.Context, builtin, path string) (string, []string, error) {
	p, err := sim.Builtin(builtin)
	if err != nil {
		return "", nil, cliutil.Usagef("mig-mixed needs a built-in profile: %w", err)
	}
	if len(p.GPUs) < 3 || p.GPUs[0].MIGTable == "" {
		return "", nil, cliutil.Usagef("profile %s has no MIG-capable GPUs to split", builtin)
	}
	b, err := sim.New(p, sim.Options{NodeName: "probe"})
	if err != nil {
		return "", nil, err
	}
	profiles, err := b.MIGProfiles(ctx, 0)
	_ = b.Close()
	if err != nil {
		return "", nil, fmt.Errorf("reading the MIG profiles of %s: %w", builtin, err)
	}
	// The plain profiles (no media extensions) with the least memory for
	// their slice count: 1g.10gb and 3g.40gb on an H100 80GB.
	small, big := "", ""
	var smallMiB, bigMiB uint64
	for _, mp := range profiles {
		if strings.ContainsAny(mp.Name, "+-") {
			continue
		}
		if mp.SliceCount == 1 && (small == "" || mp.MemoryMiB < smallMiB) {
			small, smallMiB = mp.Name, mp.MemoryMiB
		}
		if mp.SliceCount == 3 && (big == "" || mp.MemoryMiB < bigMiB) {
			big, bigMiB = mp.Name, mp.MemoryMiB
		}
	}
	if small == "" || big == "" {
		return "", nil, fmt.Errorf("profile %s offers no plain 1- and 3-slice MIG profiles", builtin)
	}
	// internal/mig decides whether a layout fits a GPU, as it does for the
	// agent's configs.
	for i, l := range []mig.Layout{{Enabled: true, Devices: map[string]int{small: 7}}, {Enabled: true, Devices: map[string]int{big: 2}}} {
		if _, err := mig.Fit(fmt.Sprintf("gpus[%d].migDevices", i), profiles, l); err != nil {
			return "", nil, fmt.Errorf("the MIG layout of %s's GPU %d: %w", builtin, i, err)
		}
	}
	var sb strings.Builder
	fmt.Fprintf(&sb, "name: %s-mig-mixed\ngpus:\n", builtin)
	for i, g := range p.GPUs {
		fmt.Fprintf(&sb, "  - model: %s\n    numaNode: %d\n", g.Model, g.NUMANode)
		switch i {
		case 0:
			fmt.Fprintf(&sb, "    migEnabled: true\n    migDevices: [%s]\n", strings.TrimSuffix(strings.Repeat(small+", ", 7), ", "))
		case 1:
			fmt.Fprintf(&sb, "    migEnabled: true\n    migDevices: [%s, %s]\n", big, big)
		}
	}
	if len(p.Links) > 1 && len(p.Links[0]) > 1 {
		fmt.Fprintf(&sb, "topology:\n  nvlink: %d\n", p.Links[0][1].NVLinks)
	}
	writeFabric(&sb, p)
	if err := os.WriteFile(path, []byte(sb.String()), 0o600); err != nil {
		return "", nil, fmt.Errorf("writing the MIG profile: %w", err)
	}
	if _, err := sim.Load(path); err != nil {
		return "", nil, fmt.Errorf("the simulator cannot read the MIG profile it was given for %s: %w", builtin, err)
	}
	return path, []string{gpunode.MIGResourcePrefix + small, gpunode.MIGResourcePrefix + big}, nil
}
