package gpu

import (
	"fmt"
	"strings"
)

// PCIeLevel is the closest common PCIe ancestor of two GPUs, in NVML's
// terms (nvmlGpuTopologyLevel_t). Lower is closer.
type PCIeLevel int

// PCIe levels, closest first. The comments give the nvidia-smi topo -m code.
const (
	PCIeInternal   PCIeLevel = iota // same board (multi-GPU board)
	PCIeSingle                      // PIX: at most one PCIe switch
	PCIeMultiple                    // PXB: several PCIe switches, no host bridge
	PCIeHostBridge                  // PHB: through a PCIe host bridge
	PCIeNode                        // NODE: host bridges within one NUMA node
	PCIeSystem                      // SYS: across NUMA nodes (CPU interconnect)
)

var pcieCodes = [...]string{"BRD", "PIX", "PXB", "PHB", "NODE", "SYS"}

func (l PCIeLevel) String() string {
	if l < 0 || int(l) >= len(pcieCodes) {
		return "UNK"
	}
	return pcieCodes[l]
}

// ParsePCIeLevel reads an nvidia-smi topo -m code (PIX, PXB, PHB, NODE, SYS,
// or BRD for same board).
func ParsePCIeLevel(s string) (PCIeLevel, error) {
	for i, c := range pcieCodes {
		if strings.EqualFold(c, s) {
			return PCIeLevel(i), nil
		}
	}
	return 0, fmt.Errorf("unknown PCIe topology level %q (want one of %s)", s, strings.Join(pcieCodes[:], ", "))
}

// Link is how two GPUs reach each other.
type Link struct {
	// NVLinks is the number of NVLink connections between the pair (directly
	// or through NVSwitch), zero when they talk over PCIe only.
	NVLinks int `json:"nvlinks"`
	// PCIe is the closest common PCIe ancestor.
	PCIe PCIeLevel `json:"pcie"`
}

// String renders the link as nvidia-smi topo -m does: NV<n> when NVLink
// connects the pair, else the PCIe code.
func (l Link) String() string {
	if l.NVLinks > 0 {
		return fmt.Sprintf("NV%d", l.NVLinks)
	}
	return l.PCIe.String()
}

// Score orders links by bandwidth, higher is better: every NVLink beats any
// PCIe path, and closer PCIe beats farther.
func (l Link) Score() int {
	if l.NVLinks > 0 {
		return 100 + l.NVLinks
	}
	return int(PCIeSystem-l.PCIe) + 1
}

// Topology is the pairwise connectivity between a node's GPUs, indexed by
// GPU index. The zero value has no GPUs.
type Topology struct {
	n     int
	links []Link
	known []bool
}

// NewTopology returns a topology for n GPUs with every pair unknown.
func NewTopology(n int) *Topology {
	return &Topology{n: n, links: make([]Link, n*n), known: make([]bool, n*n)}
}

// Len is the number of GPUs.
func (t *Topology) Len() int { return t.n }

// Set records the link between GPUs i and j (both directions).
func (t *Topology) Set(i, j int, l Link) {
	t.links[i*t.n+j], t.links[j*t.n+i] = l, l
	t.known[i*t.n+j], t.known[j*t.n+i] = true, true
}

// Between returns the link between GPUs i and j and whether it is known. A
// GPU whose topology could not be read has no known links.
func (t *Topology) Between(i, j int) (Link, bool) {
	if i < 0 || j < 0 || i >= t.n || j >= t.n || i == j {
		return Link{}, false
	}
	return t.links[i*t.n+j], t.known[i*t.n+j]
}

// Matrix renders the topology as the GPU-to-GPU part of nvidia-smi topo -m.
func (t *Topology) Matrix() [][]string {
	m := make([][]string, t.n)
	for i := range m {
		m[i] = make([]string, t.n)
		for j := range m[i] {
			switch l, ok := t.Between(i, j); {
			case i == j:
				m[i][j] = "X"
			case !ok:
				m[i][j] = "?"
			default:
				m[i][j] = l.String()
			}
		}
	}
	return m
}
