package sim

// The GPU and MIG tables of the built-in models, in the package's own
// types. tables_nvml.go holds the values of go-nvml's mock DGX servers,
// generated from them (internal/gentables): reading them at build time
// rather than linking go-nvml keeps the simulator, and so the CLI, free of
// go-nvml's cgo bindings. A test regenerates the file and fails when it
// differs from go-nvml's mocks.

//go:generate go run ./internal/gentables -o tables_nvml.go

// nvmlGPU is a GPU configuration as NVML reports it.
type nvmlGPU struct {
	name string
	// brand and arch are NVML's nvmlBrandType_t and
	// nvmlDeviceArchitecture_t codes.
	brand, arch      int
	ccMajor, ccMinor int
	memoryMiB        uint64
	pciDeviceID      uint32
	// mig is nil for a GPU without MIG.
	mig *migTable
}

// migTable is what NVML lists of a MIG-capable GPU: its GPU instance
// profiles, their placements and the compute instance profiles inside
// each.
type migTable struct {
	// memoryMiB is the memory of the GPU the table was made for.
	memoryMiB uint64
	// profiles are ordered by NVML profile ID.
	profiles []giTable
}

// giTable is one GPU instance profile (nvmlGpuInstanceProfileInfo_t with
// the placements NVML lists for it).
type giTable struct {
	id, slices, instances, sms                   int
	copyEngines, decoders, encoders, jpegs, ofas int
	memoryMiB                                    uint64
	placements                                   []tablePlacement
	// cis are the compute instance profiles inside the GPU instance,
	// ordered by ID.
	cis []ciTable
}

// ciTable is one compute instance profile.
type ciTable struct {
	id, slices, instances, sms int
	placements                 []tablePlacement
}

// tablePlacement is an NVML placement: a start and a size in slices.
type tablePlacement struct{ start, size int }

// nvmlSystem is a DGX system as go-nvml's mock server reports it.
type nvmlSystem struct {
	driverVersion, nvmlVersion string
	cudaDriverVersion          int
	gpus                       []*nvmlGPU
}

// giProfileOneSlice is NVML_GPU_INSTANCE_PROFILE_1_SLICE.
const giProfileOneSlice = 0

// profile returns the GPU instance profile of that NVML ID.
func (t *migTable) profile(id int) (giTable, bool) {
	for _, p := range t.profiles {
		if p.id == id {
			return p, true
		}
	}
	return giTable{}, false
}

// clone returns a deep copy of t, so that a derived table can change its
// profiles.
func (t *migTable) clone() *migTable {
	c := &migTable{memoryMiB: t.memoryMiB, profiles: make([]giTable, len(t.profiles))}
	for i, p := range t.profiles {
		p.placements = append([]tablePlacement(nil), p.placements...)
		p.cis = append([]ciTable(nil), p.cis...)
		c.profiles[i] = p
	}
	return c
}
