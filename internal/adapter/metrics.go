package adapter

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/gpuplane/gpuplane/internal/scheduler/model"
)

// metrics are the scheduler's Prometheus series, on a registry of its own.
type metrics struct {
	reg            *prometheus.Registry
	attempts       *prometheus.CounterVec
	phases         *prometheus.HistogramVec
	bindDuration   prometheus.Histogram
	commitDuration prometheus.Histogram
	e2e            prometheus.Histogram
	binds          *prometheus.CounterVec
	evictions      *prometheus.CounterVec
	usage          *prometheus.GaugeVec
	fairShare      *prometheus.GaugeVec
	pending        *prometheus.GaugeVec
	leader         prometheus.Gauge
	badNodes       prometheus.Gauge
	layouts        prometheus.Counter
	refusedChoices *prometheus.CounterVec
	apiServed      *prometheus.GaugeVec
}

func newMetrics() *metrics {
	buckets := prometheus.ExponentialBuckets(0.0001, 2, 18)
	m := &metrics{
		reg: prometheus.NewRegistry(),
		attempts: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "gpuplane_scheduler_schedule_attempts_total",
			Help: "Pod groups the scheduler tried to place, by result (scheduled, unschedulable, error)."}, []string{"result"}),
		phases: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "gpuplane_scheduler_cycle_phase_duration_seconds",
			Help: "Time spent in each phase of a scheduling cycle.", Buckets: buckets}, []string{"phase"}),
		bindDuration: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "gpuplane_scheduler_bind_duration_seconds",
			Help: "Latency of pods/binding calls.", Buckets: buckets}),
		commitDuration: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "gpuplane_scheduler_gang_commit_duration_seconds",
			Help: "Latency of writing a gang's placement to its PodGroup before its members are bound.", Buckets: buckets}),
		e2e: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "gpuplane_scheduler_pod_scheduling_duration_seconds",
			Help: "Time from a pod's creation to its binding.", Buckets: prometheus.ExponentialBuckets(0.01, 2, 16)}),
		binds: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "gpuplane_scheduler_binds_total",
			Help: "Bindings sent, by result (bound, error)."}, []string{"result"}),
		evictions: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "gpuplane_scheduler_evictions_total",
			Help: "Evictions asked of the Eviction API, by reason (preempt, reclaim) and result (evicted, refused)."}, []string{"reason", "result"}),
		usage: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "gpuplane_scheduler_queue_usage",
			Help: "Resources held by a queue's running pods (cpu in cores, memory in bytes, nvidia.com/gpu in GPUs)."}, []string{"queue", "resource"}),
		fairShare: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "gpuplane_scheduler_queue_fair_share",
			Help: "A queue's fair share of the cluster given current demand, in the units of gpuplane_scheduler_queue_usage."}, []string{"queue", "resource"}),
		pending: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "gpuplane_scheduler_queue_pending_groups",
			Help: "Pod groups waiting in a queue."}, []string{"queue"}),
		leader: prometheus.NewGauge(prometheus.GaugeOpts{Name: "gpuplane_scheduler_leader",
			Help: "1 while this replica leads and schedules, 0 while it stands by."}),
		badNodes: prometheus.NewGauge(prometheus.GaugeOpts{Name: "gpuplane_scheduler_invalid_nodes",
			Help: "Nodes left out of scheduling because a GPU label, annotation or allocatable quantity is out of bounds (see the InvalidGPUInfo events)."}),
		layouts: prometheus.NewCounter(prometheus.CounterOpts{Name: "gpuplane_scheduler_mig_layout_proposals_total",
			Help: "MIG layouts proposed for idle GPUs of nodes labelled gpuplane.io/mig-layout-policy=follow-demand."}),
		refusedChoices: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "gpuplane_scheduler_claim_choice_refusals_total",
			Help: "Binds not carried out because the pod's ResourceClaims refuse the GPUs the core chose, by what the next cycle gives the core (exact: only the node's GPUs that satisfy the claims; excluded: none of the node's)."}, []string{"constraint"}),
		apiServed: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "gpuplane_scheduler_api_served",
			Help: "1 when the cluster serves an optional Kubernetes API the scheduler uses (dra, workload-api, admission-policies), 0 when it does not and the scheduler runs without it; looked up at start."}, []string{"feature"}),
	}
	m.reg.MustRegister(append(m.own(), collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))...)
	return m
}

// own lists the scheduler's own series.
func (m *metrics) own() []prometheus.Collector {
	return []prometheus.Collector{m.apiServed, m.refusedChoices, m.layouts, m.attempts, m.phases, m.bindDuration, m.commitDuration, m.e2e, m.binds, m.evictions, m.usage, m.fairShare, m.pending, m.leader, m.badNodes}
}

// MetricCollectors returns the scheduler's own series, new and
// unregistered, for the reference docs (internal/docgen).
func MetricCollectors() []prometheus.Collector { return newMetrics().own() }

func (m *metrics) phase(name string, d time.Duration) {
	m.phases.WithLabelValues(name).Observe(d.Seconds())
}

func (m *metrics) cycle(in *cycleInput, d *model.Decisions) {
	groups := map[string]bool{}
	for _, b := range d.Binds {
		groups[b.Group] = true
	}
	m.attempts.WithLabelValues("scheduled").Add(float64(len(groups)))
	m.attempts.WithLabelValues("unschedulable").Add(float64(len(d.Unplaced)))
}

func (m *metrics) queue(name string, usage, fair model.Resources, pending int32) {
	set := func(g *prometheus.GaugeVec, r model.Resources) {
		g.WithLabelValues(name, "cpu").Set(float64(r.MilliCPU) / 1000)
		g.WithLabelValues(name, "memory").Set(float64(r.MemoryMiB) * (1 << 20))
		g.WithLabelValues(name, string(ResourceGPU)).Set(float64(r.GPUMilli) / model.MilliPerGPU)
	}
	set(m.usage, usage)
	set(m.fairShare, fair)
	m.pending.WithLabelValues(name).Set(float64(pending))
}
