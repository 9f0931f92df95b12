package agent

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/gpuplane/gpuplane/internal/health"
	"github.com/gpuplane/gpuplane/internal/metrics"
)

// TestHealthReachesMetrics wires the health monitor to the exporter as the
// agent does and injects an XID: the GPU's gpuplane_device_healthy drops
// to 0 with the reason, the monitor's own event counter is served, and
// gpuplane_health_monitor_up appears once (the exporter's, with a reason).
func TestHealthReachesMetrics(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	b := simNode(t, "dgxh100")
	devices, err := b.Devices(ctx)
	if err != nil {
		t.Fatal(err)
	}
	src := newMonitorHealth(devices)
	healthReg := prometheus.NewRegistry()
	e, err := metrics.NewExporter(metrics.Options{GPUs: b, Health: src, Logger: quietLogger(), ProcRoot: t.TempDir(), CheckpointPath: "/nonexistent"})
	if err != nil {
		t.Fatal(err)
	}
	h, err := metrics.NewHandler(e, healthReg)
	if err != nil {
		t.Fatal(err)
	}
	scrapeHandler := func() map[string]*dto.MetricFamily {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, metrics.Path, nil))
		if rec.Code != http.StatusOK {
			t.Fatalf("scrape: %d %s", rec.Code, rec.Body)
		}
		p := expfmt.NewTextParser(model.LegacyValidation)
		fams, err := p.TextToMetricFamilies(rec.Body)
		if err != nil {
			t.Fatalf("parsing /metrics: %v", err)
		}
		return fams
	}
	if v, reason, _ := gauge(scrapeHandler(), "gpuplane_health_monitor_up"); v != 0 || reason != "starting" {
		t.Errorf("before the monitor exists: gpuplane_health_monitor_up = %v{reason=%q}, want 0{reason=\"starting\"}", v, reason)
	}

	policy, err := health.NewPolicy(loadConfig(t, "version: v1\n").Health, func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	mon, err := health.NewMonitor(b, devices, health.Options{Policy: policy, CheckInterval: time.Second, Registerer: healthReg, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	src.set(mon)
	done := make(chan error, 1)
	go func() { done <- mon.Run(ctx) }()
	defer func() { cancel(); <-done }()
	pollUntil(t, 10*time.Second, "health monitoring", func() (bool, string) {
		return mon.Status().Monitoring, "not monitoring yet"
	})
	if err := b.InjectXID(3, 79); err != nil {
		t.Fatal(err)
	}
	var fams map[string]*dto.MetricFamily
	pollUntil(t, 10*time.Second, "GPU 3 unhealthy in /metrics", func() (bool, string) {
		fams = scrapeHandler()
		for _, m := range fams["gpuplane_device_healthy"].GetMetric() {
			if label(m, "gpu") == "3" {
				return m.GetGauge().GetValue() == 0, fmt.Sprintf("gpu 3 healthy=%v reason=%q", m.GetGauge().GetValue(), label(m, "reason"))
			}
		}
		return false, "no gpuplane_device_healthy for gpu 3"
	})
	if n := len(fams["gpuplane_health_critical_events_total"].GetMetric()); n == 0 {
		t.Error("gpuplane_health_critical_events_total is not served")
	}
	// The handler serves what it can when gathering fails; gather the way
	// it does to see that nothing clashes.
	reg := prometheus.NewRegistry()
	reg.MustRegister(e)
	if _, err := (prometheus.Gatherers{reg, healthReg}).Gather(); err != nil {
		t.Errorf("gathering the exporter with the health monitor's series: %v", err)
	}
	up := fams["gpuplane_health_monitor_up"].GetMetric()
	if len(up) != 1 || up[0].GetGauge().GetValue() != 1 || len(up[0].GetLabel()) != 1 {
		t.Errorf("gpuplane_health_monitor_up: %v, want one series with its reason label, value 1", up)
	}
}
