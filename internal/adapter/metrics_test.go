package adapter

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/gpuplane/gpuplane/api/scheduling/v1alpha1"
	"github.com/gpuplane/gpuplane/internal/testutil/build"
)

// series gathers the registry's series whose names start with prefix, as
// name{label="value",...} => value (gauges and counters) or sample count
// (histograms).
func (m *metrics) series(t *testing.T, prefix string) map[string]float64 {
	t.Helper()
	families, err := m.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, f := range families {
		if !strings.HasPrefix(f.GetName(), prefix) {
			continue
		}
		for _, s := range f.GetMetric() {
			var labels []string
			for _, l := range s.GetLabel() {
				labels = append(labels, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
			}
			key := f.GetName() + "{" + strings.Join(labels, ",") + "}"
			switch {
			case s.Gauge != nil:
				out[key] = s.GetGauge().GetValue()
			case s.Counter != nil:
				out[key] = s.GetCounter().GetValue()
			case s.Histogram != nil:
				out[key] = float64(s.GetHistogram().GetSampleCount())
			}
		}
	}
	return out
}

// The series the scheduler's dashboard and alert rules read: what waits,
// by queue and reason; the oldest waiting gang of each queue; each queue's
// guarantee; the length of whole cycles. A reason or queue with nothing
// waiting any more loses its series.
func TestMetricsOfWhatWaits(t *testing.T) {
	f := newLoopFixture(t, Config{}, gpuNode("a", 8))
	m := f.loop.metrics
	f.cache.upsertQueue(build.Queue("team").GPUs("6", "").Obj())
	f.cache.upsertQueue(build.Queue("small").GPUs("1", "2").Obj())
	// A gang of two 8-GPU pods on one 8-GPU node never fits; its older
	// member was created at 100, the other at 250.
	f.cache.upsertPodGroup(build.PodGroup("ns", "big", 2).UID("uid-big").Queue("team").Obj())
	f.cache.upsertPod(newPod("ns", "big-0").GPUs(8).Label(v1alpha1.PodGroupLabel, "big").Created(250).Obj())
	f.cache.upsertPod(newPod("ns", "big-1").GPUs(8).Label(v1alpha1.PodGroupLabel, "big").Created(100).Obj())
	// A lone pod above its queue's limit waits for a reason of its own,
	// and is no gang.
	f.cache.upsertPod(newPod("ns", "greedy").GPUs(4).Label(v1alpha1.QueueLabel, "small").Obj())
	// A pod that fits is placed and waits no more.
	f.cache.upsertPod(newPod("ns", "fits").GPUs(2).Label(v1alpha1.QueueLabel, "team").Obj())
	f.cycle()

	check := func(prefix string, want map[string]float64) {
		t.Helper()
		if got := m.series(t, prefix); !maps.Equal(got, want) {
			t.Errorf("%s series:\n got  %v\n want %v", prefix, sorted(got), sorted(want))
		}
	}
	check("gpuplane_scheduler_pending_groups", map[string]float64{
		`gpuplane_scheduler_pending_groups{queue="small",reason="ExceedsQueueLimit"}`:     1,
		`gpuplane_scheduler_pending_groups{queue="team",reason="ExceedsClusterCapacity"}`: 1,
	})
	check("gpuplane_scheduler_queue_oldest_pending_gang", map[string]float64{
		`gpuplane_scheduler_queue_oldest_pending_gang_timestamp_seconds{queue="team"}`: 100,
	})
	check("gpuplane_scheduler_queue_guaranteed", map[string]float64{
		`gpuplane_scheduler_queue_guaranteed{queue="default",resource="cpu"}`:            0,
		`gpuplane_scheduler_queue_guaranteed{queue="default",resource="memory"}`:         0,
		`gpuplane_scheduler_queue_guaranteed{queue="default",resource="nvidia.com/gpu"}`: 0,
		`gpuplane_scheduler_queue_guaranteed{queue="small",resource="cpu"}`:              0,
		`gpuplane_scheduler_queue_guaranteed{queue="small",resource="memory"}`:           0,
		`gpuplane_scheduler_queue_guaranteed{queue="small",resource="nvidia.com/gpu"}`:   1,
		`gpuplane_scheduler_queue_guaranteed{queue="team",resource="cpu"}`:               0,
		`gpuplane_scheduler_queue_guaranteed{queue="team",resource="memory"}`:            0,
		`gpuplane_scheduler_queue_guaranteed{queue="team",resource="nvidia.com/gpu"}`:    6,
	})
	check("gpuplane_scheduler_cycle_duration", map[string]float64{`gpuplane_scheduler_cycle_duration_seconds{}`: 1})

	// The gang goes: its queue's oldest-gang series and its reason go too.
	for i := range 2 {
		f.cache.deletePod(newPod("ns", fmt.Sprint("big-", i)).Obj())
	}
	f.cycle()
	check("gpuplane_scheduler_pending_groups", map[string]float64{
		`gpuplane_scheduler_pending_groups{queue="small",reason="ExceedsQueueLimit"}`: 1,
	})
	check("gpuplane_scheduler_queue_oldest_pending_gang", map[string]float64{})
	check("gpuplane_scheduler_cycle_duration", map[string]float64{`gpuplane_scheduler_cycle_duration_seconds{}`: 2})

	// A queue deleted loses its series, instead of exporting its last
	// values for as long as the scheduler runs.
	f.cache.deletePod(newPod("ns", "greedy").Obj())
	f.cache.deleteQueue(build.Queue("small").Obj())
	f.cycle()
	for _, name := range []string{"gpuplane_scheduler_queue_usage", "gpuplane_scheduler_queue_fair_share", "gpuplane_scheduler_queue_guaranteed", "gpuplane_scheduler_queue_pending"} {
		got := m.series(t, name)
		for k := range got {
			if strings.Contains(k, `queue="small"`) {
				t.Errorf("queue small was deleted, yet %s is exported", k)
			}
		}
		if !slices.ContainsFunc(slices.Collect(maps.Keys(got)), func(k string) bool { return strings.Contains(k, `queue="team"`) }) {
			t.Errorf("%s: no series of queue team, which remains: %v", name, sorted(got))
		}
	}
}

func sorted(m map[string]float64) []string {
	var out []string
	for k, v := range m {
		out = append(out, fmt.Sprintf("%s=%v", k, v))
	}
	slices.Sort(out)
	return out
}
