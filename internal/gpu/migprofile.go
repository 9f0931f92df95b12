package gpu

import (
	"fmt"
	"math"
)

// NVML GPU instance profile IDs that change a profile's name
// (nvmlGpuInstanceProfile_t). They are repeated here so that naming does not
// depend on a backend.
const (
	giProfile1SliceRev1  = 7  // one slice with all media engines: "+me"
	giProfile2SliceRev1  = 8  // two slices with all media engines: "+me"
	giProfile1SliceGfx   = 10 // graphics-capable: "+gfx"
	giProfile2SliceGfx   = 11
	giProfile4SliceGfx   = 12
	giProfile1SliceNoME  = 13 // no media engines: "-me"
	giProfile2SliceNoME  = 14
	giProfile1SliceAllME = 15 // all media engines shared: "+me.all"
	giProfile2SliceAllME = 16
	giProfile3SliceGfx   = 17
)

// MIGMemoryGB is the memory size a MIG profile's name shows. The driver
// reports a little less than the nominal size (4864 MiB for a "5gb" slice of
// an A100 40GB), so the size is taken as the profile's fraction of the whole
// GPU, rounded up to eighths, times the GPU's size in whole GB.
//
// A profile a few percent of an eighth above a whole eighth counts as that
// eighth: tables that give nominal sizes in GiB against a total in GB (an
// H200's 1-slice profile as 18432 of 144384 MiB) would otherwise name it
// after the next eighth ("1g.35gb" instead of "1g.18gb"). Sizes the driver
// reports are below nominal and never meet this tolerance.
func MIGMemoryGB(profileMiB, totalMiB uint64) uint64 {
	if totalMiB == 0 {
		return (profileMiB + 1023) / 1024
	}
	const tolerance = 0.05 // of an eighth
	frac := float64(profileMiB) / float64(totalMiB)
	frac = math.Ceil(frac*8-tolerance) / 8
	totalGB := float64((totalMiB + 1023) / 1024)
	return uint64(math.Round(frac * totalGB))
}

// MIGProfileName is the canonical name of a GPU instance profile, such as
// "1g.10gb" or "1g.10gb+me".
func MIGProfileName(profileID, sliceCount int, profileMiB, totalMiB uint64) string {
	suffix := ""
	switch profileID {
	case giProfile1SliceRev1, giProfile2SliceRev1:
		suffix = "+me"
	case giProfile1SliceGfx, giProfile2SliceGfx, giProfile4SliceGfx, giProfile3SliceGfx:
		suffix = "+gfx"
	case giProfile1SliceNoME, giProfile2SliceNoME:
		suffix = "-me"
	case giProfile1SliceAllME, giProfile2SliceAllME:
		suffix = "+me.all"
	}
	return fmt.Sprintf("%dg.%dgb%s", sliceCount, MIGMemoryGB(profileMiB, totalMiB), suffix)
}

// MIGDeviceName is the name of a MIG device: the GPU instance profile's name
// when the compute instance spans the GPU instance, else "<c>c.<profile>".
func MIGDeviceName(giProfileName string, giSlices, ciSlices int) string {
	if ciSlices <= 0 || ciSlices >= giSlices {
		return giProfileName
	}
	return fmt.Sprintf("%dc.%s", ciSlices, giProfileName)
}
