package sim

import (
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/google/uuid"

	"github.com/gpuplane/gpuplane/internal/gpu"
)

// Profile describes a simulated node: its driver stack, its GPUs and how
// they connect. Built-in profiles come from Builtin, custom ones from Load;
// a test may also build one by hand and check it with Validate.
type Profile struct {
	// Name identifies the profile; the backend's Name is "sim:" + Name.
	Name              string
	DriverVersion     string
	CUDADriverVersion gpu.CUDAVersion
	NVMLVersion       string
	GPUs              []GPUSpec
	// Links holds the link between every pair of GPUs, indexed
	// [i][j]; the diagonal is unused. It must be symmetric.
	Links [][]gpu.Link
	// Fabric is the multi-node NVLink fabric the GPUs report; nil when
	// they have none.
	Fabric *FabricSpec
}

// GPUSpec is one simulated GPU: its identity and the parameters its
// telemetry follows.
type GPUSpec struct {
	// Model is the model key the GPU was built from (see Models), empty for
	// a GPU described field by field.
	Model             string
	Name              string
	Brand             string
	Architecture      gpu.Architecture
	ComputeCapability gpu.ComputeCapability
	MemoryMiB         uint64
	// ReservedMiB is the framebuffer the driver keeps for itself.
	ReservedMiB uint64
	PCIBusID    string
	PCIDeviceID uint32
	// NUMANode is the CPU socket the GPU hangs off, -1 when unknown.
	NUMANode int
	// MIGTable names the MIG table the GPU uses (see MIGTables);
	// empty when the GPU is not MIG-capable.
	MIGTable string
	// MIGEnabled starts the GPU with MIG mode on.
	MIGEnabled bool
	// MIGDevices are MIG devices the GPU starts with (MIGEnabled must be
	// set): one GPU instance of each named profile (e.g. "1g.10gb") with
	// one compute instance spanning it, placed where NVML would place them.
	MIGDevices []string

	// Power and thermal model: power goes from IdleWatts to TDPWatts with
	// load, the GPU temperature from IdleTempC towards MaxTempC with power.
	IdleWatts, TDPWatts float64
	IdleTempC, MaxTempC float64
	// Clocks: the SM clock idles at IdleSMClockMHz and boosts to
	// MaxSMClockMHz under load; the memory clock is fixed.
	IdleSMClockMHz, MaxSMClockMHz, MemClockMHz uint32
	// HBM says the GPU reports a memory temperature (HBM stacks have a
	// sensor, GDDR boards do not).
	HBM bool
}

// model is a GPU model that profiles may name.
type model struct {
	key      string
	mock     *nvmlGPU // go-nvml's configuration (tables.go); nil where go-nvml has none
	name     string   // identity for models without a mock
	brand    int      // NVML's nvmlBrandType_t
	arch     gpu.Architecture
	cc       gpu.ComputeCapability
	memMiB   uint64
	deviceID uint32
	// boardID, when set, is the PCI device ID the real board reports
	// where go-nvml's mock carries another: NVIDIA's mig-parted configs
	// select GPUs by it (device-filter).
	boardID  uint32
	migTable string

	idleW, tdpW             float64
	idleSM, maxSM, memClock uint32
	idleT, maxT             float64
	hbm                     bool
}

// models lists the GPU models a profile can name. Those with a go-nvml
// configuration take identity, memory and MIG tables from it; the others
// are described here. Power, clocks and temperatures are the public
// figures of each board, rounded.
var models = []model{
	{key: "A100-SXM4-40GB", mock: nvmlA100SXM440GB, migTable: "A100-40GB",
		idleW: 50, tdpW: 400, idleSM: 210, maxSM: 1410, memClock: 1215, idleT: 30, maxT: 75, hbm: true},
	{key: "A100-SXM4-80GB", mock: nvmlA100SXM480GB, migTable: "A100-80GB",
		idleW: 55, tdpW: 400, idleSM: 210, maxSM: 1410, memClock: 1593, idleT: 30, maxT: 75, hbm: true},
	{key: "A100-PCIE-40GB", mock: nvmlA100PCIE40GB, migTable: "A100-40GB",
		idleW: 35, tdpW: 250, idleSM: 210, maxSM: 1410, memClock: 1215, idleT: 32, maxT: 80, hbm: true},
	{key: "A100-PCIE-80GB", mock: nvmlA100PCIE80GB, migTable: "A100-80GB",
		idleW: 40, tdpW: 300, idleSM: 210, maxSM: 1410, memClock: 1512, idleT: 32, maxT: 80, hbm: true},
	{key: "A30-PCIE-24GB", mock: nvmlA30PCIE24GB, migTable: "A30-24GB",
		idleW: 30, tdpW: 165, idleSM: 210, maxSM: 1440, memClock: 1215, idleT: 32, maxT: 80, hbm: true},
	{key: "H100-SXM5-80GB", mock: nvmlH100SXM580GB, migTable: "H100-80GB",
		idleW: 70, tdpW: 700, idleSM: 345, maxSM: 1980, memClock: 2619, idleT: 28, maxT: 72, hbm: true},
	// go-nvml's H200 and B200 mocks report 0x2333 and 0x2B00; the boards
	// report 0x2335 (H200 SXM 141GB) and 0x2901 (B200), as mig-parted's
	// default config lists them.
	{key: "H200-SXM5-141GB", mock: nvmlH200SXM5141GB, boardID: 0x233510DE, migTable: "H200-141GB",
		idleW: 75, tdpW: 700, idleSM: 345, maxSM: 1980, memClock: 3201, idleT: 28, maxT: 72, hbm: true},
	{key: "B200-SXM5-180GB", mock: nvmlB200SXM5180GB, boardID: 0x290110DE, migTable: "B200-180GB",
		idleW: 140, tdpW: 1000, idleSM: 120, maxSM: 1965, memClock: 3996, idleT: 30, maxT: 75, hbm: true},
	// The GPUs of GB200 and GB300 NVL72 racks (fabric.go): nvidia-smi
	// shows them idling near 160 W at P0 under caps of 1200 and 1400 W.
	{key: "GB200", mock: gb200Config, migTable: "GB200-186GB",
		idleW: 160, tdpW: 1200, idleSM: 120, maxSM: 1965, memClock: 3996, idleT: 29, maxT: 75, hbm: true},
	{key: "GB300", mock: gb300Config, migTable: "GB300-278GB",
		idleW: 170, tdpW: 1400, idleSM: 120, maxSM: 1965, memClock: 3996, idleT: 29, maxT: 75, hbm: true},
	{key: "T4", name: "Tesla T4", brand: brandTesla, arch: gpu.ArchTuring, cc: gpu.ComputeCapability{Major: 7, Minor: 5},
		memMiB: 15360, deviceID: 0x1EB810DE,
		idleW: 10, tdpW: 70, idleSM: 300, maxSM: 1590, memClock: 5000, idleT: 30, maxT: 70},
	{key: "V100-SXM2-32GB", name: "Tesla V100-SXM2-32GB", brand: brandTesla, arch: gpu.ArchVolta, cc: gpu.ComputeCapability{Major: 7, Minor: 0},
		memMiB: 32768, deviceID: 0x1DB510DE,
		idleW: 40, tdpW: 300, idleSM: 135, maxSM: 1530, memClock: 877, idleT: 30, maxT: 75, hbm: true},
	{key: "A10", name: "NVIDIA A10", brand: brandNVIDIA, arch: gpu.ArchAmpere, cc: gpu.ComputeCapability{Major: 8, Minor: 6},
		memMiB: 23028, deviceID: 0x223610DE,
		idleW: 20, tdpW: 150, idleSM: 210, maxSM: 1695, memClock: 6251, idleT: 30, maxT: 78},
	{key: "L4", name: "NVIDIA L4", brand: brandNVIDIA, arch: gpu.ArchAda, cc: gpu.ComputeCapability{Major: 8, Minor: 9},
		memMiB: 23034, deviceID: 0x27B810DE,
		idleW: 16, tdpW: 72, idleSM: 210, maxSM: 2040, memClock: 6251, idleT: 30, maxT: 75},
	{key: "A10G", name: "NVIDIA A10G", brand: brandNVIDIA, arch: gpu.ArchAmpere, cc: gpu.ComputeCapability{Major: 8, Minor: 6},
		memMiB: 23028, deviceID: 0x223710DE,
		idleW: 25, tdpW: 300, idleSM: 210, maxSM: 1710, memClock: 6251, idleT: 30, maxT: 78},
	{key: "H100-PCIE-80GB", name: "NVIDIA H100 PCIe", brand: brandNVIDIA, arch: gpu.ArchHopper, cc: gpu.ComputeCapability{Major: 9, Minor: 0},
		memMiB: 81559, deviceID: 0x233110DE, migTable: "H100-80GB",
		idleW: 50, tdpW: 350, idleSM: 345, maxSM: 1755, memClock: 1593, idleT: 30, maxT: 80, hbm: true},
	{key: "L40S", name: "NVIDIA L40S", brand: brandNVIDIA, arch: gpu.ArchAda, cc: gpu.ComputeCapability{Major: 8, Minor: 9},
		memMiB: 46068, deviceID: 0x26B910DE,
		idleW: 35, tdpW: 350, idleSM: 210, maxSM: 2520, memClock: 9001, idleT: 30, maxT: 78},
}

// NVML's brand codes of the models described here.
const (
	brandTesla  = 2
	brandNVIDIA = 14
)

// migTables are the MIG tables profiles can name. The table's sizes and
// names are those of the GPU it was made for, whatever memory a profile
// gives the simulated GPU.
var migTables = map[string]*migTable{
	"A100-40GB":   nvmlA100SXM440GB.mig,
	"A100-80GB":   nvmlA100SXM480GB.mig,
	"A30-24GB":    nvmlA30PCIE24GB.mig,
	"H100-80GB":   nvmlH100SXM580GB.mig,
	"H200-141GB":  nvmlH200SXM5141GB.mig,
	"B200-180GB":  nvmlB200SXM5180GB.mig,
	"GB200-186GB": gb200Config.mig,
	"GB300-278GB": gb300Config.mig,
}

// Models lists the GPU model keys a profile file may name.
func Models() []string {
	out := make([]string, len(models))
	for i := range models {
		out[i] = models[i].key
	}
	return out
}

// MIGTables lists the MIG table names a profile file may name.
func MIGTables() []string {
	out := make([]string, 0, len(migTables))
	for k := range migTables {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func findModel(key string) (*model, bool) {
	for i := range models {
		if strings.EqualFold(models[i].key, key) {
			return &models[i], true
		}
	}
	return nil, false
}

func findMIGTable(name string) (string, bool) {
	for k := range migTables {
		if strings.EqualFold(k, name) {
			return k, true
		}
	}
	return "", false
}

// spec returns a GPUSpec of the model. Models with a go-nvml configuration
// take their identity from it.
func (m *model) spec() GPUSpec {
	s := GPUSpec{
		Model: m.key, NUMANode: 0, MIGTable: m.migTable,
		IdleWatts: m.idleW, TDPWatts: m.tdpW, IdleTempC: m.idleT, MaxTempC: m.maxT,
		IdleSMClockMHz: m.idleSM, MaxSMClockMHz: m.maxSM, MemClockMHz: m.memClock, HBM: m.hbm,
	}
	if m.mock == nil {
		s.Name, s.Brand, s.Architecture, s.ComputeCapability = m.name, gpu.BrandFromNVML(m.brand), m.arch, m.cc
		s.MemoryMiB, s.PCIDeviceID = m.memMiB, m.deviceID
	} else {
		readMock(m.mock, &s)
	}
	if m.boardID != 0 {
		s.PCIDeviceID = m.boardID
	}
	s.ReservedMiB = s.MemoryMiB / 160
	return s
}

// readMock fills the identity of s from a go-nvml GPU configuration.
func readMock(g *nvmlGPU, s *GPUSpec) {
	s.Name = g.name
	s.Brand = gpu.BrandFromNVML(g.brand)
	s.Architecture = gpu.ArchitectureFromNVML(g.arch)
	s.ComputeCapability = gpu.ComputeCapability{Major: g.ccMajor, Minor: g.ccMinor}
	s.MemoryMiB = g.memoryMiB
	s.PCIDeviceID = g.pciDeviceID
}

// dgx describes one built-in DGX system beyond what go-nvml's mock holds.
type dgx struct {
	name    string
	server  *nvmlSystem
	nvlinks int
	// busIDs are the GPUs' PCI bus numbers on the real system.
	busIDs [8]int
	// pairSwitch: GPUs 2k and 2k+1 share a PCIe switch (DGX A100).
	pairSwitch bool
	// driver overrides the mock's driver stack when it predates the GPU.
	driver string
	cuda   gpu.CUDAVersion
}

var dgxSystems = []dgx{
	// DGX A100: twelve third-generation NVLinks per GPU to six NVSwitches;
	// GPU pairs sit behind one PCIe switch.
	{name: "dgxa100", server: nvmlSystems["dgxa100"], nvlinks: 12,
		busIDs: [8]int{0x07, 0x0f, 0x47, 0x4e, 0x87, 0x90, 0xb7, 0xbd}, pairSwitch: true},
	// DGX H100/H200: eighteen fourth-generation NVLinks per GPU to four
	// NVSwitches; every GPU has its own PCIe switch.
	{name: "dgxh100", server: nvmlSystems["dgxh100"], nvlinks: 18,
		busIDs: [8]int{0x18, 0x2a, 0x3a, 0x5d, 0x9a, 0xab, 0xba, 0xdb}},
	{name: "dgxh200", server: nvmlSystems["dgxh200"], nvlinks: 18,
		busIDs: [8]int{0x18, 0x2a, 0x3a, 0x5d, 0x9a, 0xab, 0xba, 0xdb}},
	// DGX B200: eighteen fifth-generation NVLinks per GPU to two NVSwitch
	// chips. Blackwell needs an R570 driver; go-nvml's mock says 560.
	{name: "dgxb200", server: nvmlSystems["dgxb200"], nvlinks: 18,
		busIDs: [8]int{0x1b, 0x43, 0x52, 0x61, 0x9d, 0xc3, 0xd1, 0xdf},
		driver: "570.133.20", cuda: 12080},
}

// BuiltinNames lists the built-in profile names: the DGX systems, the
// NVL72 compute trays, then the servers clouds rent (cloudSystems).
func BuiltinNames() []string {
	out := make([]string, 0, len(dgxSystems)+len(nvl72Trays)+len(cloudSystems))
	for i := range dgxSystems {
		out = append(out, dgxSystems[i].name)
	}
	for i := range nvl72Trays {
		out = append(out, nvl72Trays[i].name)
	}
	for i := range cloudSystems {
		out = append(out, cloudSystems[i].name)
	}
	return out
}

// Builtin returns the built-in profile of that name.
func Builtin(name string) (*Profile, error) {
	for i := range dgxSystems {
		if dgxSystems[i].name == strings.ToLower(name) {
			return dgxSystems[i].profile()
		}
	}
	for i := range nvl72Trays {
		if nvl72Trays[i].name == strings.ToLower(name) {
			return nvl72Trays[i].profile()
		}
	}
	for i := range cloudSystems {
		if c := &cloudSystems[i]; c.name == strings.ToLower(name) {
			return Parse(strings.NewReader(c.file), "built-in "+c.name)
		}
	}
	return nil, fmt.Errorf("%w %q (built-in profiles: %s; or give the path of a profile file)",
		ErrUnknownProfile, name, strings.Join(BuiltinNames(), ", "))
}

// ErrUnknownProfile is wrapped by Load's error when the argument is neither
// a built-in profile nor an existing file: a mistake in how the caller was
// invoked rather than a broken file.
var ErrUnknownProfile = errors.New("unknown simulated profile")

func (x *dgx) profile() (*Profile, error) {
	s := x.server
	p := &Profile{Name: x.name, DriverVersion: s.driverVersion, NVMLVersion: s.nvmlVersion,
		CUDADriverVersion: gpu.CUDAVersion(s.cudaDriverVersion)}
	if x.driver != "" {
		p.DriverVersion, p.NVMLVersion, p.CUDADriverVersion = x.driver, "12."+x.driver, x.cuda
	}
	n := len(s.gpus)
	for i, g := range s.gpus {
		var spec GPUSpec
		readMock(g, &spec)
		m, ok := modelByDeviceID(spec.PCIDeviceID)
		if !ok {
			return nil, fmt.Errorf("profile %s: mock GPU %d has unknown PCI device ID %#x", x.name, i, spec.PCIDeviceID)
		}
		base := m.spec()
		base.Name, base.Brand, base.MemoryMiB = spec.Name, spec.Brand, spec.MemoryMiB
		// base keeps the board's PCI device ID where the mock's differs.
		base.NUMANode = i * 2 / n
		base.PCIBusID = fmt.Sprintf("0000:%02x:00.0", x.busIDs[i%8])
		p.GPUs = append(p.GPUs, base)
	}
	p.Links = newLinks(n)
	for i := range n {
		for j := range n {
			if i == j {
				continue
			}
			l := gpu.Link{NVLinks: x.nvlinks, PCIe: numaLevel(p.GPUs[i].NUMANode, p.GPUs[j].NUMANode)}
			if x.pairSwitch && i/2 == j/2 {
				l.PCIe = gpu.PCIeMultiple
			}
			p.Links[i][j] = l
		}
	}
	return p, p.Validate()
}

func modelByDeviceID(id uint32) (*model, bool) {
	for i := range models {
		if m := &models[i]; m.mock != nil && m.mock.pciDeviceID == id || m.mock == nil && m.deviceID == id || m.boardID != 0 && m.boardID == id {
			return m, true
		}
	}
	return nil, false
}

// numaLevel is the PCIe level between GPUs that share no switch: across
// host bridges of one CPU, or across CPUs.
func numaLevel(a, b int) gpu.PCIeLevel {
	if a == b && a >= 0 {
		return gpu.PCIeNode
	}
	return gpu.PCIeSystem
}

func newLinks(n int) [][]gpu.Link {
	l := make([][]gpu.Link, n)
	for i := range l {
		l[i] = make([]gpu.Link, n)
	}
	return l
}

// Validate checks that the profile describes a node the simulator can run.
func (p *Profile) Validate() error {
	if len(p.GPUs) == 0 {
		return fmt.Errorf("profile %s: no GPUs", p.Name)
	}
	if len(p.Links) != len(p.GPUs) {
		return fmt.Errorf("profile %s: links has %d rows for %d GPUs", p.Name, len(p.Links), len(p.GPUs))
	}
	buses := map[string]int{}
	for i := range p.GPUs {
		g := &p.GPUs[i]
		switch {
		case g.Name == "":
			return fmt.Errorf("profile %s: gpu %d: no name", p.Name, i)
		case g.MemoryMiB == 0:
			return fmt.Errorf("profile %s: gpu %d: memory must be more than 0 MiB", p.Name, i)
		case g.ReservedMiB >= g.MemoryMiB:
			return fmt.Errorf("profile %s: gpu %d: reserved memory %d MiB must be less than the total %d MiB", p.Name, i, g.ReservedMiB, g.MemoryMiB)
		case g.TDPWatts <= g.IdleWatts || g.IdleWatts < 0:
			return fmt.Errorf("profile %s: gpu %d: TDP %.0f W must exceed idle power %.0f W", p.Name, i, g.TDPWatts, g.IdleWatts)
		case g.NUMANode < -1:
			return fmt.Errorf("profile %s: gpu %d: NUMA node must be -1 (unknown) or more, got %d", p.Name, i, g.NUMANode)
		case g.PCIBusID == "":
			return fmt.Errorf("profile %s: gpu %d: no PCI bus ID", p.Name, i)
		}
		if g.MIGTable != "" {
			if _, ok := migTables[g.MIGTable]; !ok {
				return fmt.Errorf("profile %s: gpu %d: unknown MIG table %q (want one of %s)", p.Name, i, g.MIGTable, strings.Join(MIGTables(), ", "))
			}
		} else if g.MIGEnabled {
			return fmt.Errorf("profile %s: gpu %d: MIG enabled on a GPU without a MIG table", p.Name, i)
		}
		if j, dup := buses[g.PCIBusID]; dup {
			return fmt.Errorf("profile %s: gpus %d and %d share PCI bus ID %s", p.Name, j, i, g.PCIBusID)
		}
		buses[g.PCIBusID] = i
		if len(p.Links[i]) != len(p.GPUs) {
			return fmt.Errorf("profile %s: links row %d has %d entries for %d GPUs", p.Name, i, len(p.Links[i]), len(p.GPUs))
		}
	}
	if f := p.Fabric; f != nil && f.ClusterUUID != "" {
		if u, err := uuid.Parse(f.ClusterUUID); err != nil || u.String() != f.ClusterUUID {
			return fmt.Errorf("profile %s: fabric cluster UUID %q is not a lower-case canonical UUID", p.Name, f.ClusterUUID)
		}
	}
	for i := range p.Links {
		for j := range p.Links[i] {
			if i == j {
				continue
			}
			if p.Links[i][j] != p.Links[j][i] {
				return fmt.Errorf("profile %s: link %d-%d (%s) differs from %d-%d (%s)", p.Name, i, j, p.Links[i][j], j, i, p.Links[j][i])
			}
			if err := crossNUMA(p.GPUs[i].NUMANode, p.GPUs[j].NUMANode, p.Links[i][j].PCIe); err != nil {
				return fmt.Errorf("profile %s: gpus %d and %d: %w", p.Name, i, j, err)
			}
		}
	}
	return nil
}

// crossNUMA rejects a PCIe path closer than SYS between GPUs of different
// NUMA nodes: switches and host bridges belong to one CPU.
func crossNUMA(a, b int, l gpu.PCIeLevel) error {
	if a >= 0 && b >= 0 && a != b && l != gpu.PCIeSystem {
		return fmt.Errorf("on NUMA nodes %d and %d but linked by %s; GPUs under different CPUs reach each other through SYS", a, b, l)
	}
	return nil
}

// clone returns a deep copy, so a backend never shares a caller's slices.
func (p *Profile) clone() *Profile {
	c := *p
	c.GPUs = append([]GPUSpec(nil), p.GPUs...)
	if p.Fabric != nil {
		f := *p.Fabric
		c.Fabric = &f
	}
	c.Links = newLinks(len(p.Links))
	for i := range p.Links {
		copy(c.Links[i], p.Links[i])
	}
	return &c
}
