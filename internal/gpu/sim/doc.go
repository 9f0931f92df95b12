// Package sim is a simulated GPU node that implements gpu.Backend, for
// machines without GPUs: unit tests, the demo, and agents started with
// --simulate.
//
// # Starting a node
//
// Load returns a Profile: one of the built-in DGX systems (dgxa100,
// dgxh100, dgxh200, dgxb200), whose identity, memory and MIG tables come
// from go-nvml's mock DGX servers; a compute tray of a GB200 or GB300
// NVL72 rack (gb200-nvl72, gb300-nvl72: four GPUs on the rack's NVLink
// fabric, fabric.go); one of the built-in servers clouds rent
// (4xt4, 8xv100, 4xa10g, 8xl4, 8xl40s, 8xa100-80gb, 8xh100-pcie: profile
// files kept in cloud.go); or a profile file. BuiltinNames lists them. New
// starts a Backend from it:
//
//	p, err := sim.Load("dgxh100") // or a path such as "testdata/two-t4.yaml"
//	b, err := sim.New(p, sim.Options{NodeName: "node-1"})
//
// On top of go-nvml's tables the package models what the mocks lack:
//
//   - stable identity: GPU and MIG device UUIDs are name-based UUIDs of the
//     node name, the GPU index and (for MIG) where the instances sit, so a
//     restarted agent offers the same device IDs;
//   - MIG that behaves like the driver: instance counts and compute slices
//     are enforced, placements count memory slices as NVML's do and never
//     overlap, the pending MIG mode differs from the current one until it can
//     be applied;
//   - NVLink all-to-all through NVSwitch (NV12 on A100, NV18 on H100, H200
//     and B200), PCIe levels, two NUMA nodes (GPUs 0-3 and 4-7), the PCI bus
//     IDs and driver versions of the real systems;
//   - telemetry that follows simulated processes (memory, utilization,
//     power from idle to TDP, temperature following power, energy, clocks) on
//     an injectable Clock, exactly and independently of how often it is read;
//   - the multi-node NVLink fabric of NVL72 trays (gpu.FabricReader): a
//     cluster UUID, clique ID and registration state that every GPU of the
//     node reports, the rack's by Options.Fabric; GPUs of other profiles
//     answer "not supported", as GPUs without a fabric do;
//   - events (XID, ECC, a failing event wait) and fault injection (a lost
//     GPU, a failing call) that change only the GPU they name.
//
// # MIG mode
//
// SetMIGMode records the pending mode. It becomes current at once when the
// GPU runs no simulated process, as the driver does on an idle GPU, and
// otherwise on Reset (which fails while processes run). With
// Options.MIGModeNeedsReset every change waits for Reset. A reset destroys
// the GPU's MIG instances.
//
// # State across restarts
//
// With Options.StateFile the GPUs' MIG mode and instances are written to a
// file after every MIG change and read back by New, so a restarted agent
// finds the layout it left, as real GPUs keep theirs (the agent's
// --simulate-state; the node simulator passes one per node). The file is
// parsed strictly (ParseState) and a GPU it cannot restore stops New with
// the field named.
//
// # Controls
//
// Beyond gpu.Backend, a Backend has controls for tests and demos:
// RunProcess, SetProcessLoad, StopProcess (load); InjectXID, InjectMIGXID,
// InjectECC, InjectPCIeReplay, FailEventWait (events and counters); LoseGPU,
// Recover, Reset, FailCall, ClearFaults (faults). ResetGPU is gpu.Resetter:
// it also brings a lost GPU back, and FailCall(OpResetGPU, ...) makes it
// fail, a reset that does not mend the GPU. Controls are not NVML
// calls: FailCall does not affect them. ControlHandler serves the fault
// controls over HTTP, for a running agent's --simulate-control-addr.
//
// # Profile files
//
// A profile file is YAML, parsed strictly: an unknown field, a value of the
// wrong type or an impossible setting is an error naming the file, the line,
// the field and what is allowed.
//
//	version: v1                 # optional
//	name: mixed                 # default: the file's base name
//	driverVersion: "560.35.03"  # default 550.54.15; nvmlVersion: "12." + driver
//	cudaDriverVersion: "12.6"   # default 12.4
//	gpus:
//	  - model: H100-SXM5-80GB   # a key of Models(); the fields below override it
//	    count: 2                # default 1
//	    numaNodes: [0, 1]       # or numaNode: 0 for all (default 0)
//	    migEnabled: true
//	    migDevices: [1g.10gb, 1g.10gb, 3g.40gb]   # MIG devices it starts with
//	  - model: T4
//	    mig: none               # or a MIG table of MIGTables(), e.g. A100-40GB
//	  - name: NVIDIA RTX 6000 Ada Generation   # no model: name, memoryMiB,
//	    memoryMiB: 49140                       # architecture and
//	    architecture: ada                      # computeCapability are needed
//	    computeCapability: "8.9"
//	    pciBusIDs: ["0000:c1:00.0"]            # default: made up, distinct
//	    idleWatts: 20
//	    tdpWatts: 300
//	topology:
//	  nvlink: 0                 # NVLinks between every pair (all-to-all)
//	  pcie: SYS                 # level of every pair; default NODE within a
//	                            # NUMA node, SYS across
//	  pairs:                    # overrides for single pairs
//	    - gpus: [0, 1]
//	      nvlink: 18
//	    - gpus: [2, 3]
//	      pcie: PIX
//	fabric:                     # the multi-node NVLink fabric every GPU reports
//	  clusterUUID: 7b968a6d-c8aa-45e1-9e07-e1e51be99c31  # default: named after the profile
//	  cliqueID: 1               # default 1
//	  state: completed          # not-started, in-progress or completed (default)
//
// # What this package must not do
//
// It must not talk to a real driver, read the host's devices (beyond its
// state file) or sleep: all
// time comes from Options.Clock, and nothing runs in the background except a
// subscription's delivery goroutine, which ends with the subscription.
package sim
