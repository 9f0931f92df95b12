package dra

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"

	configv1 "github.com/gpuplane/gpuplane/api/config/v1"
	"github.com/gpuplane/gpuplane/internal/cdi"
	"github.com/gpuplane/gpuplane/internal/sharing"
)

// BenchmarkPrepare prepares and unprepares one claim per iteration on a
// simulated node (sim backend, CDI spec and checkpoint on the benchmark's
// temporary directory, fsync included) and reports the prepare latency's
// median and 99th percentile: whole GPUs, and a MIG device created for the
// claim (dynamic MIG); and, as the peer measured in the same run, the
// device plugin's write of one resource's CDI spec (the same validated,
// synced, renamed file write every prepare does once, with the checkpoint
// written the same way), which bounds how fast a prepare can be on this disk.
func BenchmarkPrepare(b *testing.B) {
	b.Run("peer-deviceplugin-cdi-write", func(b *testing.B) {
		backend := simBackend(b)
		devices, err := backend.Devices(context.Background())
		if err != nil {
			b.Fatal(err)
		}
		cfg, err := configv1.Load(strings.NewReader(""), configv1.Options{})
		if err != nil {
			b.Fatal(err)
		}
		rs, err := sharing.Build(cfg, devices)
		if err != nil {
			b.Fatal(err)
		}
		w, err := cdi.NewWriter(cdi.Options{Dir: b.TempDir()})
		if err != nil {
			b.Fatal(err)
		}
		lat := make([]time.Duration, 0, b.N)
		b.ResetTimer()
		for range b.N {
			start := time.Now()
			if _, err := w.Write(rs[0]); err != nil {
				b.Fatal(err)
			}
			lat = append(lat, time.Since(start))
		}
		b.StopTimer()
		reportLatency(b, lat)
	})
	for _, bc := range []struct {
		name   string
		device string
	}{{"gpu", "gpu-2"}, {"dynamic-mig", "gpu-0-mig-1g-10gb-3-1"}} {
		b.Run(bc.name, func(b *testing.B) {
			d := testDriver(b, simBackend(b), b.TempDir(), nil, nil)
			ctx := context.Background()
			lat := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			for i := range b.N {
				uid := fmt.Sprintf("bench-%d", i)
				c := claim(uid, bc.device).obj()
				start := time.Now()
				res, err := d.PrepareResourceClaims(ctx, []*resourceapi.ResourceClaim{c})
				lat = append(lat, time.Since(start))
				if err != nil || res[c.UID].Err != nil {
					b.Fatalf("prepare: %v %v", err, res[c.UID].Err)
				}
				if _, err := d.UnprepareResourceClaims(ctx, []kubeletplugin.NamespacedObject{{UID: types.UID(uid)}}); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			reportLatency(b, lat)
		})
	}
}

func reportLatency(b *testing.B, lat []time.Duration) {
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(lat[(len(lat)*99)/100].Microseconds()), "p99-µs")
}
