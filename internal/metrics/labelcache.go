package metrics

import (
	"sort"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// labelKey names one label set of the cache: a GPU, the kind of series,
// and the values that vary within the kind.
type labelKey struct {
	gpu     int
	kind    uint8
	a, b, c string // container, namespace, pod
	d, e    string // MIG profile and instance
}

// Label set kinds.
const (
	kindDevice  uint8 = iota // device labels + container, namespace, pod
	kindMIG                  // device labels + GPU_I_PROFILE, GPU_I_ID + container, namespace, pod
	kindDCGM                 // kindDevice + the driver version
	kindDCGMMIG              // kindMIG + the driver version
)

type labelEntry struct {
	pairs []*dto.LabelPair
	seen  uint64
}

// labelCache keeps the sorted label pairs of the busiest label sets from
// one scrape to the next, so that a scrape does not rebuild (and the
// garbage collector does not reclaim) the same pairs for every series.
// Cached slices are never modified: a changed label set gets a new slice,
// so a response still being encoded keeps reading the old one.
type labelCache struct {
	m   map[labelKey]*labelEntry
	gen uint64
}

func newLabelCache() *labelCache { return &labelCache{m: map[labelKey]*labelEntry{}} }

func (c *labelCache) begin() { c.gen++ }

// reset drops every label set, for when a value shared by all of them
// (the driver version) changes.
func (c *labelCache) reset() { clear(c.m) }

// end drops the label sets not used since begin.
func (c *labelCache) end() {
	for k, e := range c.m {
		if e.seen != c.gen {
			delete(c.m, k)
		}
	}
}

// pairs returns the label pairs for names and values, building them on
// first use of k.
func (c *labelCache) pairs(k labelKey, names, values []string) []*dto.LabelPair {
	if e, ok := c.m[k]; ok {
		e.seen = c.gen
		return e.pairs
	}
	ps := make([]*dto.LabelPair, len(names))
	for i := range names {
		ps[i] = &dto.LabelPair{Name: &names[i], Value: new(values[i])}
	}
	sort.Slice(ps, func(i, j int) bool { return ps[i].GetName() < ps[j].GetName() })
	c.m[k] = &labelEntry{pairs: ps, seen: c.gen}
	return ps
}

// cachedMetric is a const metric whose label pairs come from a labelCache.
type cachedMetric struct {
	desc   *prometheus.Desc
	labels []*dto.LabelPair
	typ    prometheus.ValueType
	value  float64
}

var _ prometheus.Metric = (*cachedMetric)(nil)

// Desc implements prometheus.Metric.
func (m *cachedMetric) Desc() *prometheus.Desc { return m.desc }

// Write implements prometheus.Metric.
func (m *cachedMetric) Write(out *dto.Metric) error {
	out.Label = m.labels
	if m.typ == prometheus.CounterValue {
		out.Counter = &dto.Counter{Value: &m.value}
	} else {
		out.Gauge = &dto.Gauge{Value: &m.value}
	}
	return nil
}
