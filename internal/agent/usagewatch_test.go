package agent

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"

	"github.com/gpuplane/gpuplane/internal/metrics"
)

// TestUsageWatch walks one pod over its GPU memory limit under the evict
// policy: an event when it goes over, an eviction after the grace, a
// refused eviction said and retried after the backoff; a pod without a
// limit is never evicted; a process on a GPU not given is said once.
func TestUsageWatch(t *testing.T) {
	pods := map[string]*corev1.Pod{
		"ml/frac":    {ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: "frac", UID: "uid-frac"}},
		"ml/whole":   {ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: "whole", UID: "uid-whole"}},
		"ml/intrude": {ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: "intrude", UID: "uid-intrude"}},
	}
	use := metrics.Usage{
		Pods: []metrics.GPUUse{
			{Namespace: "ml", Pod: "frac", GPU: 2, UUID: "GPU-2", UsedMiB: 30000, Processes: 1},
			{Namespace: "ml", Pod: "whole", GPU: 3, UUID: "GPU-3", UsedMiB: 80000, Processes: 1},
		},
		Foreign: []metrics.ForeignUse{{PodUID: "uid-intrude", GPU: 2, UUID: "GPU-2", Processes: 1, Holders: []string{"ml/frac"}}},
	}
	rec := record.NewFakeRecorder(100)
	var evicted []string
	refuse := errors.New("Cannot evict pod as it would violate the pod's disruption budget")
	var evictErr error
	now := time.Unix(1000, 0)
	w := &usageWatch{
		usage: func(context.Context) (metrics.Usage, error) { return use, nil },
		limitOf: func(ns, pod string) (int64, bool) {
			if pod == "frac" {
				return 20480, true
			}
			return 0, false
		},
		podByKey: func(ns, name string) (*corev1.Pod, bool) { p, ok := pods[ns+"/"+name]; return p, ok },
		podByUID: func(uid types.UID) (*corev1.Pod, bool) {
			for _, p := range pods {
				if p.UID == uid {
					return p, true
				}
			}
			return nil, false
		},
		recorder: rec,
		evict: func(_ context.Context, p *corev1.Pod) error {
			evicted = append(evicted, p.Name)
			return evictErr
		},
		interval: time.Second, grace: 30 * time.Second, backoff: time.Minute,
		now: func() time.Time { return now }, log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		overSince: map[types.UID]time.Time{}, retryAt: map[types.UID]time.Time{}, foreign: map[string]bool{},
	}
	events := func() []string {
		var out []string
		for {
			select {
			case e := <-rec.Events:
				out = append(out, e)
			default:
				return out
			}
		}
	}
	w.check(context.Background())
	got := events()
	if len(got) != 2 || !strings.Contains(got[0], "GPUMemoryOverLimit uses 30000 MiB of GPU 2 (GPU-2), more than the 20480 MiB") ||
		!strings.Contains(got[1], "GPUNotGiven runs 1 processes on GPU 2 (GPU-2), which was given to [ml/frac]") {
		t.Fatalf("first round events %q, want the over-limit and the GPU-not-given warnings", got)
	}
	now = now.Add(10 * time.Second)
	w.check(context.Background())
	if got := events(); len(got) != 0 || len(evicted) != 0 {
		t.Fatalf("within the grace: events %q, evicted %v; want neither (once per episode)", got, evicted)
	}
	// Past the grace: evicted; the budget refuses it.
	evictErr = refuse
	now = now.Add(25 * time.Second)
	w.check(context.Background())
	if got := events(); len(evicted) != 1 || evicted[0] != "frac" || len(got) != 1 || !strings.Contains(got[0], "OverLimitEvictionRefused") {
		t.Fatalf("after the grace, refused: evicted %v, events %q", evicted, got)
	}
	// Retried only after the backoff, then granted.
	now = now.Add(30 * time.Second)
	w.check(context.Background())
	if len(evicted) != 1 {
		t.Fatalf("retried within the backoff: %v", evicted)
	}
	evictErr = nil
	now = now.Add(31 * time.Second)
	w.check(context.Background())
	if got := events(); len(evicted) != 2 || len(got) != 1 || !strings.Contains(got[0], "EvictedOverGPUMemoryLimit") {
		t.Fatalf("after the backoff: evicted %v, events %q", evicted, got)
	}
	// Back under the limit: a later excess is a new episode, said again.
	use.Pods[0].UsedMiB = 1000
	w.check(context.Background())
	use.Pods[0].UsedMiB = 30000
	w.check(context.Background())
	if got := events(); len(got) != 1 || !strings.Contains(got[0], "GPUMemoryOverLimit") {
		t.Fatalf("a new episode: events %q", got)
	}
	for _, name := range evicted {
		if name != "frac" {
			t.Errorf("evicted %s, which asked for no memory limit", name)
		}
	}
}
