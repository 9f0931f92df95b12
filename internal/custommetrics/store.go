package custommetrics

import (
	"fmt"
	"io"
	"math"
	"sync"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// The metrics the API serves for pods, under dcgm-exporter's names.
const (
	// MetricGPUUtil is a pod's SM utilisation in percent (0 to 100),
	// averaged over the GPUs (or GPU shares, or MIG devices) it holds.
	MetricGPUUtil = "DCGM_FI_DEV_GPU_UTIL"
	// MetricFBUsed is the GPU memory a pod's processes use, in MiB, summed
	// over its GPUs.
	MetricFBUsed = "DCGM_FI_DEV_FB_USED"
)

// The agent's per-pod series the values come from.
const (
	seriesUtil = "gpuplane_pod_gpu_utilization_ratio"
	seriesMem  = "gpuplane_pod_gpu_memory_used_bytes"
)

// PodKey names a pod.
type PodKey struct{ Namespace, Name string }

// PodGPU is one pod's GPU use as of one scrape.
type PodGPU struct {
	// UtilPercent is MetricGPUUtil's value, MemMiB MetricFBUsed's.
	UtilPercent float64
	MemMiB      float64
	// At is when the agent's answer was read.
	At time.Time
}

// Store holds the latest GPU use of each pod.
type Store struct {
	mu   sync.RWMutex
	pods map[PodKey]PodGPU
}

// NewStore returns an empty store.
func NewStore() *Store { return &Store{pods: map[PodKey]PodGPU{}} }

// Get returns the pod's latest values if they were read at or after
// notBefore.
func (s *Store) Get(k PodKey, notBefore time.Time) (PodGPU, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	v, ok := s.pods[k]
	if !ok || v.At.Before(notBefore) {
		return PodGPU{}, false
	}
	return v, true
}

// Replace sets the values of every pod at once: pods not in pods are gone.
func (s *Store) Replace(pods map[PodKey]PodGPU) {
	s.mu.Lock()
	s.pods = pods
	s.mu.Unlock()
}

// maxSeries bounds the samples read from one agent's answer: a node runs
// at most a few hundred pods on a few dozen GPU shares each.
const maxSeries = 100000

// ParseAgent reads one agent's /metrics answer (Prometheus text format)
// and adds the GPU use of each pod in it to into, read at at. A pod's
// utilisation is the mean over the devices it holds of its containers'
// summed share of each; its memory is the sum over all of them.
func ParseAgent(r io.Reader, at time.Time, into map[PodKey]PodGPU) error {
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(r)
	if err != nil {
		return fmt.Errorf("parsing the agent's metrics: %w", err)
	}
	type device struct {
		pod PodKey
		dev string
	}
	util := map[device]float64{}
	mem := map[PodKey]float64{}
	n := 0
	read := func(name string, each func(k PodKey, dev string, v float64)) error {
		f := families[name]
		if f == nil {
			return nil
		}
		for _, m := range f.GetMetric() {
			if n++; n > maxSeries {
				return fmt.Errorf("the agent's answer has more than %d per-pod series", maxSeries)
			}
			var k PodKey
			dev := ""
			for _, l := range m.GetLabel() {
				switch l.GetName() {
				case "namespace":
					k.Namespace = l.GetValue()
				case "pod":
					k.Name = l.GetValue()
				case "UUID":
					dev = l.GetValue() + dev
				case "GPU_I_ID":
					dev += "/" + l.GetValue()
				}
			}
			v := gaugeValue(m)
			if k.Namespace == "" || k.Name == "" || math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
				continue // not a pod's, or not a usable value
			}
			each(k, dev, v)
		}
		return nil
	}
	if err := read(seriesUtil, func(k PodKey, dev string, v float64) { util[device{k, dev}] += v }); err != nil {
		return err
	}
	if err := read(seriesMem, func(k PodKey, _ string, v float64) { mem[k] += v }); err != nil {
		return err
	}
	sum, devs := map[PodKey]float64{}, map[PodKey]int{}
	for d, v := range util {
		sum[d.pod] += min(v, 1)
		devs[d.pod]++
	}
	for k := range mem {
		if _, ok := devs[k]; !ok {
			devs[k] = 0
		}
	}
	for k, nd := range devs {
		p := PodGPU{MemMiB: mem[k] / (1 << 20), At: at}
		if nd > 0 {
			p.UtilPercent = 100 * sum[k] / float64(nd)
		}
		into[k] = p
	}
	return nil
}

func gaugeValue(m *dto.Metric) float64 {
	switch {
	case m.GetGauge() != nil:
		return m.GetGauge().GetValue()
	case m.GetUntyped() != nil:
		return m.GetUntyped().GetValue()
	}
	return math.NaN()
}
