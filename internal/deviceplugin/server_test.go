package deviceplugin

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	configv1 "github.com/gpuplane/gpuplane/api/config/v1"
	"github.com/gpuplane/gpuplane/internal/sharing"
)

const timeSliced = "version: v1\nsharing:\n  timeSlicing:\n    resources:\n    - name: nvidia.com/gpu\n      replicas: 2\n"

func TestContainerResponse(t *testing.T) {
	tests := []struct {
		name     string
		config   string
		contract Contract
		ids      []string
		check    func(t *testing.T, r *pluginapi.ContainerAllocateResponse)
	}{
		{"envvar by uuid", "version: v1\n", Contract{ListStrategies: []string{"envvar"}, IDStrategy: "uuid"}, []string{"GPU-1", "GPU-3"},
			func(t *testing.T, r *pluginapi.ContainerAllocateResponse) {
				if got := r.Envs[EnvVisibleDevices]; got != "GPU-1,GPU-3" {
					t.Errorf("%s=%q", EnvVisibleDevices, got)
				}
			}},
		{"envvar by index", "version: v1\n", Contract{ListStrategies: []string{"envvar"}, IDStrategy: "index"}, []string{"GPU-1", "GPU-3"},
			func(t *testing.T, r *pluginapi.ContainerAllocateResponse) {
				if got := r.Envs[EnvVisibleDevices]; got != "1,3" {
					t.Errorf("%s=%q", EnvVisibleDevices, got)
				}
			}},
		{"replicas of one GPU are one device", timeSliced, Contract{ListStrategies: []string{"envvar"}, IDStrategy: "uuid"}, []string{"GPU-2::0", "GPU-2::1"},
			func(t *testing.T, r *pluginapi.ContainerAllocateResponse) {
				if got := r.Envs[EnvVisibleDevices]; got != "GPU-2" {
					t.Errorf("%s=%q", EnvVisibleDevices, got)
				}
			}},
		{"volume-mounts", "version: v1\n", Contract{ListStrategies: []string{"volume-mounts"}, IDStrategy: "uuid"}, []string{"GPU-0"},
			func(t *testing.T, r *pluginapi.ContainerAllocateResponse) {
				if r.Envs[EnvVisibleDevices] != VolumeMountDir || len(r.Mounts) != 1 || r.Mounts[0].ContainerPath != VolumeMountDir+"/GPU-0" || r.Mounts[0].HostPath != "/dev/null" {
					t.Errorf("envs %v mounts %v", r.Envs, r.Mounts)
				}
			}},
		{"cdi-annotations", "version: v1\n", Contract{ListStrategies: []string{"cdi-annotations"}, IDStrategy: "uuid", CDIAnnotationPrefix: "cdi.k8s.io/"}, []string{"GPU-0", "GPU-1"},
			func(t *testing.T, r *pluginapi.ContainerAllocateResponse) {
				want := "k8s.device-plugin.nvidia.com/gpu=GPU-0,k8s.device-plugin.nvidia.com/gpu=GPU-1"
				if got := r.Annotations["cdi.k8s.io/gpuplane_gpu"]; got != want {
					t.Errorf("annotations %v, want %q", r.Annotations, want)
				}
				if _, ok := r.Envs[EnvVisibleDevices]; ok {
					t.Error("CDI alone must not set NVIDIA_VISIBLE_DEVICES")
				}
			}},
		{"cdi-cri", "version: v1\n", Contract{ListStrategies: []string{"cdi-cri"}, IDStrategy: "index"}, []string{"GPU-5"},
			func(t *testing.T, r *pluginapi.ContainerAllocateResponse) {
				if len(r.CdiDevices) != 1 || r.CdiDevices[0].Name != "k8s.device-plugin.nvidia.com/gpu=5" {
					t.Errorf("cdi devices %v", r.CdiDevices)
				}
			}},
		{"device specs", "version: v1\n", Contract{ListStrategies: []string{"envvar"}, IDStrategy: "uuid", PassDeviceSpecs: true, DevRoot: "/host"}, []string{"GPU-2"},
			func(t *testing.T, r *pluginapi.ContainerAllocateResponse) {
				var paths []string
				for _, d := range r.Devices {
					paths = append(paths, d.ContainerPath+"<"+d.HostPath)
				}
				want := []string{"/dev/nvidiactl</host/dev/nvidiactl", "/dev/nvidia-uvm</host/dev/nvidia-uvm", "/dev/nvidia-uvm-tools</host/dev/nvidia-uvm-tools", "/dev/nvidia2</host/dev/nvidia2"}
				if !slices.Equal(paths, want) {
					t.Errorf("device specs %v, want %v", paths, want)
				}
			}},
		{"MPS", "version: v1\nsharing:\n  mps:\n    resources:\n    - name: nvidia.com/gpu\n      replicas: 4\n", Contract{ListStrategies: []string{"envvar"}, IDStrategy: "uuid", MPSRoot: "/run/mps"}, []string{"GPU-1::3"},
			func(t *testing.T, r *pluginapi.ContainerAllocateResponse) {
				if r.Envs[EnvMPSPipeDirectory] != "/run/mps/gpu/pipe" || r.Envs[EnvMPSPinnedMemLimit] != "0=20000M" || r.Envs[EnvMPSActiveThreadPercent] != "25" {
					t.Errorf("MPS envs %v", r.Envs)
				}
			}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			res := buildResources(t, tc.config, 8)[0]
			srv, err := NewServer(ServerOptions{Resource: res, Contract: tc.contract, Dir: t.TempDir()})
			if err != nil {
				t.Fatal(err)
			}
			resp, err := srv.Allocate(context.Background(), &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: tc.ids}}})
			if err != nil {
				t.Fatal(err)
			}
			tc.check(t, resp.ContainerResponses[0])
		})
	}
}

func TestAllocateErrors(t *testing.T) {
	h := &fakeHealth{}
	h.set("GPU-4", true)
	tests := []struct {
		name   string
		config string
		ids    []string
		code   codes.Code
		want   string
	}{
		{"unknown device", "version: v1\n", []string{"GPU-1", "GPU-77"}, codes.InvalidArgument, `"GPU-77"`},
		{"unhealthy device", "version: v1\n", []string{"GPU-1", "GPU-4"}, codes.FailedPrecondition, `"GPU-4"`},
		{"unhealthy GPU under a replica", timeSliced, []string{"GPU-4::1"}, codes.FailedPrecondition, `"GPU-4::1"`},
		{"failRequestsGreaterThanOne", "version: v1\nsharing:\n  timeSlicing:\n    failRequestsGreaterThanOne: true\n    resources:\n    - name: nvidia.com/gpu\n      replicas: 2\n", []string{"GPU-1::0", "GPU-2::0"}, codes.InvalidArgument, "only 1"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			res := buildResources(t, tc.config, 8)[0]
			srv, err := NewServer(ServerOptions{Resource: res, Contract: Contract{ListStrategies: []string{"envvar"}}, Health: h, Dir: t.TempDir()})
			if err != nil {
				t.Fatal(err)
			}
			_, err = srv.Allocate(context.Background(), &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: tc.ids}}})
			if status.Code(err) != tc.code || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want code %v mentioning %s", err, tc.code, tc.want)
			}
		})
	}
	t.Run("healthy others still allocate", func(t *testing.T) {
		res := buildResources(t, "version: v1\n", 8)[0]
		srv, _ := NewServer(ServerOptions{Resource: res, Contract: Contract{ListStrategies: []string{"envvar"}}, Health: h, Dir: t.TempDir()})
		if _, err := srv.Allocate(context.Background(), &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: []string{"GPU-3", "GPU-5"}}}}); err != nil {
			t.Fatal(err)
		}
	})
}

func TestServeOverSocket(t *testing.T) {
	dir := shortDir(t)
	h := &fakeHealth{}
	res := buildResources(t, timeSliced, 8)[0]
	srv, err := NewServer(ServerOptions{Resource: res, Contract: ContractFromConfig(mustDefault(t)), Health: h, Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()
	c := dial(t, srv.Socket())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	opts, err := c.GetDevicePluginOptions(ctx, &pluginapi.Empty{})
	if err != nil || !opts.GetPreferredAllocationAvailable {
		t.Fatalf("options %v, %v", opts, err)
	}
	stream, err := c.ListAndWatch(ctx, &pluginapi.Empty{})
	if err != nil {
		t.Fatal(err)
	}
	first, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if len(first.Devices) != 16 || first.Devices[9].Topology.Nodes[0].ID != 1 {
		t.Fatalf("first list: %d devices, device 9 %v", len(first.Devices), first.Devices[9])
	}
	h.set("GPU-6", true)
	second, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	var unhealthy []string
	for _, d := range second.Devices {
		if d.Health == pluginapi.Unhealthy {
			unhealthy = append(unhealthy, d.ID)
		}
	}
	if !slices.Equal(unhealthy, []string{"GPU-6::0", "GPU-6::1"}) {
		t.Errorf("unhealthy after the change: %v", unhealthy)
	}
	pref, err := c.GetPreferredAllocation(ctx, &pluginapi.PreferredAllocationRequest{ContainerRequests: []*pluginapi.ContainerPreferredAllocationRequest{{
		AvailableDeviceIDs: []string{"GPU-0::0", "GPU-0::1", "GPU-1::0"}, AllocationSize: 2,
	}}})
	if err != nil {
		t.Fatal(err)
	}
	if got := pref.ContainerResponses[0].DeviceIDs; len(got) != 2 || sharing.UnitID(got[0]) == sharing.UnitID(got[1]) {
		t.Errorf("preferred %v, want two distinct GPUs", got)
	}
	srv.Stop()
	if _, err := stream.Recv(); err == nil {
		t.Error("ListAndWatch still open after Stop")
	}
}

func mustDefault(t *testing.T) *configv1.Config {
	t.Helper()
	cfg, err := configv1.Default(configv1.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// TestReplaceWithHealthChanges replaces the served devices while health
// changes arrive: every stream must end up with the last list, whichever
// of the two signals its loop sees first.
func TestReplaceWithHealthChanges(t *testing.T) {
	dir := shortDir(t)
	h := &fakeHealth{}
	lists := [][]*sharing.Resource{buildResources(t, timeSliced, 2), buildResources(t, timeSliced, 3)}
	srv, err := NewServer(ServerOptions{Resource: lists[0][0], Health: h, Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	stream, err := dial(t, srv.Socket()).ListAndWatch(ctx, &pluginapi.Empty{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Recv(); err != nil {
		t.Fatal(err)
	}
	for i := range 100 {
		next := lists[(i+1)%2][0]
		srv.replace(next, Contract{})
		h.set("GPU-0", false) // no health answer changes, but a signal comes
		for {
			resp, err := stream.Recv()
			if err != nil {
				t.Fatalf("round %d: the stream ended before it had the %d devices of the new list: %v", i, len(next.Devices), err)
			}
			if len(resp.Devices) == len(next.Devices) {
				break
			}
		}
	}
}
