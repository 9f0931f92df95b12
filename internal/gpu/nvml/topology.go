package nvml

import (
	"context"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpuplane/gpuplane/internal/gpu"
)

// nvlinkPeers counts a GPU's active NVLinks by the PCI bus ID of the device
// at their far end, and separately the links that end at an NVSwitch.
type nvlinkPeers struct {
	direct  map[string]int
	switch_ int
}

func readNVLinks(h gonvml.Device) (nvlinkPeers, bool) {
	p := nvlinkPeers{direct: map[string]int{}}
	anyRead := false
	for link := range gonvml.NVLINK_MAX_LINKS {
		state, ret := h.GetNvLinkState(link)
		if ret != gonvml.SUCCESS {
			// Links past the GPU's last answer INVALID_ARGUMENT or
			// NOT_SUPPORTED; a GPU without NVLink answers so for link 0.
			continue
		}
		anyRead = true
		if state != gonvml.FEATURE_ENABLED {
			continue
		}
		if typ, ret := h.GetNvLinkRemoteDeviceType(link); ret == gonvml.SUCCESS && typ == gonvml.NVLINK_DEVICE_TYPE_SWITCH {
			p.switch_++
			continue
		}
		remote, ret := h.GetNvLinkRemotePciInfo(link)
		if ret != gonvml.SUCCESS {
			continue
		}
		p.direct[busID(remote)]++
	}
	return p, anyRead
}

var pcieLevels = map[gonvml.GpuTopologyLevel]gpu.PCIeLevel{
	gonvml.TOPOLOGY_INTERNAL:   gpu.PCIeInternal,
	gonvml.TOPOLOGY_SINGLE:     gpu.PCIeSingle,
	gonvml.TOPOLOGY_MULTIPLE:   gpu.PCIeMultiple,
	gonvml.TOPOLOGY_HOSTBRIDGE: gpu.PCIeHostBridge,
	gonvml.TOPOLOGY_NODE:       gpu.PCIeNode,
	gonvml.TOPOLOGY_SYSTEM:     gpu.PCIeSystem,
}

// Topology implements gpu.Inventory. NVLink counts come from each GPU's
// links: links to the other GPU directly, plus, when both reach NVSwitches,
// the smaller of their switch link counts (nvidia-smi shows NV18 between
// any two H100s of a DGX). The PCIe level comes from the common ancestor.
// A GPU that cannot be read has unknown links; the rest stay usable.
func (b *Backend) Topology(context.Context) (*gpu.Topology, error) {
	n, err := b.checkOpen()
	if err != nil {
		return nil, err
	}
	t := gpu.NewTopology(n)
	handles := make([]gonvml.Device, n)
	buses := make([]string, n)
	peers := make([]nvlinkPeers, n)
	for i := range n {
		h, err := b.handle(i)
		if err != nil {
			continue
		}
		pci, ret := h.GetPciInfo()
		if ret != gonvml.SUCCESS {
			continue
		}
		handles[i], buses[i] = h, busID(pci)
		peers[i], _ = readNVLinks(h)
	}
	for i := range n {
		for j := i + 1; j < n; j++ {
			if handles[i] == nil || handles[j] == nil {
				continue
			}
			level, ret := handles[i].GetTopologyCommonAncestor(handles[j])
			if ret != gonvml.SUCCESS {
				continue
			}
			l := gpu.Link{PCIe: pcieLevels[level], NVLinks: peers[i].direct[buses[j]]}
			if peers[i].switch_ > 0 && peers[j].switch_ > 0 {
				l.NVLinks += min(peers[i].switch_, peers[j].switch_)
			}
			t.Set(i, j, l)
		}
	}
	return t, nil
}
