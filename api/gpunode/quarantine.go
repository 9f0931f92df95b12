package gpunode

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"time"
)

// TaintGPUFault is the taint gpuplane-agent puts on its Node, with effect
// NoSchedule, while a GPU fault that the quarantine policy says affects the
// whole node (by default XID 79, a GPU that fell off the bus) is being
// handled. Its value is TaintValue of the XID ("xid-79"). A fault confined
// to one GPU taints nothing: that GPU's devices are withdrawn from the
// kubelet, so the node's allocatable drops by them.
const TaintGPUFault = "gpuplane.io/gpu-fault"

// TaintValue is the value of TaintGPUFault for a fault with XID xid.
func TaintValue(xid uint64) string { return "xid-" + strconv.FormatUint(xid, 10) }

// ConditionGPUQuarantine is the Node condition gpuplane-agent keeps while
// any GPU of the node is quarantined: True with a message naming each GPU
// (index and UUID), its XID and its quarantine step; False with reason
// ReasonNoGPUQuarantined once every GPU is back.
const ConditionGPUQuarantine = "GPUQuarantine"

// Reasons of ConditionGPUQuarantine.
const (
	// ReasonNoGPUQuarantined: every GPU is in service.
	ReasonNoGPUQuarantined = "NoGPUQuarantined"
	// ReasonGPUQuarantined: at least one GPU is being drained, reset or
	// revalidated.
	ReasonGPUQuarantined = "GPUQuarantined"
	// ReasonGPUHeld: at least one GPU stays quarantined: it failed again
	// soon after it returned, its reset failed or it did not pass
	// revalidation. The message says which and when it is tried again.
	ReasonGPUHeld = "GPUHeld"
)

// QuarantineAnnotation is gpuplane-agent's record, on its Node, of the GPUs
// it has quarantined and of those that returned recently, so that a
// restarted agent resumes each where it was. Its value is compact JSON:
//
//	{"v":1,"gpus":[{"gpu":3,"uuid":"GPU-...","xid":79,"class":"bus","state":"held","node":true,"since":"2026-11-25T17:00:00Z","fails":2}]}
//
// The fields of each GPU: its index and UUID, the XID that quarantined it
// (0 for a fault without one, such as a GPU found lost by a probe), the
// policy class that XID fell in, the quarantine step (a Quarantine*
// state), whether the fault taints the whole node, when the GPU entered
// that step, and how many times it has failed within the policy's window.
const QuarantineAnnotation = "gpuplane.io/gpu-quarantine"

// Quarantine states as QuarantineAnnotation records them.
const (
	QuarantineDraining   = "draining"
	QuarantineResetting  = "resetting"
	QuarantineValidating = "validating"
	QuarantineHeld       = "held"
	// QuarantineReturned is a GPU back in service, kept in the record
	// until the policy's window has passed so that failing again within
	// it is recognised after a restart too.
	QuarantineReturned = "returned"
)

// QuarantineStates lists the states in the order a GPU goes through them.
func QuarantineStates() []string {
	return []string{QuarantineDraining, QuarantineResetting, QuarantineValidating, QuarantineHeld, QuarantineReturned}
}

// Bounds of QuarantineAnnotation's fields.
const (
	// MaxXID bounds an XID code; NVIDIA's catalogue ends in the low
	// hundreds.
	MaxXID = 1 << 16
	// MaxQuarantineFails bounds the failure count.
	MaxQuarantineFails = 1 << 20
	maxUUIDLen         = 96
	maxClassLen        = 63
)

// QuarantineRecord is the value of QuarantineAnnotation.
type QuarantineRecord struct {
	V    int              `json:"v"`
	GPUs []QuarantinedGPU `json:"gpus"`
}

// QuarantinedGPU is one GPU of a QuarantineRecord.
type QuarantinedGPU struct {
	Index int       `json:"gpu"`
	UUID  string    `json:"uuid"`
	XID   uint64    `json:"xid"`
	Class string    `json:"class"`
	State string    `json:"state"`
	Node  bool      `json:"node,omitempty"`
	Since time.Time `json:"since"`
	Fails int       `json:"fails"`
}

// FormatQuarantine renders a record as the annotation's value, GPUs in
// index order.
func FormatQuarantine(r QuarantineRecord) (string, error) {
	r.V = 1
	r.GPUs = slices.Clone(r.GPUs)
	slices.SortFunc(r.GPUs, func(a, b QuarantinedGPU) int { return a.Index - b.Index })
	for i := range r.GPUs {
		r.GPUs[i].Since = r.GPUs[i].Since.UTC().Truncate(time.Second)
	}
	b, err := json.Marshal(r)
	if err != nil {
		return "", fmt.Errorf("%s: encoding: %w", QuarantineAnnotation, err)
	}
	return string(b), nil
}

// The times FormatQuarantine writes: whole seconds in UTC, years 1 to
// 9999 (JSON's times have four-digit years), after the zero time that
// means missing.
var (
	minSince = time.Date(1, 1, 1, 0, 0, 1, 0, time.UTC)
	maxSince = time.Date(9999, 12, 31, 23, 59, 59, 0, time.UTC)
)

// writableSince reports whether FormatQuarantine writes t as a time that
// ParseQuarantine reads back.
func writableSince(t time.Time) bool {
	t = t.UTC().Truncate(time.Second)
	return !t.Before(minSince) && !t.After(maxSince)
}

// ParseQuarantine reads the value of QuarantineAnnotation within the
// bounds above: at most MaxGPUs GPUs, each index once, known states.
func ParseQuarantine(s string) (QuarantineRecord, error) {
	fail := func(format string, args ...any) (QuarantineRecord, error) {
		return QuarantineRecord{}, fmt.Errorf("%s: "+format, append([]any{QuarantineAnnotation}, args...)...)
	}
	if len(s) > MaxAnnotationBytes {
		return fail("%d bytes is more than the %d allowed", len(s), MaxAnnotationBytes)
	}
	var r QuarantineRecord
	dec := json.NewDecoder(bytes.NewReader([]byte(s)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&r); err != nil {
		return fail("not the quarantine JSON: %v; the agent rewrites it, delete the annotation to start afresh", err)
	}
	if dec.More() {
		return fail("trailing data after the JSON value")
	}
	if r.V != 1 {
		return fail("v: format version %d is not supported; want 1", r.V)
	}
	if len(r.GPUs) > MaxGPUs {
		return fail("gpus: %d entries, at most %d", len(r.GPUs), MaxGPUs)
	}
	seen := map[int]bool{}
	for i, g := range r.GPUs {
		field := fmt.Sprintf("gpus[%d]", i)
		switch {
		case g.Index < 0 || g.Index >= MaxGPUs:
			return fail("%s.gpu: must be 0 to %d, got %d", field, MaxGPUs-1, g.Index)
		case seen[g.Index]:
			return fail("%s.gpu: GPU %d is listed twice", field, g.Index)
		case g.UUID == "" || len(g.UUID) > maxUUIDLen:
			return fail("%s.uuid: must be 1 to %d characters, got %d", field, maxUUIDLen, len(g.UUID))
		case g.XID > MaxXID:
			return fail("%s.xid: must be 0 to %d, got %d", field, MaxXID, g.XID)
		case len(g.Class) > maxClassLen:
			return fail("%s.class: at most %d characters, got %d", field, maxClassLen, len(g.Class))
		case !slices.Contains(QuarantineStates(), g.State):
			return fail("%s.state: %q is not one of %v", field, truncate(g.State), QuarantineStates())
		case g.Fails < 0 || g.Fails > MaxQuarantineFails:
			return fail("%s.fails: must be 0 to %d, got %d", field, MaxQuarantineFails, g.Fails)
		case g.Since.IsZero():
			return fail("%s.since: missing", field)
		case !writableSince(g.Since):
			return fail("%s.since: %s is not a time from %s to %s", field, g.Since.Format(time.RFC3339Nano),
				minSince.Format(time.RFC3339), maxSince.Format(time.RFC3339))
		}
		seen[g.Index] = true
	}
	return r, nil
}
