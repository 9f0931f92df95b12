// Package sim is a simulated GPU node that implements gpu.Backend, for
// machines without GPUs: unit tests, the demo, and agents started with
// --simulate.
//
// A node is described by a Profile: one of the built-in DGX systems
// (dgxa100, dgxh100, dgxh200, dgxb200), whose identity, memory and MIG
// tables come from go-nvml's mock DGX servers, or a YAML file read by Load.
// On top of those tables the package models what the mocks lack:
//
//   - stable identity: GPU and MIG device UUIDs are name-based UUIDs of the
//     node name and GPU index, so a restarted agent offers the same IDs;
//   - MIG that behaves like the driver: capacity and placement overlap are
//     enforced, placements are recorded, the pending MIG mode differs from
//     the current one until it can be applied;
//   - NVLink through NVSwitch, PCIe levels, NUMA nodes, PCI bus IDs and
//     driver versions of the real systems;
//   - telemetry that follows simulated processes (memory, utilization,
//     power, temperature, energy, clocks) on an injectable clock;
//   - events (XID, ECC, a failing event wait) and fault injection (a lost
//     GPU, a failing call) that touch only the GPU they name.
//
// MIG mode: SetMIGMode records the pending mode. It becomes current at once
// when the GPU runs no process, as the driver does on an idle GPU, and
// otherwise on Reset. Options.MIGModeNeedsReset makes every change wait for
// Reset.
//
// The package must not talk to a real driver, read the host's devices or
// sleep: all time comes from Options.Clock, and nothing runs in the
// background except a subscription's delivery goroutine, which ends with the
// subscription.
package sim
