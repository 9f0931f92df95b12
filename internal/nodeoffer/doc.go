// Package nodeoffer works out what a GPU node will offer once gpuplane's
// agent runs on it (its GPU feature labels, its topology annotation and the
// device-plugin resources it advertises) before the node exists, and
// publishes that to a node autoscaler: Karpenter NodePools whose nodes
// carry the labels from the start, and the instance types of Karpenter's
// kwok provider that carry the resources.
//
// The offer comes from the agent's own code (internal/labels,
// internal/sharing) run over the simulated GPUs of the node's profile with
// the node's config, so an autoscaler's simulation, gpuplane-scheduler's
// view of the node once it is up, and the agent agree by construction.
//
// It must not talk to the API server: it returns objects, and the caller
// applies them.
package nodeoffer
