// Package agent builds the gpuplane-agent command: flags become a config,
// the config builds the node's parts, and this package connects them and
// runs them on one context (runParts). It holds wiring and the small
// adapters between parts; it must not implement a part itself: each part
// lives in its own package (the device plugin in internal/deviceplugin,
// the DRA driver in internal/dra, the quarantine in internal/quarantine,
// MIG in internal/mig, labels in internal/labels, metrics in
// internal/metrics, the Node conditions' writer in internal/nodecond).
//
// # Wiring
//
// runAgentOnce (wiring.go) only wires. It reads the start config
// (readStart) and opens the one GPU backend (openBackend), then builds
// each part with a constructor of its own that takes what the part needs
// and returns it with its error: the pod recorder (recorderPart), the
// GPUReady condition (conditionPart), the simulated GPUs' fault controls
// (simControlPart), the GPU quarantine (newQuarantinePart), declarative
// MIG (migParts), the labels (newLabelsPartFor), /metrics and the usage
// watch (metricsParts), the serving API's watch (servingAPI), the DRA
// driver (draParts) and, last, the device plugin (devicePluginPart).
//
// The device plugin is the source of what the node serves; the other
// parts follow it in two ways:
//   - servedResources holds the one snapshot (sharing.Served) of the
//     resources the plugin serves. The plugin stores it; the recorder, the
//     quarantine, the metrics' share book, the DRA driver and the MIG part
//     read it, and keep no copy.
//   - followers is the one fan-out of the plugin's resources and config,
//     at start and after every reload that took effect, to a list of
//     subscribers called in the order newFollowers documents (the
//     snapshot, then the MIG health gate; the MIG strategy, then the
//     labels, then the quarantine's policy).
//
// The agent's three Node conditions (GPUReady, GPUQuarantine,
// MIGConfigApplied) are written through nodecond.Writer, each under its
// own field manager.
//
// # Adapters
//
// The health monitor as a metrics source (monitorHealth), a core/v1-only
// Node client (nodeClient), the ledger as the device plugin's health
// source when the DRA driver runs (ledgerHealth), the quarantine's
// PodResources, eviction and event adapters, the MIG reconciler's view of
// the API server, PodResources and the device plugin's health gate
// (migCluster, migGate), and draLink, through which the MIG reconciler and
// the quarantine see the pods holding DRA claims on a GPU and the MIG
// reconciler leaves claims' MIG instances alone.
//
// It also decides, once at start, through which API the node's GPUs are
// served (--gpu-api, overridden by the Node's gpuplane.io/gpu-api label):
// with DRA only, the device plugin withholds its resources; a change of
// the label stops the parts and starts them again (runAgent).
package agent
