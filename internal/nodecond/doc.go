// Package nodecond writes one condition of a Node's status by server-side
// apply, under a field manager that owns that condition alone, so that the
// kubelet's conditions and every other writer's are never touched. The
// agent keeps three conditions this way (GPUReady, GPUQuarantine,
// MIGConfig), each with a Writer of its own.
//
// It owns the rule for lastTransitionTime: it moves only when the status
// written differs from the status last written (or on the first write),
// never on a change of reason or message. It must not decide what a
// condition says: that is its part's.
package nodecond
