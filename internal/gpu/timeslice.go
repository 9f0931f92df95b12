package gpu

import (
	"context"
	"fmt"
)

// TimeSlice is the length of the slice a GPU gives each process in turn
// when processes share it by time-slicing (the compute policy nvidia-smi
// sets with --set-timeslice).
type TimeSlice int

// Time slices, in NVIDIA's order (0 to 3).
const (
	TimeSliceDefault TimeSlice = iota
	TimeSliceShort
	TimeSliceMedium
	TimeSliceLong
)

func (t TimeSlice) String() string {
	switch t {
	case TimeSliceDefault:
		return "Default"
	case TimeSliceShort:
		return "Short"
	case TimeSliceMedium:
		return "Medium"
	case TimeSliceLong:
		return "Long"
	}
	return fmt.Sprintf("TimeSlice(%d)", int(t))
}

// Valid reports whether t is one of the four time slices.
func (t TimeSlice) Valid() bool { return t >= TimeSliceDefault && t <= TimeSliceLong }

// TimeSlicer is an optional capability of a Backend: setting the time
// slice of one GPU, as the DRA driver does for a claim configured for
// time-slicing. Detect it with a type assertion.
type TimeSlicer interface {
	// SetTimeSlice puts the GPU at index in the default compute mode
	// (several processes at once) with the given time slice. It fails with
	// an error wrapping ErrNotSupported when the GPU or driver cannot.
	SetTimeSlice(ctx context.Context, index int, t TimeSlice) error
	// TimeSlice returns the GPU's time slice.
	TimeSlice(ctx context.Context, index int) (TimeSlice, error)
}
