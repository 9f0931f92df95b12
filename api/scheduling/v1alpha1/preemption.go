package v1alpha1

import (
	"fmt"
	"time"
)

// Keys and condition types of preemption with notice and checkpoint-aware
// victims.
const (
	// LastCheckpointAnnotation on a running pod says when its workload last
	// wrote a checkpoint it can resume from, in RFC 3339. Among the
	// workloads a preemption or reclaim may evict, gpuplane-scheduler
	// evicts those that lose the fewest GPU-hours: GPUs times the time
	// since the last checkpoint (since the pod started when it never
	// reported one).
	LastCheckpointAnnotation = "scheduling.gpuplane.io/last-checkpoint"
	// MinRuntimeAnnotation on a PriorityClass is the least time, a Go
	// duration ("30m"), a workload of that class runs before preemption or
	// reclaim may evict it; a Queue's spec.minRuntime is the same per
	// queue, and the larger of the two applies.
	MinRuntimeAnnotation = "scheduling.gpuplane.io/min-runtime"
	// ConditionPreemptionNotice on a Pod says that gpuplane-scheduler is
	// about to evict it (status True, reason Preempt or Reclaim, the
	// message naming the group it makes room for): it is written before
	// the eviction, whose grace period (the Queue's
	// spec.preemptionGracePeriodSeconds, else the pod's own) the workload
	// has to checkpoint after SIGTERM.
	ConditionPreemptionNotice = "PreemptionNotice"
)

// Bounds of the preemption settings.
const (
	// MaxMinRuntime bounds a queue's or a priority class's minimum
	// runtime.
	MaxMinRuntime = 7 * 24 * time.Hour
	// MaxUsageHalfLife bounds a queue's usage half-life.
	MaxUsageHalfLife = 90 * 24 * time.Hour
	// MaxPreemptionGracePeriodSeconds bounds a queue's preemption grace.
	MaxPreemptionGracePeriodSeconds = 24 * 60 * 60
	// maxTimestampLen bounds an RFC 3339 value read from the cluster.
	maxTimestampLen = 64
	// maxDurationLen bounds a duration value read from the cluster.
	maxDurationLen = 32
)

// ParseLastCheckpoint reads LastCheckpointAnnotation's value. The value is
// untrusted: longer than any RFC 3339 time, not one, or after now (beyond
// a minute of clock skew) is an error that says so.
func ParseLastCheckpoint(v string, now time.Time) (time.Time, error) {
	if len(v) > maxTimestampLen {
		return time.Time{}, fmt.Errorf("annotation %s: %d bytes, more than the %d an RFC 3339 time needs", LastCheckpointAnnotation, len(v), maxTimestampLen)
	}
	t, err := time.Parse(time.RFC3339, v)
	if err != nil {
		return time.Time{}, fmt.Errorf("annotation %s: %q is not an RFC 3339 time (2026-11-27T22:00:00Z)", LastCheckpointAnnotation, v)
	}
	if t.After(now.Add(time.Minute)) {
		return time.Time{}, fmt.Errorf("annotation %s: %s is in the future (now %s)", LastCheckpointAnnotation, v, now.UTC().Format(time.RFC3339))
	}
	return t, nil
}

// ParseMinRuntime reads MinRuntimeAnnotation's value: a Go duration from
// 0 to MaxMinRuntime.
func ParseMinRuntime(v string) (time.Duration, error) {
	if len(v) > maxDurationLen {
		return 0, fmt.Errorf("annotation %s: %d bytes, more than the %d a duration needs", MinRuntimeAnnotation, len(v), maxDurationLen)
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		return 0, fmt.Errorf("annotation %s: %q is not a duration (30m, 2h)", MinRuntimeAnnotation, v)
	}
	if d < 0 || d > MaxMinRuntime {
		return 0, fmt.Errorf("annotation %s: %s must be between 0 and %s", MinRuntimeAnnotation, v, MaxMinRuntime)
	}
	return d, nil
}

// CheckPreemptionSettings validates a Queue's fairness-over-time and
// preemption settings, naming the field that is out of bounds.
func (s *QueueSpec) CheckPreemptionSettings() error {
	if d := s.UsageHalfLife; d != nil && (d.Duration < 0 || d.Duration > MaxUsageHalfLife) {
		return fmt.Errorf("spec.usageHalfLife: %s must be between 0 and %s", d.Duration, MaxUsageHalfLife)
	}
	if d := s.MinRuntime; d != nil && (d.Duration < 0 || d.Duration > MaxMinRuntime) {
		return fmt.Errorf("spec.minRuntime: %s must be between 0 and %s", d.Duration, MaxMinRuntime)
	}
	if g := s.PreemptionGracePeriodSeconds; g != nil && (*g < 0 || *g > MaxPreemptionGracePeriodSeconds) {
		return fmt.Errorf("spec.preemptionGracePeriodSeconds: %d must be between 0 and %d", *g, MaxPreemptionGracePeriodSeconds)
	}
	return nil
}
