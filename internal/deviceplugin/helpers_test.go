package deviceplugin

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	configv1 "github.com/gpuplane/gpuplane/api/config/v1"
	"github.com/gpuplane/gpuplane/internal/gpu"
	"github.com/gpuplane/gpuplane/internal/sharing"
)

func buildResources(t testing.TB, config string, n int) []*sharing.Resource {
	t.Helper()
	cfg, err := configv1.Load(strings.NewReader(config), configv1.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var gpus []gpu.Device
	for i := range n {
		gpus = append(gpus, gpu.Device{Index: i, Minor: i, UUID: fmt.Sprintf("GPU-%d", i), Name: "H100", MemoryMiB: 80000, NUMANode: i / 4})
	}
	rs, err := sharing.Build(cfg, gpus)
	if err != nil {
		t.Fatal(err)
	}
	return rs
}

// fakeHealth is a HealthSource the test flips.
type fakeHealth struct {
	mu        sync.Mutex
	unhealthy map[string]bool
	listeners []chan struct{}
}

func (f *fakeHealth) Healthy(uuid string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return !f.unhealthy[uuid]
}

func (f *fakeHealth) Changes() (<-chan struct{}, func()) {
	f.mu.Lock()
	defer f.mu.Unlock()
	ch := make(chan struct{}, 1)
	f.listeners = append(f.listeners, ch)
	return ch, func() {}
}

func (f *fakeHealth) set(uuid string, unhealthy bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.unhealthy == nil {
		f.unhealthy = map[string]bool{}
	}
	f.unhealthy[uuid] = unhealthy
	for _, ch := range f.listeners {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

// registry records registrations like the kubelet's registration socket.
// It stands in for the kubelet only in this package's unit tests; the
// conformance module drives the plugin with the kubelet's own code.
type registry struct {
	pluginapi.UnimplementedRegistrationServer
	mu   sync.Mutex
	reqs []*pluginapi.RegisterRequest
	srv  *grpc.Server
}

func (r *registry) Register(_ context.Context, req *pluginapi.RegisterRequest) (*pluginapi.Empty, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.reqs = append(r.reqs, req)
	return &pluginapi.Empty{}, nil
}

func (r *registry) count(resource string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, q := range r.reqs {
		if q.ResourceName == resource {
			n++
		}
	}
	return n
}

func startRegistry(t *testing.T, dir string) *registry {
	t.Helper()
	sock := filepath.Join(dir, "kubelet.sock")
	_ = os.Remove(sock)
	lis, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	r := &registry{srv: grpc.NewServer()}
	pluginapi.RegisterRegistrationServer(r.srv, r)
	go func() { _ = r.srv.Serve(lis) }()
	t.Cleanup(r.srv.Stop)
	return r
}

func dial(t *testing.T, socket string) pluginapi.DevicePluginClient {
	t.Helper()
	conn, err := grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return pluginapi.NewDevicePluginClient(conn)
}

func eventually(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %v: %s", within, what)
		}
		time.Sleep(5 * time.Millisecond) // polling interval
	}
}

// shortDir is a temp dir with a path short enough for unix sockets.
func shortDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "dp")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

func buildResourcesB(b *testing.B, config string, n int) *sharing.Resource {
	b.Helper()
	return buildResources(b, config, n)[0]
}

func tempSocketDir() (string, error) { return os.MkdirTemp("", "dpb") }

func removeAll(dir string) { _ = os.RemoveAll(dir) }

func dialB(b *testing.B, socket string) (pluginapi.DevicePluginClient, func()) {
	b.Helper()
	conn, err := grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Fatal(err)
	}
	return pluginapi.NewDevicePluginClient(conn), func() { conn.Close() }
}
