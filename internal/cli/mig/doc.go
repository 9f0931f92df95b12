// Package mig builds `gpuplane mig`: what a mig-parted config would change
// on a cluster node. It reads the Node (its gpuplane.io/mig-layout
// annotation, which the node's agent publishes), the mig-parted ConfigMap
// and the pods bound to the node, and plans with internal/mig exactly as
// the agent would. It must not change anything in the cluster: the node's
// agent applies a config when the node's nvidia.com/mig.config label names
// it.
package mig
