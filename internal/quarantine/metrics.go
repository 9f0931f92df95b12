package quarantine

import (
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpuplane/gpuplane/api/gpunode"
)

// Metrics are the quarantine's gpuplane_gpu_quarantine_* series.
type Metrics struct {
	state       *prometheus.GaugeVec
	transitions *prometheus.CounterVec
	durations   *prometheus.HistogramVec
	evictions   *prometheus.CounterVec
	resets      *prometheus.CounterVec
	refreshes   *prometheus.CounterVec
	toNode      prometheus.Histogram
}

// NewMetrics returns the series, not registered.
func NewMetrics() *Metrics {
	return &Metrics{
		state: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "gpuplane_gpu_quarantine_state",
			Help: "1 for the quarantine state each GPU is in (in-service, draining, resetting, validating, held, returned), 0 for the others.",
		}, []string{"gpu", "uuid", "state"}),
		transitions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gpuplane_gpu_quarantine_transitions_total",
			Help: "GPU quarantine steps taken, by the state left, the state entered and the fault's XID class.",
		}, []string{"from", "to", "class"}),
		durations: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "gpuplane_gpu_quarantine_state_duration_seconds",
			Help:    "How long GPUs stayed in each quarantine state.",
			Buckets: prometheus.ExponentialBuckets(0.1, 4, 10),
		}, []string{"state"}),
		evictions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gpuplane_gpu_quarantine_evictions_total",
			Help: "Evictions of pods on quarantined GPUs asked of the Eviction API, by result (evicted, refused, failed).",
		}, []string{"result"}),
		resets: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gpuplane_gpu_quarantine_resets_total",
			Help: "GPU resets tried by the quarantine, by result (ok, failed, unsupported).",
		}, []string{"result"}),
		refreshes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gpuplane_gpu_quarantine_inventory_refreshes_total",
			Help: "Reads of the GPUs by the DRA driver after a quarantine reset, so that its ResourceSlices show what the reset left, by result (ok, failed).",
		}, []string{"result"}),
		toNode: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "gpuplane_gpu_quarantine_fault_to_node_seconds",
			Help:    "From a critical GPU event to the Node showing the quarantine (condition, and taint for a node-wide fault).",
			Buckets: prometheus.ExponentialBuckets(0.005, 2, 12),
		}),
	}
}

// Register registers the series.
func (m *Metrics) Register(r prometheus.Registerer) error {
	for _, c := range []prometheus.Collector{m.state, m.transitions, m.durations, m.evictions, m.resets, m.refreshes, m.toNode} {
		if err := r.Register(c); err != nil {
			return err
		}
	}
	return nil
}

func (m *Metrics) setState(index int, uuid, from, to string) {
	gpu := strconv.Itoa(index)
	if from == "" {
		for _, s := range append([]string{stateInService}, gpunode.QuarantineStates()...) {
			m.state.WithLabelValues(gpu, uuid, s).Set(0)
		}
	} else {
		m.state.WithLabelValues(gpu, uuid, from).Set(0)
	}
	m.state.WithLabelValues(gpu, uuid, to).Set(1)
}

func (m *Metrics) transition(from, to, class string) {
	m.transitions.WithLabelValues(from, to, class).Inc()
}

func (m *Metrics) leave(state string, d time.Duration) {
	m.durations.WithLabelValues(state).Observe(d.Seconds())
}

func (m *Metrics) eviction(result string) { m.evictions.WithLabelValues(result).Inc() }
func (m *Metrics) reset(result string)    { m.resets.WithLabelValues(result).Inc() }
func (m *Metrics) refresh(result string)  { m.refreshes.WithLabelValues(result).Inc() }
func (m *Metrics) shown(d time.Duration)  { m.toNode.Observe(d.Seconds()) }
