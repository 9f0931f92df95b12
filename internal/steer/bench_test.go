package steer

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	corev1 "k8s.io/api/core/v1"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/gpuplane/gpuplane/internal/deviceplugin"
	"github.com/gpuplane/gpuplane/internal/sharing"
)

// BenchmarkSteeredAdmission measures what the kubelet waits for when it
// admits a container of one replica on 8 GPUs time-sliced 10 ways:
// GetPreferredAllocation then Allocate over the plugin's unix socket.
// With the steerer, 80 pods await admission, each with a replica of its
// chosen GPU in mind, and only the last GPU has a replica free, so every
// call goes through 71 pods before one fits; without, the resource's own
// preference answers (the peer in the same run). With steered=none-fits
// the pods chose GPUs 0-6 only, as for a pod another scheduler placed: the
// steerer goes through all 80, then the preference leaves out the GPUs
// their choices fill (Avoid), going through them again.
func BenchmarkSteeredAdmission(b *testing.B) {
	for _, steered := range []string{"false", "true", "none-fits"} {
		b.Run("steered="+steered, func(b *testing.B) {
			res := benchResource(b)
			var pods []*corev1.Pod
			inUse := map[string]bool{}
			for i := range len(res.Devices) {
				d := &res.Devices[i]
				g := d.GPUIndex
				if steered == "none-fits" {
					g %= 7
				}
				p := placed(fmt.Sprint("p", i), i, fmt.Sprintf("%d:100", g)).Containers(corev1.ResourceName(res.Name), 1).Obj()
				pods = append(pods, p)
				if i < len(res.Devices)-1 {
					inUse[d.ID] = true // every replica but the last GPU's last
				}
			}
			var steer deviceplugin.Steerer
			if steered != "false" {
				steer = New(func() []*corev1.Pod { return pods }, nil, 8, slog.New(slog.DiscardHandler))
			}
			dir, err := os.MkdirTemp("", "steer-bench")
			if err != nil {
				b.Fatal(err)
			}
			defer os.RemoveAll(dir)
			srv, err := deviceplugin.NewServer(deviceplugin.ServerOptions{Resource: res, Steer: steer, Dir: dir,
				Contract: deviceplugin.Contract{ListStrategies: []string{"envvar"}, IDStrategy: "uuid", DevRoot: "/"}})
			if err != nil {
				b.Fatal(err)
			}
			if err := srv.Start(); err != nil {
				b.Fatal(err)
			}
			defer srv.Stop()
			conn, err := grpc.NewClient("unix://"+srv.Socket(), grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				b.Fatal(err)
			}
			defer conn.Close()
			c := pluginapi.NewDevicePluginClient(conn)
			var free []string
			for _, d := range res.Devices {
				if !inUse[d.ID] {
					free = append(free, d.ID)
				}
			}
			pref := &pluginapi.PreferredAllocationRequest{ContainerRequests: []*pluginapi.ContainerPreferredAllocationRequest{{AvailableDeviceIDs: free, AllocationSize: 1}}}
			alloc := &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{{}}}
			ctx := context.Background()
			lat := make([]time.Duration, 0, 1024)
			b.ReportAllocs()
			for b.Loop() {
				t0 := time.Now()
				p, err := c.GetPreferredAllocation(ctx, pref)
				if err != nil {
					b.Fatal(err)
				}
				alloc.ContainerRequests[0].DevicesIds = p.ContainerResponses[0].DeviceIDs
				if _, err := c.Allocate(ctx, alloc); err != nil {
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

// benchResource is 8 GPUs, each time-sliced 10 ways.
func benchResource(b *testing.B) *sharing.Resource {
	b.Helper()
	return steerNode(b, "version: v1\nsharing:\n  timeSlicing:\n    resources:\n    - name: nvidia.com/gpu\n      replicas: 10\n")
}
