package conformance

import (
	"context"
	"net"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

func TestRegistration(t *testing.T) {
	k := startKubelet(t)
	startAgent(t, "dgxh100", "version: v1\n", nil)
	k.waitCounts(5*time.Second, "nvidia.com/gpu", 8, 8)
}

// TestDroppedByKubelet: the kubelet's device manager, when the stream of an
// earlier registration of a resource ends after a newer registration was
// accepted, disconnects the newer client too and never asks it for devices
// again (what a config reload on a loaded node can run into). The agent
// notices that the kubelet stopped watching it and registers again.
func TestDroppedByKubelet(t *testing.T) {
	k := startKubelet(t)
	earlier := startStubPlugin(t, "nvidia.com/gpu", "stub-0")
	k.waitCounts(5*time.Second, "nvidia.com/gpu", 1, 1)
	startAgent(t, "dgxh100", "version: v1\n", nil)
	k.waitCounts(10*time.Second, "nvidia.com/gpu", 8, 8)
	earlier.Stop()
	// The kubelet disconnects the agent's client: its devices stay in
	// capacity, none allocatable.
	k.waitCounts(10*time.Second, "nvidia.com/gpu", 8, 0)
	// The agent registers again within its grace and the retry interval.
	k.waitCounts(30*time.Second, "nvidia.com/gpu", 8, 8)
	if _, err := k.admit("nvidia.com/gpu", 1); err != nil {
		t.Fatal(err)
	}
}

// stubPlugin is a device plugin of one healthy device that only lists it.
type stubPlugin struct {
	pluginapi.UnimplementedDevicePluginServer
	id string
}

func (p *stubPlugin) GetDevicePluginOptions(context.Context, *pluginapi.Empty) (*pluginapi.DevicePluginOptions, error) {
	return &pluginapi.DevicePluginOptions{}, nil
}

func (p *stubPlugin) ListAndWatch(_ *pluginapi.Empty, s grpc.ServerStreamingServer[pluginapi.ListAndWatchResponse]) error {
	if err := s.Send(&pluginapi.ListAndWatchResponse{Devices: []*pluginapi.Device{{ID: p.id, Health: pluginapi.Healthy}}}); err != nil {
		return err
	}
	<-s.Context().Done()
	return nil
}

// startStubPlugin serves a stubPlugin for resource and registers it with
// the kubelet; Stop on the returned server ends its stream.
func startStubPlugin(t *testing.T, resource, id string) *grpc.Server {
	t.Helper()
	socket := filepath.Join(pluginapi.DevicePluginPath, "stub-"+id+".sock")
	lis, err := net.Listen("unix", socket)
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	pluginapi.RegisterDevicePluginServer(srv, &stubPlugin{id: id})
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient("unix://"+pluginapi.KubeletSocket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close() }()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if _, err := pluginapi.NewRegistrationClient(conn).Register(ctx, &pluginapi.RegisterRequest{
		Version: pluginapi.Version, Endpoint: filepath.Base(socket), ResourceName: resource,
	}); err != nil {
		t.Fatal(err)
	}
	return srv
}
