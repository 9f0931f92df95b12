package gpu

// ArchitectureFromNVML maps NVML's nvmlDeviceArchitecture_t to a family.
// Both backends use it: the real one with the driver's answer, the
// simulated one with the answer of go-nvml's mock devices.
func ArchitectureFromNVML(code int) Architecture {
	switch code {
	case 2:
		return ArchKepler
	case 3:
		return ArchMaxwell
	case 4:
		return ArchPascal
	case 5:
		return ArchVolta
	case 6:
		return ArchTuring
	case 7:
		return ArchAmpere
	case 8:
		return ArchAda
	case 9:
		return ArchHopper
	case 10:
		return ArchBlackwell
	}
	return ArchUnknown
}

// ArchitectureFromComputeCapability infers the family from the compute
// capability, for drivers too old to report the architecture.
func ArchitectureFromComputeCapability(cc ComputeCapability) Architecture {
	switch cc.Major {
	case 3:
		return ArchKepler
	case 5:
		return ArchMaxwell
	case 6:
		return ArchPascal
	case 7:
		if cc.Minor >= 5 {
			return ArchTuring
		}
		return ArchVolta
	case 8:
		if cc.Minor >= 9 {
			return ArchAda
		}
		return ArchAmpere
	case 9:
		return ArchHopper
	case 10, 12:
		return ArchBlackwell
	}
	return ArchUnknown
}

var brandNames = [...]string{
	"Unknown", "Quadro", "Tesla", "NVS", "Grid", "GeForce", "Titan",
	"NVIDIA Virtual Applications", "NVIDIA Virtual PC", "NVIDIA Virtual Compute Server",
	"NVIDIA RTX Virtual Workstation", "NVIDIA Cloud Gaming", "Quadro RTX", "NVIDIA RTX",
	"NVIDIA", "GeForce RTX", "Titan RTX",
}

// BrandFromNVML names NVML's nvmlBrandType_t.
func BrandFromNVML(code int) string {
	if code < 0 || code >= len(brandNames) {
		return brandNames[0]
	}
	return brandNames[code]
}
