package gpu

import (
	"context"
	"fmt"
)

// Null is a backend with no GPUs. Agents run on it when NVML cannot start
// and the operator set failOnInitError: false: the node then advertises
// zero GPUs, and Reason says why.
type Null struct {
	Reason string
}

var _ Backend = (*Null)(nil)

// Name implements Backend.
func (n *Null) Name() string { return "null" }

// Close implements Backend.
func (n *Null) Close() error { return nil }

// System implements Inventory.
func (n *Null) System(context.Context) (SystemInfo, error) { return SystemInfo{}, nil }

// Devices implements Inventory: there are none.
func (n *Null) Devices(context.Context) ([]Device, error) { return nil, nil }

// Topology implements Inventory.
func (n *Null) Topology(context.Context) (*Topology, error) { return NewTopology(0), nil }

func (n *Null) noGPU(index int) error {
	return fmt.Errorf("gpu %d: %w (no GPUs: %s)", index, ErrNotFound, n.Reason)
}

// Sample implements Telemetry.
func (n *Null) Sample(_ context.Context, index int, _ *Sample) error { return n.noGPU(index) }

// Processes implements Telemetry.
func (n *Null) Processes(_ context.Context, index int, _ []Process) ([]Process, error) {
	return nil, n.noGPU(index)
}

// Subscribe implements Events with a subscription that never fires.
func (n *Null) Subscribe(ctx context.Context) (Subscription, error) {
	ch := make(chan Event)
	ctx, cancel := context.WithCancel(ctx)
	go func() { <-ctx.Done(); close(ch) }()
	return &nullSub{ch: ch, cancel: cancel}, nil
}

type nullSub struct {
	ch     chan Event
	cancel context.CancelFunc
}

func (s *nullSub) Events() <-chan Event          { return s.ch }
func (s *nullSub) Unmonitored() map[string]error { return nil }
func (s *nullSub) Close() error                  { s.cancel(); return nil }

// SetMIGMode implements MIGManager.
func (n *Null) SetMIGMode(_ context.Context, index int, _ bool) error { return n.noGPU(index) }

// MIGProfiles implements MIGManager.
func (n *Null) MIGProfiles(_ context.Context, index int) ([]MIGProfile, error) {
	return nil, n.noGPU(index)
}

// CreateGPUInstance implements MIGManager.
func (n *Null) CreateGPUInstance(_ context.Context, index int, _ string, _ *Placement) (GPUInstance, error) {
	return GPUInstance{}, n.noGPU(index)
}

// CreateComputeInstance implements MIGManager.
func (n *Null) CreateComputeInstance(_ context.Context, index, _ int, _ string) (ComputeInstance, error) {
	return ComputeInstance{}, n.noGPU(index)
}

// DestroyComputeInstance implements MIGManager.
func (n *Null) DestroyComputeInstance(_ context.Context, index, _, _ int) error {
	return n.noGPU(index)
}

// DestroyGPUInstance implements MIGManager.
func (n *Null) DestroyGPUInstance(_ context.Context, index, _ int) error { return n.noGPU(index) }

// GPUInstances implements MIGManager.
func (n *Null) GPUInstances(_ context.Context, index int) ([]GPUInstance, error) {
	return nil, n.noGPU(index)
}
