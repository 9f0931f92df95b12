// Package gpupod is the contract of a GPU pod between gpuplane's
// processes: the annotations gpuplane-scheduler and the node write on a pod
// (which GPUs the scheduler chose, which devices the node gave), their
// formats and bounded readers, and the name of the group a lone pod forms.
//
// Everything read from a pod is untrusted: readers bound what they read and
// return errors, never panic.
//
// This package must not import anything of gpuplane's internal/ tree.
package gpupod
