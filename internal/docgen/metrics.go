package docgen

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"sort"
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpuplane/gpuplane/internal/adapter"
	"github.com/gpuplane/gpuplane/internal/gpu/sim"
	"github.com/gpuplane/gpuplane/internal/health"
	"github.com/gpuplane/gpuplane/internal/metrics"
	"github.com/gpuplane/gpuplane/internal/quarantine"
)

// series is one metric of the reference.
type series struct {
	name, help, typ, dcgm string
	labels                []string
}

// capture is a prometheus.Registerer that keeps what is registered, so
// that the parts register their series as they do in the binaries.
type capture struct{ cs []prometheus.Collector }

func (c *capture) Register(x prometheus.Collector) error { c.cs = append(c.cs, x); return nil }
func (c *capture) MustRegister(xs ...prometheus.Collector) {
	c.cs = append(c.cs, xs...)
}
func (c *capture) Unregister(prometheus.Collector) bool { return false }

// descString matches prometheus.Desc's String form, the one way a Desc
// tells its name, help and labels.
var descString = regexp.MustCompile(`^Desc\{fqName: "(.*?)", help: "(.*?)"(?:, unit: "[^"]*")?, constLabels: \{[^}]*\}, variableLabels: \{(.*)\}\}$`)

func fromDesc(d *prometheus.Desc, typ, dcgm string) (series, error) {
	m := descString.FindStringSubmatch(d.String())
	if m == nil {
		return series{}, fmt.Errorf("cannot read descriptor %s", d)
	}
	s := series{name: m[1], help: strings.ReplaceAll(m[2], `\"`, `"`), typ: typ, dcgm: dcgm}
	if m[3] != "" {
		s.labels = strings.Split(m[3], ",")
	}
	return s, nil
}

// typeOfCollector says what kind of metric a client_golang collector is.
func typeOfCollector(c prometheus.Collector) (string, error) {
	// A Gauge has every method of a Counter: ask for it first.
	switch c.(type) {
	case *prometheus.GaugeVec, prometheus.Gauge:
		return "gauge", nil
	case *prometheus.CounterVec, prometheus.Counter:
		return "counter", nil
	case *prometheus.HistogramVec, prometheus.Histogram:
		return "histogram", nil
	}
	return "", fmt.Errorf("a collector of type %T", c)
}

func described(cs []prometheus.Collector) ([]series, error) {
	var out []series
	for _, c := range cs {
		typ, err := typeOfCollector(c)
		if err != nil {
			return nil, err
		}
		ch := make(chan *prometheus.Desc, 16)
		go func() { c.Describe(ch); close(ch) }()
		for d := range ch {
			s, err := fromDesc(d, typ, "")
			if err != nil {
				return nil, err
			}
			out = append(out, s)
		}
	}
	return out, nil
}

// metricsPage lists every series of the agent (the exporter's, the health
// monitor's, the quarantine's) and of the scheduler, from their
// descriptors, with dcgm-exporter's equivalents.
func metricsPage(_ string, out Pages) error {
	var agent []series
	for _, s := range metrics.Reference() {
		x, err := fromDesc(s.Desc, s.Type, s.DCGM)
		if err != nil {
			return err
		}
		agent = append(agent, x)
	}
	reg := &capture{}
	if err := quarantine.NewMetrics().Register(reg); err != nil {
		return err
	}
	p, err := sim.Builtin("dgxh100")
	if err != nil {
		return err
	}
	backend, err := sim.New(p, sim.Options{NodeName: "docs"})
	if err != nil {
		return err
	}
	devices, err := backend.Devices(context.Background())
	if err != nil {
		return err
	}
	if _, err := health.NewMonitor(backend, devices, health.Options{Registerer: reg}); err != nil {
		return err
	}
	more, err := described(reg.cs)
	if err != nil {
		return err
	}
	agent = append(agent, more...)
	sched, err := described(adapter.MetricCollectors())
	if err != nil {
		return err
	}
	if len(agent) < 30 || len(sched) < 10 {
		return errors.New("too few metrics found: the descriptors were not read")
	}
	var b strings.Builder
	b.WriteString(header("Metrics", "the metrics' descriptors"))
	b.WriteString("Every series gpuplane exports, read from the descriptors the binaries register. The agent serves\n" +
		"its series on port 9400 (`/metrics`), with dcgm-exporter's names and labels for the `DCGM_FI_*`\n" +
		"series, so dashboards and alerts written for dcgm-exporter keep working; the scheduler on\n" +
		"`--serve-address` (10259). The DCGM column says which dcgm-exporter series each stands for.\n\n" +
		"## gpuplane-agent\n\n| name | type | labels | help | dcgm-exporter |\n| --- | --- | --- | --- | --- |\n")
	writeRows(&b, agent, true)
	b.WriteString("\n## gpuplane-scheduler\n\n| name | type | labels | help |\n| --- | --- | --- | --- |\n")
	writeRows(&b, sched, false)
	out[Dir+"/metrics.md"] = []byte(b.String())
	return nil
}

func writeRows(b *strings.Builder, ss []series, dcgm bool) {
	sort.SliceStable(ss, func(i, j int) bool { return ss[i].name < ss[j].name })
	for _, s := range ss {
		labels := make([]string, len(s.labels))
		for i, l := range s.labels {
			labels[i] = code(l)
		}
		fmt.Fprintf(b, "| `%s` | %s | %s | %s |", s.name, s.typ, strings.Join(labels, ", "), cell(s.help))
		if dcgm {
			d := s.dcgm
			switch d {
			case s.name:
				d = "the same"
			case "":
				d = "none"
			}
			fmt.Fprintf(b, " %s |", cell(d))
		}
		b.WriteString("\n")
	}
}
