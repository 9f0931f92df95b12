package metric_test

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpuplane/gpuplane/api/buildinfo"
	"github.com/gpuplane/gpuplane/internal/version/metric"
)

func TestBuildInfoGauge(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(metric.New(buildinfo.Info{Version: "v0.1.0", Commit: "abc", Date: "2026-11-27T18:02:11Z",
		GoVersion: "go1.26.0", KubernetesClient: "v0.36.3", Platform: "linux/amd64"}))
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	if len(mfs) != 1 || mfs[0].GetName() != metric.Name || len(mfs[0].GetMetric()) != 1 {
		t.Fatalf("gathered %v, want one %s series", mfs, metric.Name)
	}
	m := mfs[0].GetMetric()[0]
	if v := m.GetGauge().GetValue(); v != 1 {
		t.Errorf("value %v, want 1", v)
	}
	got := map[string]string{}
	for _, l := range m.GetLabel() {
		got[l.GetName()] = l.GetValue()
	}
	want := map[string]string{"version": "v0.1.0", "commit": "abc", "date": "2026-11-27T18:02:11Z",
		"go_version": "go1.26.0", "kubernetes_client": "v0.36.3", "platform": "linux/amd64"}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("label %s=%q, want %q", k, got[k], v)
		}
	}
	if len(got) != len(want) {
		t.Errorf("labels %v, want exactly %v", got, want)
	}
}
