// Package topology builds `gpuplane topology convert`: Kueue's and KAI's
// Topology objects, read from files or from a cluster, written out as
// gpuplane's Topology (scheduling.gpuplane.io/v1alpha1) for `kubectl
// apply`. It only reads: it never writes to the cluster. gpuplane-scheduler
// reads Kueue's and KAI's Topologies as they are; converting makes them
// gpuplane's own, to keep when the other scheduler goes.
package topology
