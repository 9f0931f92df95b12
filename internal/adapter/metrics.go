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
	cycleDuration  prometheus.Histogram
	guaranteed     *prometheus.GaugeVec
	waiting        *prometheus.GaugeVec
	oldestGang     *prometheus.GaugeVec
	// waitingSeen and gangSeen are the label values set by the last
	// cycle, so that a reason or queue with nothing waiting any more loses
	// its series instead of keeping its last value; queueSeen the queues
	// last reported, so that a deleted queue loses its series.
	waitingSeen map[[2]string]bool
	gangSeen    map[string]bool
	queueSeen   map[string]bool
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
		cycleDuration: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "gpuplane_scheduler_cycle_duration_seconds",
			Help: "Time of a whole scheduling cycle: snapshot, core, evictions, bind dispatch and status.", Buckets: buckets}),
		guaranteed: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "gpuplane_scheduler_queue_guaranteed",
			Help: "A queue's guarantee (spec.resources[].guaranteed), in the units of gpuplane_scheduler_queue_usage."}, []string{"queue", "resource"}),
		waiting: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "gpuplane_scheduler_pending_groups",
			Help: "Pod groups left waiting by the last cycle, by queue and reason: the core's (DoesNotFit, QueueLimit, WaitingForPreemption, ...), the reason a group was held back before the core (PodGroupNotFound, ...), or Waiting for one not yet tried."}, []string{"queue", "reason"}),
		oldestGang: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "gpuplane_scheduler_queue_oldest_pending_gang_timestamp_seconds",
			Help: "Creation time (Unix seconds) of the oldest waiting pod of a gang (minMember above 1) that the last cycle left waiting in the queue; no series while none waits."}, []string{"queue"}),
		waitingSeen: map[[2]string]bool{},
		gangSeen:    map[string]bool{},
		queueSeen:   map[string]bool{},
	}
	m.reg.MustRegister(append(m.own(), collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))...)
	return m
}

// own lists the scheduler's own series.
func (m *metrics) own() []prometheus.Collector {
	return []prometheus.Collector{m.apiServed, m.refusedChoices, m.layouts, m.attempts, m.phases, m.bindDuration, m.commitDuration, m.e2e, m.binds, m.evictions, m.usage, m.fairShare, m.pending, m.leader, m.badNodes, m.cycleDuration, m.guaranteed, m.waiting, m.oldestGang}
}

// MetricCollectors returns the scheduler's own series, new and
// unregistered, for the reference docs (internal/docgen).
func MetricCollectors() []prometheus.Collector { return newMetrics().own() }

func (m *metrics) phase(name string, d time.Duration) {
	m.phases.WithLabelValues(name).Observe(d.Seconds())
}

// cycle records a cycle's attempts and length, and what it left waiting:
// groups by queue and reason, and the oldest waiting gang of each queue.
// placed holds the groups bound this cycle.
func (m *metrics) cycle(in *cycleInput, d *model.Decisions, placed map[string]bool, took time.Duration) {
	m.cycleDuration.Observe(took.Seconds())
	groups := map[string]bool{}
	for _, b := range d.Binds {
		groups[b.Group] = true
	}
	m.attempts.WithLabelValues("scheduled").Add(float64(len(groups)))
	m.attempts.WithLabelValues("unschedulable").Add(float64(len(d.Unplaced)))

	why := make(map[string]string, len(d.Unplaced))
	for _, u := range d.Unplaced {
		if _, ok := why[u.Group]; !ok {
			why[u.Group] = u.Code
		}
	}
	counts := map[[2]string]int{}
	oldest := map[string]time.Time{}
	for name, g := range in.groups {
		if len(g.pending) == 0 || placed[name] {
			continue
		}
		reason := why[name]
		switch {
		case g.held != nil:
			reason = g.held.Reason
		case reason == "":
			reason = waitingNotTried
		}
		counts[[2]string{g.queue, reason}]++
		if g.minMember <= 1 {
			continue
		}
		for _, pi := range g.pending {
			at := pi.pod.CreationTimestamp.Time
			if o, ok := oldest[g.queue]; !ok || at.Before(o) {
				oldest[g.queue] = at
			}
		}
	}
	for k := range m.waitingSeen {
		if counts[k] == 0 {
			m.waiting.DeleteLabelValues(k[0], k[1])
			delete(m.waitingSeen, k)
		}
	}
	for k, n := range counts {
		m.waiting.WithLabelValues(k[0], k[1]).Set(float64(n))
		m.waitingSeen[k] = true
	}
	for q := range m.gangSeen {
		if _, ok := oldest[q]; !ok {
			m.oldestGang.DeleteLabelValues(q)
			delete(m.gangSeen, q)
		}
	}
	for q, at := range oldest {
		m.oldestGang.WithLabelValues(q).Set(float64(at.UnixMilli()) / 1000)
		m.gangSeen[q] = true
	}
}

// waitingNotTried is gpuplane_scheduler_pending_groups' reason for a
// group that waits with no word from the core yet.
const waitingNotTried = "Waiting"

// queues sets each queue's usage, shares and pending groups, and drops
// the series of queues no longer in the hierarchy: a deleted queue's last
// values would otherwise be exported for as long as the scheduler runs.
func (m *metrics) queues(qs []model.QueueStatus, pending map[string]int32) {
	now := make(map[string]bool, len(qs))
	for _, q := range qs {
		now[q.Name] = true
	}
	for name := range m.queueSeen {
		if !now[name] {
			for _, g := range []*prometheus.GaugeVec{m.usage, m.fairShare, m.guaranteed, m.pending} {
				g.DeletePartialMatch(prometheus.Labels{"queue": name})
			}
		}
	}
	m.queueSeen = now
	for _, q := range qs {
		set := func(g *prometheus.GaugeVec, r model.Resources) {
			g.WithLabelValues(q.Name, "cpu").Set(float64(r.MilliCPU) / 1000)
			g.WithLabelValues(q.Name, "memory").Set(float64(r.MemoryMiB) * (1 << 20))
			g.WithLabelValues(q.Name, string(ResourceGPU)).Set(float64(r.GPUMilli) / model.MilliPerGPU)
		}
		set(m.usage, q.Usage)
		set(m.fairShare, q.FairShare)
		set(m.guaranteed, q.Guaranteed)
		m.pending.WithLabelValues(q.Name).Set(float64(pending[q.Name]))
	}
}
