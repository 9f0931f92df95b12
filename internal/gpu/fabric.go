package gpu

import (
	"context"
	"fmt"
)

// FabricState is how far a GPU has come in joining a multi-node NVLink
// fabric (the NVLink domain of a GB200 or GB300 NVL72 rack), as NVML's
// nvmlGpuFabricState_t says it.
type FabricState int

// Fabric states, in NVML's order.
const (
	// FabricNotSupported: the GPU has no multi-node NVLink fabric.
	FabricNotSupported FabricState = iota
	// FabricNotStarted: the fabric manager has not begun registering it.
	FabricNotStarted
	// FabricInProgress: registration is under way.
	FabricInProgress
	// FabricCompleted: the GPU is registered; ClusterUUID and CliqueID
	// are final when Status is nil.
	FabricCompleted
)

func (s FabricState) String() string {
	switch s {
	case FabricNotSupported:
		return "not-supported"
	case FabricNotStarted:
		return "not-started"
	case FabricInProgress:
		return "in-progress"
	case FabricCompleted:
		return "completed"
	}
	return fmt.Sprintf("FabricState(%d)", int(s))
}

// Fabric is what a GPU says of the multi-node NVLink fabric it belongs to.
type Fabric struct {
	// ClusterUUID names the fabric (one NVLink domain), as a lower-case
	// canonical UUID; empty when the driver reports all zeros.
	ClusterUUID string `json:"clusterUUID,omitempty"`
	// CliqueID names the partition of the fabric the GPU is in.
	CliqueID uint32      `json:"cliqueID"`
	State    FabricState `json:"state"`
	// Status is why registration failed, nil when it did not.
	Status error `json:"-"`
}

// Attached reports whether the GPU is a settled member of a fabric: its
// registration completed without error under a non-zero cluster UUID.
// GPU Feature Discovery counts only such GPUs.
func (f Fabric) Attached() bool {
	return f.State == FabricCompleted && f.Status == nil && f.ClusterUUID != ""
}

// FabricReader is an optional capability of a Backend: reading the
// multi-node NVLink fabric a GPU belongs to (NVML's GPU fabric info).
// Detect it with a type assertion.
type FabricReader interface {
	// GPUFabric returns the fabric of the GPU at index. It fails with an
	// error wrapping ErrNotSupported when the GPU or the driver knows no
	// fabric (the call is missing from older drivers), which callers
	// treat as a GPU without one.
	GPUFabric(ctx context.Context, index int) (Fabric, error)
}
