// Package deviceplugin serves the kubelet device plugin API (v1beta1): one
// gRPC server per resource on a unix socket in the kubelet's device-plugin
// directory, registered with the kubelet and registered again whenever the
// kubelet restarts (kubelet.sock is re-created). It answers ListAndWatch
// with each device's health and NUMA node, Allocate with the container
// contract of NVIDIA's plugin (NVIDIA_VISIBLE_DEVICES, volume mounts, CDI
// annotations or CDI devices, device specs), and GetPreferredAllocation
// with the devices a Steerer names for a pod its scheduler placed, else
// through the resource package. A HealthSource that is also an
// AllocationRecorder (the node's ledger, shared with the DRA driver) is
// told of every device Allocate hands out and may refuse it.
//
// It must not read the config file, talk to the GPU backend or decide
// health itself: the agent hands it resources, a topology and a health
// source.
package deviceplugin
