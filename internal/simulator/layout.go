package simulator

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/gpuplane/gpuplane/internal/scheduler/model"
)

// The node label keys of the network levels the simulator lays nodes out
// in, widest first after the zone: a block (one spine's racks), a rack
// (one leaf switch's nodes), and the node itself.
const (
	BlockLabel = "gpuplane.io/block"
	RackLabel  = "gpuplane.io/rack"
	// CliqueLabel is NVIDIA GPU Feature Discovery's NVLink domain label.
	CliqueLabel = "nvidia.com/gpu.clique"
)

// Bounds on the topology a trace may state.
const (
	// MaxNodeDomains is the most topology labels one node may carry.
	MaxNodeDomains = 16
	// maxDomainKey and maxDomainValue bound a label's key (a prefix of
	// 253 and a name of 63, Kubernetes' rule) and value.
	maxDomainKey   = 317
	maxDomainValue = 63
)

// checkDomains reports the first topology label of d that is empty or too
// long, or d having too many; field names the map for the message.
func checkDomains(field string, d map[string]string) error {
	if len(d) > MaxNodeDomains {
		return fmt.Errorf("%s: at most %d topology labels, got %d", field, MaxNodeDomains, len(d))
	}
	for _, k := range slices.Sorted(maps.Keys(d)) {
		v := d[k]
		switch {
		case k == "" || len(k) > maxDomainKey:
			return fmt.Errorf("%s: key %.40q: must be a label key of 1 to %d characters", field, k, maxDomainKey)
		case v == "" || len(v) > maxDomainValue:
			return fmt.Errorf("%s[%s]: value %.40q: must be 1 to %d characters", field, k, v, maxDomainValue)
		}
	}
	return nil
}

// domainOf is node n's domain of level key: its Domains value, else its
// label; "" when it has none (the node belongs to no domain of the
// level), as model.GangTopology reads it.
func domainOf(n *model.Node, key string) string {
	if v, ok := n.Domains[key]; ok {
		return v
	}
	return n.Labels[key]
}

// Layout lays a trace's nodes out in racks and blocks: NodesPerRack nodes
// share a rack (RackLabel) and RacksPerBlock racks a block (BlockLabel).
// Nodes are grouped by GPU model and count first, in trace order within a
// group, as a data centre racks alike machines together; a group's last
// rack may be partly filled, and the next group starts a new rack in a new
// block. Without RacksPerBlock, each group is one block.
type Layout struct {
	NodesPerRack  int
	RacksPerBlock int
}

// NoLayout keeps the trace's own topology.
var NoLayout = Layout{}

// maxLayoutUnit bounds NodesPerRack and RacksPerBlock.
const maxLayoutUnit = 10_000

// ParseLayout parses "nodes-per-rack=N,racks-per-block=M" (either may be
// left out: no racks, or one block per rack group); "" is NoLayout.
func ParseLayout(s string) (Layout, error) {
	var l Layout
	if strings.TrimSpace(s) == "" {
		return l, nil
	}
	for part := range strings.SplitSeq(s, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(part), "=")
		n, err := strconv.Atoi(v)
		if !ok || err != nil || n < 1 || n > maxLayoutUnit {
			return l, fmt.Errorf("%q: want KEY=N with N in 1..%d (keys: nodes-per-rack, racks-per-block)", part, maxLayoutUnit)
		}
		switch k {
		case "nodes-per-rack":
			l.NodesPerRack = n
		case "racks-per-block":
			l.RacksPerBlock = n
		default:
			return l, fmt.Errorf("%q: unknown key %q (keys: nodes-per-rack, racks-per-block)", part, k)
		}
	}
	if l.NodesPerRack == 0 {
		return l, fmt.Errorf("%q: nodes-per-rack is required", s)
	}
	return l, nil
}

// String is the layout as ParseLayout reads it.
func (l Layout) String() string {
	if l.NodesPerRack == 0 {
		return ""
	}
	s := fmt.Sprintf("nodes-per-rack=%d", l.NodesPerRack)
	if l.RacksPerBlock > 0 {
		s += fmt.Sprintf(",racks-per-block=%d", l.RacksPerBlock)
	}
	return s
}

// Apply labels tr's nodes with their rack and block (Node.Domains, so they
// do not split nodes into classes) and returns how many racks and blocks
// it made. A node keeps any other topology label it has.
func (l Layout) Apply(tr *Trace) (racks, blocks int) {
	if l.NodesPerRack == 0 {
		return 0, 0
	}
	type group struct {
		model string
		gpus  int
	}
	keyOf := func(n *model.Node) group {
		g := group{gpus: len(n.GPUs)}
		if len(n.GPUs) > 0 {
			g.model = n.GPUs[0].Model
		}
		return g
	}
	order := make([]int, len(tr.Nodes))
	for i := range order {
		order[i] = i
	}
	// Larger machines first, then by model; stable, so trace order holds
	// within a group.
	slices.SortStableFunc(order, func(a, b int) int {
		ga, gb := keyOf(&tr.Nodes[a]), keyOf(&tr.Nodes[b])
		return cmp.Or(cmp.Compare(gb.gpus, ga.gpus), cmp.Compare(ga.model, gb.model))
	})
	inRack, inBlock := 0, 0
	var last group
	for k, i := range order {
		n := &tr.Nodes[i]
		g := keyOf(n)
		if k == 0 || g != last || inRack == l.NodesPerRack {
			racks++
			inRack = 0
			if k == 0 || g != last || l.RacksPerBlock > 0 && inBlock == l.RacksPerBlock {
				blocks++
				inBlock = 0
			}
			inBlock++
		}
		last = g
		inRack++
		d := make(map[string]string, len(n.Domains)+2)
		for key, v := range n.Domains {
			d[key] = v
		}
		d[RackLabel] = fmt.Sprintf("r%d", racks)
		d[BlockLabel] = fmt.Sprintf("b%d", blocks)
		n.Domains = d
	}
	tr.Source += " (" + l.String() + ")"
	return racks, blocks
}
