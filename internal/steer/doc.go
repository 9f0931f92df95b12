// Package steer gives the containers of a pod gpuplane-scheduler placed the
// GPUs it recorded in gpupod.GPUsAnnotation. Its Steerer is the device
// plugin's deviceplugin.Steerer, asked first at every
// GetPreferredAllocation; the agent feeds it the pods bound to its node.
//
// The hand-over. The kubelet admits a node's pods one at a time and
// allocates their containers in order; for each container it asks
// GetPreferredAllocation with the device IDs not in use and how many it
// needs, never naming the pod. The Steerer takes as awaiting admission
// the pods bound to the node that carry the scheduler's choice, are still
// Pending and not being deleted, in the order the agent's watch showed
// them bound: the kubelet watches the same pods and admits them in the
// order they arrive. For a request it answers with the devices of the
// first such pod that has a container asking for exactly that many of the
// resource and whose chosen devices not yet handed out are all free
// (failing that, the first pod they fit), and remembers them as that
// pod's. What it remembers it takes back when those devices are all free
// again at a later request: the allocation did not happen (the kubelet
// refused the pod, or restarted before checkpointing it), so the pod is
// awaiting admission again. A pod that is gone, running or finished is
// forgotten. A kubelet restart between admissions changes nothing: the
// kubelet's checkpoint keeps the devices it gave, so they are not free.
// A pod the kubelet admits before the agent's watch shows it is found by
// listing the node's pods afresh.
//
// What can go wrong, and what it costs. Two pods with requests of the
// same size that both fit could be admitted in the other order than the
// Steerer assumes (a batch the kubelet receives at once, as after its
// restart, it admits oldest first): each then gets the devices chosen for
// the other, which on the node as a whole is exactly the scheduler's
// plan. A pod another scheduler placed gets what its resource prefers,
// less the GPUs the choices of the node's gpuplane pods fill (Avoid),
// while enough others are free; when only those are free it takes the
// devices chosen for a waiting gpuplane pod, which then gets what its
// resource prefers. Either way the Recorder writes on every pod
// what it holds (gpupod.HeldAnnotation), read from the kubelet's
// PodResources API, and gpuplane-scheduler's books follow that record. Pods without a
// choice, and choices that do not parse for the node, get what the
// resource prefers, as without a Steerer.
//
// Limits. The kubelet calls Allocate with the device IDs it took from
// GetPreferredAllocation; the Steerer remembers which pod each device was
// last steered to, so Allocate can pass the container the limits of the
// part of a GPU that pod asked for (gpupod.ReadFraction): as environment,
// and on MPS as the client's thread and memory limits.
package steer
