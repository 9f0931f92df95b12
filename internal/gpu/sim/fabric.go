package sim

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/google/uuid"

	"github.com/gpuplane/gpuplane/internal/gpu"
)

// FabricSpec is the multi-node NVLink fabric a simulated node's GPUs report
// (NVML's GPU fabric info): every GPU of the node reports the same one. A
// profile without a FabricSpec has GPUs without a fabric, which answer
// "not supported", as GPUs outside an NVL72 rack do.
type FabricSpec struct {
	// ClusterUUID names the fabric, one NVLink domain (an NVL72 rack):
	// a canonical lower-case UUID, or empty for the all-zero UUID a GPU
	// reports before it registers.
	ClusterUUID string
	// CliqueID names the partition of the fabric the GPUs are in.
	CliqueID uint32
	// State is how far registration came; FabricCompleted on a settled
	// rack.
	State gpu.FabricState
}

// FabricClusterUUID is the cluster UUID a simulated NVLink domain of that
// name reports: a name-based UUID, so that every tray given the same
// domain name reports the same fabric.
func FabricClusterUUID(domain string) string {
	return uuid.NewSHA1(uuidSpace, []byte("fabric/"+domain)).String()
}

// ParseFabric reads a fabric as GPU Feature Discovery writes it into the
// nvidia.com/gpu.clique label, "<cluster UUID>.<clique ID>": the form of
// the agent's --simulate-fabric. The fabric is registered (completed).
func ParseFabric(s string) (FabricSpec, error) {
	cluster, clique, ok := strings.Cut(strings.TrimSpace(s), ".")
	if !ok {
		return FabricSpec{}, fmt.Errorf("fabric %q: want CLUSTER_UUID.CLIQUE_ID, e.g. 7b968a6d-c8aa-45e1-9e07-e1e51be99c31.1", s)
	}
	u, err := uuid.Parse(cluster)
	if err != nil || len(cluster) != 36 {
		return FabricSpec{}, fmt.Errorf("fabric %q: the cluster UUID %q is not a UUID in its canonical form", s, cluster)
	}
	if u == uuid.Nil {
		return FabricSpec{}, fmt.Errorf("fabric %q: the cluster UUID is all zeros, which names no fabric", s)
	}
	id, err := strconv.ParseUint(clique, 10, 32)
	if err != nil {
		return FabricSpec{}, fmt.Errorf("fabric %q: the clique ID %q is not a number from 0 to %d", s, clique, uint32(math.MaxUint32))
	}
	return FabricSpec{ClusterUUID: u.String(), CliqueID: uint32(id), State: gpu.FabricCompleted}, nil
}

// String renders f as the nvidia.com/gpu.clique label shows a registered
// fabric.
func (f FabricSpec) String() string { return fmt.Sprintf("%s.%d", f.ClusterUUID, f.CliqueID) }

var _ gpu.FabricReader = (*Backend)(nil)

// GPUFabric implements gpu.FabricReader: the profile's fabric, or
// gpu.ErrNotSupported for a node without one.
func (b *Backend) GPUFabric(_ context.Context, index int) (gpu.Fabric, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, err := b.gpuLocked(OpGPUFabric, index); err != nil {
		return gpu.Fabric{}, err
	}
	f := b.prof.Fabric
	if f == nil || f.State == gpu.FabricNotSupported {
		return gpu.Fabric{}, fmt.Errorf("gpu %d: %s: %w: profile %s has no multi-node NVLink fabric", index, OpGPUFabric.doing(), gpu.ErrNotSupported, b.prof.Name)
	}
	return gpu.Fabric{ClusterUUID: f.ClusterUUID, CliqueID: f.CliqueID, State: f.State}, nil
}

// withFabric returns a copy of p whose GPUs report fabric. Only a profile
// whose GPUs sit on a multi-node NVLink fabric (an NVL72 tray) takes one.
func withFabric(p *Profile, f FabricSpec) (*Profile, error) {
	if p.Fabric == nil {
		return nil, fmt.Errorf("profile %s: its GPUs have no multi-node NVLink fabric to report %s on (the NVL72 trays gb200-nvl72 and gb300-nvl72 have one)", p.Name, f)
	}
	c := p.clone()
	c.Fabric = &f
	return c, nil
}

// The Grace Blackwell GPUs of NVL72 racks. go-nvml has no tables for them;
// their MIG tables are Blackwell's (go-nvml's B200: seven compute and
// eight memory slices, the same placements, SM and engine counts) over
// each GPU's own memory, which gives the profile names NVIDIA's mig-parted
// configuration lists: 1g.23gb, 1g.47gb, 2g.47gb, 3g.93gb, 4g.93gb and
// 7g.186gb on a GB200; 1g.35gb, 1g.70gb, 2g.70gb, 3g.139gb, 4g.139gb and
// 7g.278gb on a GB300. Names, memory (nvidia-smi's 189471 and 284208 MiB),
// compute capabilities (10.0 and 10.3) and PCI device IDs (0x2941, 0x31C2)
// are those of the real GPUs.
var (
	gb200Config = graceBlackwell("NVIDIA GB200", 189471, 0, 0x294110DE)
	gb300Config = graceBlackwell("NVIDIA GB300", 284208, 3, 0x31C210DE)
)

func graceBlackwell(name string, memMiB uint64, ccMinor int, pciID uint32) *nvmlGPU {
	base := nvmlB200SXM5180GB
	c := *base
	c.name, c.memoryMiB, c.ccMinor, c.pciDeviceID = name, memMiB, ccMinor, pciID
	c.mig = base.mig.clone()
	c.mig.memoryMiB = memMiB
	for i := range c.mig.profiles {
		p := &c.mig.profiles[i]
		// The profile's memory in eighths of the GPU's, then the same
		// eighths of this GPU's memory.
		eighths := uint64(math.Round(float64(p.memoryMiB) * 8 / float64(base.memoryMiB)))
		p.memoryMiB = memMiB * eighths / 8
	}
	return &c
}

// nvl72Tray describes a compute tray of an NVL72 rack: two Grace CPUs with
// two Blackwell GPUs each, the four GPUs on the rack's NVLink fabric (18
// NVLinks each to the rack's NVLink switches, NV18 between any two), each
// GPU in its own PCI domain.
type nvl72Tray struct {
	name   string
	model  string
	busIDs [4]string
	driver string
	cuda   gpu.CUDAVersion
}

var nvl72Trays = []nvl72Tray{
	{name: "gb200-nvl72", model: "GB200", driver: "580.126.09", cuda: 13000,
		busIDs: [4]string{"0008:01:00.0", "0009:01:00.0", "0018:01:00.0", "0019:01:00.0"}},
	{name: "gb300-nvl72", model: "GB300", driver: "580.82.07", cuda: 13000,
		busIDs: [4]string{"0008:06:00.0", "0009:06:00.0", "0018:06:00.0", "0019:06:00.0"}},
}

// NVL72TrayGPUs and NVL72RackTrays are the shape of an NVL72 rack: 18
// compute trays of 4 GPUs, 72 GPUs on one NVLink fabric.
const (
	NVL72TrayGPUs  = 4
	NVL72RackTrays = 18
)

// profile builds the tray. Its GPUs report a registered fabric named after
// the profile, clique 1, so that trays started from the built-in profile
// alone form one rack; --simulate-fabric names another.
func (x *nvl72Tray) profile() (*Profile, error) {
	m, ok := findModel(x.model)
	if !ok {
		return nil, fmt.Errorf("profile %s: unknown model %s", x.name, x.model)
	}
	p := &Profile{Name: x.name, DriverVersion: x.driver, NVMLVersion: "13." + x.driver, CUDADriverVersion: x.cuda,
		Fabric: &FabricSpec{ClusterUUID: FabricClusterUUID(x.name), CliqueID: 1, State: gpu.FabricCompleted}}
	for i := range NVL72TrayGPUs {
		s := m.spec()
		s.NUMANode = i / 2
		s.PCIBusID = x.busIDs[i]
		p.GPUs = append(p.GPUs, s)
	}
	p.Links = newLinks(NVL72TrayGPUs)
	for i := range NVL72TrayGPUs {
		for j := range NVL72TrayGPUs {
			if i != j {
				p.Links[i][j] = gpu.Link{NVLinks: 18, PCIe: numaLevel(p.GPUs[i].NUMANode, p.GPUs[j].NUMANode)}
			}
		}
	}
	return p, p.Validate()
}
