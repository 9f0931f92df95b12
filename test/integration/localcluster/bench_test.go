package localcluster_test

import (
	"context"
	"testing"
	"time"

	"github.com/gpuplane/gpuplane/internal/localcluster"
	"github.com/gpuplane/gpuplane/test/integration/framework"
)

// BenchmarkStart measures a control plane from nothing to ready (etcd,
// kube-apiserver, kube-controller-manager and kwok, with the default
// ServiceAccount in place) with cached binaries. Stopping it is reported
// separately as stop-s/op.
func BenchmarkStart(b *testing.B) {
	cfg := localcluster.DefaultConfig()
	framework.RequireBinaries(b, cfg)
	var stopping time.Duration
	for b.Loop() {
		cp, err := localcluster.Start(b.Context(), cfg)
		if err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		began := time.Now()
		if err := cp.Stop(context.Background()); err != nil {
			b.Fatal(err)
		}
		stopping += time.Since(began)
		b.StartTimer()
	}
	b.ReportMetric(stopping.Seconds()/float64(b.N), "stop-s/op")
}
