package adapter

import (
	"fmt"
	"math"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpuplane/gpuplane/api/scheduling/v1alpha1"
	"github.com/gpuplane/gpuplane/internal/scheduler/model"
)

// Fairness over time (Queue spec.usageHalfLife) weighs each queue by its
// usage averaged over time, which the core carries from one cycle to the
// next (model.Decisions.Usage to model.Snapshot.Usage). The loop keeps it
// in memory and in each Queue's status.usageOverTime, written about once
// a minute (usageKeepEvery), so that a scheduler that starts again, or a
// new leader, goes on from what the queues used rather than from nothing:
// its first cycle reads the statuses back (usageFromStatus), checked as
// anything read from the cluster.

// usageKeepEvery is how stale a queue's status.usageOverTime may grow
// before it is written again. A restart loses at most this much of the
// history, which with half-lives of minutes or more changes little.
const usageKeepEvery = time.Minute

// usageStatus is u as a Queue's status.usageOverTime. At is kept to the
// second, as the API keeps times: earlier than u.At, so that the past read
// back is never from the future.
func usageStatus(u *model.QueueUsage) *v1alpha1.QueueUsageOverTime {
	return &v1alpha1.QueueUsageOverTime{
		Usage: corev1.ResourceList{
			corev1.ResourceCPU:    *resource.NewMilliQuantity(int64(math.Round(u.MilliCPU)), resource.DecimalSI),
			corev1.ResourceMemory: *resource.NewQuantity(int64(math.Round(u.MemoryMiB*(1<<20))), resource.BinarySI),
			ResourceGPU:           *resource.NewMilliQuantity(int64(math.Round(u.GPUMilli)), resource.DecimalSI),
		},
		At: metav1.NewTime(time.UnixMilli(u.At).Truncate(time.Second)),
	}
}

// keptUsage is what queue q's status.usageOverTime should say after a
// cycle that returned u for it (nil: the queue has no usage over time):
// what it says already while that is less than usageKeepEvery older
// than u.
func keptUsage(q *v1alpha1.Queue, u *model.QueueUsage) *v1alpha1.QueueUsageOverTime {
	if u == nil {
		return nil
	}
	old := q.Status.UsageOverTime
	if old != nil && time.UnixMilli(u.At).Sub(old.At.Time) < usageKeepEvery && !old.At.After(time.UnixMilli(u.At)) {
		return old
	}
	return usageStatus(u)
}

// usageFromStatus reads back the usage over time the queues' statuses
// keep, for a loop's first cycle at now on nodes. A status that is not a
// usage over time (a time in the future or none, a resource gpuplane does
// not count, a negative amount) is left out with an error naming its
// field; an amount above what the nodes have together is taken as that
// much, since no queue can have used more.
func usageFromStatus(queues map[string]*v1alpha1.Queue, nodes []model.Node, now time.Time) ([]model.QueueUsage, []error) {
	var capacity model.Resources
	for i := range nodes {
		capacity.MilliCPU += nodes[i].MilliCPU
		capacity.MemoryMiB += nodes[i].MemoryMiB
		for _, g := range nodes[i].GPUs {
			capacity.GPUMilli += g.Capacity()
		}
	}
	var out []model.QueueUsage
	var errs []error
	names := make([]string, 0, len(queues))
	for name := range queues {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		h := queues[name].Status.UsageOverTime
		if h == nil {
			continue
		}
		u, err := readUsage(name, h, capacity, now)
		if err != nil {
			errs = append(errs, fmt.Errorf("queue %q: %w; its usage over time starts again from what it uses now", name, err))
			continue
		}
		out = append(out, u)
	}
	return out, errs
}

func readUsage(name string, h *v1alpha1.QueueUsageOverTime, capacity model.Resources, now time.Time) (model.QueueUsage, error) {
	u := model.QueueUsage{Queue: name, At: h.At.UnixMilli()}
	switch {
	case h.At.IsZero():
		return u, fmt.Errorf("status.usageOverTime.at is not set")
	case h.At.After(now):
		return u, fmt.Errorf("status.usageOverTime.at %s is after now (%s)", h.At.UTC().Format(time.RFC3339), now.UTC().Format(time.RFC3339))
	}
	for res, q := range h.Usage {
		if q.Sign() < 0 {
			return u, fmt.Errorf("status.usageOverTime.usage[%s] is negative (%s)", res, q.String())
		}
		switch res {
		case corev1.ResourceCPU:
			u.MilliCPU = math.Min(q.AsApproximateFloat64()*1000, float64(capacity.MilliCPU))
		case corev1.ResourceMemory:
			u.MemoryMiB = math.Min(q.AsApproximateFloat64()/(1<<20), float64(capacity.MemoryMiB))
		case ResourceGPU:
			u.GPUMilli = math.Min(q.AsApproximateFloat64()*1000, float64(capacity.GPUMilli))
		default:
			return u, fmt.Errorf("status.usageOverTime.usage names %s, which is not counted (cpu, memory, %s)", res, ResourceGPU)
		}
	}
	return u, nil
}
