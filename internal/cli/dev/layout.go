package dev

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/gpuplane/gpuplane/api/gpunode"
	"github.com/gpuplane/gpuplane/internal/cliutil"
	"github.com/gpuplane/gpuplane/internal/gpu/sim"
)

// Labels `dev up --topology` puts on every node: the spine block and the
// rack (leaf switch) it sits under, the levels a Topology names above the
// NVLink domain. Rack values are unique across blocks, so each value is
// one domain.
const (
	LabelTopologyBlock = "gpuplane.io/topology-block"
	LabelTopologyRack  = "gpuplane.io/topology-rack"
)

// Layout lays a dev cluster's nodes out in a network: Blocks spine blocks
// of RacksPerBlock racks of RackNodes nodes. Nodes fill it in order, the
// simulated nodes first, then the kwok nodes: node i sits in rack
// i/RackNodes. With NVL72 every rack is one GB200 or GB300 NVL72 rack,
// its nodes compute trays on one NVLink fabric.
type Layout struct {
	Blocks        int  `json:"blocks"`
	RacksPerBlock int  `json:"racksPerBlock"`
	RackNodes     int  `json:"rackNodes"`
	NVL72         bool `json:"nvl72,omitempty"`
}

// Placement is where one node sits.
type Placement struct {
	// Block and Rack count from 1; Rack across the whole cluster.
	Block, Rack int
	// Fabric is the node's NVLink fabric as nvidia.com/gpu.clique shows
	// it, empty outside NVL72 racks.
	Fabric string
}

// Labels are the node labels of the placement. The clique label is
// included: kwok nodes get it written, simulated ones from their agent.
func (p Placement) Labels() map[string]string {
	l := map[string]string{
		LabelTopologyBlock: fmt.Sprintf("block-%d", p.Block),
		LabelTopologyRack:  fmt.Sprintf("rack-%d", p.Rack),
	}
	if p.Fabric != "" {
		l[gpunode.LabelGPUClique] = p.Fabric
	}
	return l
}

// Place returns where the node at position i (simulated nodes first,
// then kwok nodes) sits.
func (l *Layout) Place(i int) Placement {
	rack := i / l.RackNodes
	p := Placement{Block: rack/l.RacksPerBlock + 1, Rack: rack + 1}
	if l.NVL72 {
		p.Fabric = RackFabric(p.Rack)
	}
	return p
}

// RackFabric is the NVLink fabric of NVL72 rack r of a dev cluster: a
// cluster UUID named after the rack, clique 1.
func RackFabric(rack int) string {
	return gpunode.CliqueValue(sim.FabricClusterUUID(fmt.Sprintf("rack-%d", rack)), 1)
}

// Capacity is how many nodes the layout holds.
func (l *Layout) Capacity() int { return l.Blocks * l.RacksPerBlock * l.RackNodes }

// topologyHelp is --topology's description.
const topologyHelp = `lay the nodes out in a network, comma-separated KEY=VALUE:
  blocks=B       spine blocks (default 1)
  racks=R        racks per block (default: as many as the nodes fill)
  rack-nodes=N   nodes per rack (required, or 18 with nvl72)
  nvl72          every rack is a GB200/GB300 NVL72 rack: its nodes are compute
                 trays on one NVLink fabric, labelled nvidia.com/gpu.clique
Nodes fill the racks in order, simulated nodes first, then kwok nodes, and are
labelled ` + LabelTopologyBlock + `=block-B and ` + LabelTopologyRack + `=rack-R`

// parseLayout reads --topology for a cluster of nodes nodes.
func parseLayout(s string, nodes int) (*Layout, error) {
	l := &Layout{Blocks: 1}
	racks := 0
	seen := map[string]bool{}
	for item := range strings.SplitSeq(s, ",") {
		key, val, hasVal := strings.Cut(strings.TrimSpace(item), "=")
		if seen[key] {
			return nil, cliutil.Usagef("--topology %q: %s given twice", s, key)
		}
		seen[key] = true
		num := func() (int, error) {
			n, err := strconv.Atoi(val)
			if !hasVal || err != nil || n < 1 {
				return 0, cliutil.Usagef("--topology %q: %s: want a whole number >= 1, got %q", s, key, val)
			}
			return n, nil
		}
		var err error
		switch key {
		case "blocks":
			l.Blocks, err = num()
		case "racks":
			racks, err = num()
		case "rack-nodes":
			l.RackNodes, err = num()
		case "nvl72":
			if hasVal {
				return nil, cliutil.Usagef("--topology %q: nvl72 takes no value", s)
			}
			l.NVL72 = true
		default:
			return nil, cliutil.Usagef("--topology %q: unknown key %q (want blocks=B, racks=R, rack-nodes=N, nvl72)", s, key)
		}
		if err != nil {
			return nil, err
		}
	}
	switch {
	case l.RackNodes == 0 && l.NVL72:
		l.RackNodes = sim.NVL72RackTrays
	case l.RackNodes == 0:
		return nil, cliutil.Usagef("--topology %q: rack-nodes: required, the number of nodes in each rack", s)
	case l.NVL72 && l.RackNodes > sim.NVL72RackTrays:
		return nil, cliutil.Usagef("--topology %q: rack-nodes: an NVL72 rack holds %d compute trays, got %d", s, sim.NVL72RackTrays, l.RackNodes)
	}
	l.RacksPerBlock = racks
	if racks == 0 {
		perBlock := l.Blocks * l.RackNodes
		l.RacksPerBlock = max(1, (nodes+perBlock-1)/perBlock)
	}
	if nodes > l.Capacity() {
		return nil, cliutil.Usagef("--topology %q: %d blocks of %d racks of %d nodes hold %d nodes, but the cluster has %d",
			s, l.Blocks, l.RacksPerBlock, l.RackNodes, l.Capacity(), nodes)
	}
	return l, nil
}

// kwokNVL72Product is the nvidia.com/gpu.product of kwok trays in NVL72
// racks.
const kwokNVL72Product = "NVIDIA-GB200"

// nvl72Layout reports whether a --topology value asks for NVL72 racks.
func nvl72Layout(s string) bool {
	for item := range strings.SplitSeq(s, ",") {
		if strings.TrimSpace(item) == "nvl72" {
			return true
		}
	}
	return false
}

// resolveLayout reads --topology for the flags' nodes and checks that
// NVL72 racks hold only compute trays: simulated nodes of an NVL72 tray
// profile (in any mode: the MIG modes' profile files keep its fabric),
// kwok nodes of four GPUs.
func resolveLayout(f *upFlags) (*Layout, error) {
	args := nodeArgs(f)
	l, err := parseLayout(f.topology, len(args)+f.kwokNodes)
	if err != nil || !l.NVL72 {
		return l, err
	}
	for i, arg := range args {
		profile, _, _, err := parseNodeProfile(arg)
		if err != nil {
			return nil, err
		}
		p, err := sim.Load(profile)
		if err != nil {
			return nil, cliutil.Usagef("node profile %q: %w", arg, err)
		}
		if p.Fabric == nil {
			return nil, cliutil.Usagef("--topology nvl72: simulated node %d's profile %q is not an NVL72 compute tray (want gb200-nvl72 or gb300-nvl72)", i+1, arg)
		}
	}
	if f.kwokNodes > 0 && f.kwokGPUs != sim.NVL72TrayGPUs {
		return nil, cliutil.Usagef("--topology nvl72: --kwok-gpus %d: a compute tray of an NVL72 rack has %d GPUs", f.kwokGPUs, sim.NVL72TrayGPUs)
	}
	return l, nil
}
