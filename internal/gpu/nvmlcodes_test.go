package gpu

import "testing"

func TestArchitectureMappingsAgree(t *testing.T) {
	tests := []struct {
		name string
		code int
		cc   ComputeCapability
		want Architecture
	}{
		{"volta", 5, ComputeCapability{7, 0}, ArchVolta},
		{"turing", 6, ComputeCapability{7, 5}, ArchTuring},
		{"ampere", 7, ComputeCapability{8, 0}, ArchAmpere},
		{"ada", 8, ComputeCapability{8, 9}, ArchAda},
		{"hopper", 9, ComputeCapability{9, 0}, ArchHopper},
		{"blackwell", 10, ComputeCapability{10, 0}, ArchBlackwell},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := ArchitectureFromNVML(tt.code); got != tt.want {
				t.Errorf("ArchitectureFromNVML(%d) = %s, want %s", tt.code, got, tt.want)
			}
			if got := ArchitectureFromComputeCapability(tt.cc); got != tt.want {
				t.Errorf("ArchitectureFromComputeCapability(%s) = %s, want %s", tt.cc, got, tt.want)
			}
			if got, err := ParseArchitecture(string(tt.want)); err != nil || got != tt.want {
				t.Errorf("ParseArchitecture(%s) = %s, %v", tt.want, got, err)
			}
		})
	}
	if _, err := ParseArchitecture("fermi"); err == nil {
		t.Error("ParseArchitecture(fermi) succeeded, want an error listing the families")
	}
	if got := BrandFromNVML(14); got != "NVIDIA" {
		t.Errorf("BrandFromNVML(14) = %q", got)
	}
	if got := BrandFromNVML(99); got != "Unknown" {
		t.Errorf("BrandFromNVML(99) = %q", got)
	}
}
