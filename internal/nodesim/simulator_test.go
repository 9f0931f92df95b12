package nodesim

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/gpuplane/gpuplane/api/gpupod"
)

// fakePlugin is a device plugin whose answers the test chooses.
type fakePlugin struct {
	pluginapi.UnimplementedDevicePluginServer
	devices     []string
	allocErr    error
	preferred   []string
	allocations chan []string
}

func (p *fakePlugin) GetDevicePluginOptions(context.Context, *pluginapi.Empty) (*pluginapi.DevicePluginOptions, error) {
	return &pluginapi.DevicePluginOptions{GetPreferredAllocationAvailable: p.preferred != nil}, nil
}

func (p *fakePlugin) ListAndWatch(_ *pluginapi.Empty, stream pluginapi.DevicePlugin_ListAndWatchServer) error {
	resp := &pluginapi.ListAndWatchResponse{}
	for _, id := range p.devices {
		resp.Devices = append(resp.Devices, &pluginapi.Device{ID: id, Health: pluginapi.Healthy})
	}
	if err := stream.Send(resp); err != nil {
		return err
	}
	<-stream.Context().Done()
	return nil
}

func (p *fakePlugin) GetPreferredAllocation(context.Context, *pluginapi.PreferredAllocationRequest) (*pluginapi.PreferredAllocationResponse, error) {
	return &pluginapi.PreferredAllocationResponse{ContainerResponses: []*pluginapi.ContainerPreferredAllocationResponse{{DeviceIDs: p.preferred}}}, nil
}

func (p *fakePlugin) Allocate(_ context.Context, req *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
	if p.allocErr != nil {
		return nil, p.allocErr
	}
	ids := req.GetContainerRequests()[0].GetDevicesIds()
	p.allocations <- ids
	return &pluginapi.AllocateResponse{ContainerResponses: []*pluginapi.ContainerAllocateResponse{{
		Envs: map[string]string{"FAKE_DEVICES": strings.Join(ids, ",")},
	}}}, nil
}

// serve starts the plugin on dir/name and registers it for resource.
func (p *fakePlugin) serve(t *testing.T, s *Simulator, name, resourceName string) {
	t.Helper()
	l, err := net.Listen("unix", filepath.Join(s.Dir(), name))
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	pluginapi.RegisterDevicePluginServer(srv, p)
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient("unix://"+s.RegistrationSocket(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close() }()
	opts, _ := p.GetDevicePluginOptions(t.Context(), nil)
	if _, err := pluginapi.NewRegistrationClient(conn).Register(t.Context(), &pluginapi.RegisterRequest{
		Version: pluginapi.Version, Endpoint: name, ResourceName: resourceName, Options: opts,
	}); err != nil {
		t.Fatal(err)
	}
}

// waitFor polls cond every 10ms for up to 10s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-deadline:
			t.Fatalf("timed out waiting for %s", what)
		case <-tick.C:
		}
	}
}

func TestAdmissionWithPlugins(t *testing.T) {
	tests := []struct {
		name       string
		plugin     *fakePlugin
		request    int64
		wantPhase  corev1.PodPhase
		wantReason string
		wantDevs   []string
	}{
		{
			name:    "Allocate error fails the pod",
			plugin:  &fakePlugin{devices: []string{"d0", "d1"}, allocErr: errors.New("device d0 is on fire")},
			request: 1, wantPhase: corev1.PodFailed, wantReason: reasonUnexpectedAdmission,
		},
		{
			name:    "an unusable preference falls back to free devices",
			plugin:  &fakePlugin{devices: []string{"d0", "d1", "d2"}, preferred: []string{"d9"}},
			request: 2, wantPhase: corev1.PodRunning, wantDevs: []string{"d0", "d1"},
		},
		{
			name:    "a valid preference is used",
			plugin:  &fakePlugin{devices: []string{"d0", "d1", "d2"}, preferred: []string{"d2", "d0"}},
			request: 2, wantPhase: corev1.PodRunning, wantDevs: []string{"d2", "d0"},
		},
		{
			name:    "more than the node has is refused before Allocate",
			plugin:  &fakePlugin{devices: []string{"d0"}},
			request: 2, wantPhase: corev1.PodFailed, wantReason: "OutOfexample.com/dev",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			client := fake.NewClientset()
			// t.TempDir's long names leave no room for socket paths.
			dir, err := os.MkdirTemp("", "nodesim-")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = os.RemoveAll(dir) })
			s, err := Start(t.Context(), Config{NodeName: "n1", Dir: dir, Client: client})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				if err := s.Stop(context.Background()); err != nil {
					t.Error(err)
				}
			})
			tt.plugin.allocations = make(chan []string, 4)
			tt.plugin.serve(t, s, "fake.sock", "example.com/dev")
			waitFor(t, "the plugin's devices", func() bool { return s.Resources()["example.com/dev"][1] == len(tt.plugin.devices) })

			q := *resource.NewQuantity(tt.request, resource.DecimalSI)
			pod := &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p", UID: "uid-p"},
				Spec: corev1.PodSpec{NodeName: "n1", Containers: []corev1.Container{{
					Name: "c", Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{"example.com/dev": q}},
				}}},
			}
			if _, err := client.CoreV1().Pods("ns").Create(t.Context(), pod, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			var got *corev1.Pod
			waitFor(t, "the pod's phase", func() bool {
				got, err = client.CoreV1().Pods("ns").Get(t.Context(), "p", metav1.GetOptions{})
				return err == nil && got.Status.Phase == tt.wantPhase
			})
			if tt.wantReason != "" {
				if got.Status.Reason != tt.wantReason {
					t.Errorf("reason %q (%s), want %q", got.Status.Reason, got.Status.Message, tt.wantReason)
				}
				// The event is recorded after the status, on its own.
				var evs *corev1.EventList
				waitFor(t, "the pod's event", func() bool {
					evs, err = client.CoreV1().Events("ns").List(t.Context(), metav1.ListOptions{})
					return err == nil && len(evs.Items) > 0
				})
				if len(evs.Items) != 1 || evs.Items[0].Reason != tt.wantReason || evs.Items[0].Type != corev1.EventTypeWarning {
					t.Errorf("events %+v, want one Warning %s", evs, tt.wantReason)
				}
				if s.release("ns/p") {
					t.Error("a refused pod still held devices")
				}
				return
			}
			a, err := gpupod.ReadAllocation(got)
			if err != nil || a == nil {
				t.Fatalf("allocation %v, %v", a, err)
			}
			if ids := a.DeviceIDs("example.com/dev"); strings.Join(ids, ",") != strings.Join(tt.wantDevs, ",") {
				t.Errorf("devices %v, want %v", ids, tt.wantDevs)
			}
			if env := a.Containers[0].Env["FAKE_DEVICES"]; env != strings.Join(tt.wantDevs, ",") {
				t.Errorf("env FAKE_DEVICES=%q, want the allocated devices", env)
			}
		})
	}
}
