// Package agent builds the gpuplane-agent command: flags become a config,
// the config builds the node's parts (GPU backend, device plugin, DRA
// driver, health, labels, metrics, GPU quarantine, declarative MIG), and
// this package connects them and runs them on one context. It holds wiring
// and the small adapters between parts (the health monitor as a metrics
// source, the device plugin's config as the labels' config, a core/v1-only
// Node client for the labels, the ledger as the device plugin's health
// source when the DRA driver runs, the quarantine's PodResources, eviction
// and event adapters, the simulated GPUs' loopback fault controls, the MIG
// reconciler's view of the API server, PodResources and the device
// plugin's health gate, and draLink, through which the MIG reconciler and
// the quarantine see the pods holding DRA claims on a GPU and the MIG
// reconciler leaves claims' MIG instances alone). It also decides, once at
// start, through which API the node's GPUs are served (--gpu-api,
// overridden by the Node's gpuplane.io/gpu-api label): with DRA only, the
// device plugin withholds its resources. It must not implement a part itself: each part
// lives in its own package (the DRA driver in internal/dra, the quarantine
// in internal/quarantine, MIG in internal/mig).
package agent
