package deviceplugin

import (
	"context"
	"slices"
	"testing"
	"time"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// BenchmarkAllocateRoundTrip measures Allocate over the unix socket, as the
// kubelet calls it, on 8 GPUs time-sliced 10 ways (80 devices), asking for
// one replica. It reports the p50 and p99 latency of the round trip.
func BenchmarkAllocateRoundTrip(b *testing.B) {
	for _, tc := range []struct {
		name     string
		strategy []string
		request  int
	}{
		{"envvar/1-replica", []string{"envvar"}, 1},
		{"envvar+cdi-cri/10-replicas", []string{"envvar", "cdi-cri"}, 10},
	} {
		b.Run(tc.name, func(b *testing.B) {
			res := buildResourcesB(b, "version: v1\nsharing:\n  timeSlicing:\n    resources:\n    - name: nvidia.com/gpu\n      replicas: 10\n", 8)
			dir, err := tempSocketDir()
			if err != nil {
				b.Fatal(err)
			}
			defer removeAll(dir)
			srv, err := NewServer(ServerOptions{Resource: res, Contract: Contract{ListStrategies: tc.strategy, IDStrategy: "uuid", PassDeviceSpecs: true, DevRoot: "/"}, Dir: dir})
			if err != nil {
				b.Fatal(err)
			}
			if err := srv.Start(); err != nil {
				b.Fatal(err)
			}
			defer srv.Stop()
			c, closeConn := dialB(b, srv.Socket())
			defer closeConn()
			ids := make([]string, 0, len(res.Devices))
			for _, d := range res.Devices {
				ids = append(ids, d.ID)
			}
			req := &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{{}}}
			ctx := context.Background()
			lat := make([]time.Duration, 0, b.N)
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; b.Loop(); i++ {
				start := (i * tc.request) % len(ids)
				req.ContainerRequests[0].DevicesIds = ids[start:min(start+tc.request, len(ids))]
				t0 := time.Now()
				if _, err := c.Allocate(ctx, req); err != nil {
					b.Fatal(err)
				}
				lat = append(lat, time.Since(t0))
			}
			b.StopTimer()
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
			b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
		})
	}
}
