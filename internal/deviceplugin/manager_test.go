package deviceplugin

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// runManager runs a manager until the test ends or stop is called; stop
// returns Run's error.
func runManager(t *testing.T, dir string, s Set) (*Manager, func() error) {
	t.Helper()
	m, err := NewManager(ManagerOptions{Dir: dir, RetryInterval: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	var runErr error
	go func() { defer close(done); runErr = m.Run(ctx, s) }()
	stop := func() error { cancel(); <-done; return runErr }
	t.Cleanup(func() { _ = stop() })
	return m, stop
}

func TestManagerLifecycle(t *testing.T) {
	t.Run("registers, re-registers after a kubelet restart, cleans up", func(t *testing.T) {
		dir := shortDir(t)
		reg := startRegistry(t, dir)
		rs := buildResources(t, "version: v1\n", 2)
		m, stop := runManager(t, dir, Set{Resources: rs, Contract: Contract{ListStrategies: []string{"envvar"}}})
		eventually(t, 2*time.Second, "first registration", func() bool { return reg.count("nvidia.com/gpu") == 1 })
		sock := m.Servers()[0].Socket()

		// A kubelet restart: it wipes the directory and serves a new socket.
		reg.srv.Stop()
		entries, _ := os.ReadDir(dir)
		for _, e := range entries {
			os.Remove(filepath.Join(dir, e.Name()))
		}
		reg2 := startRegistry(t, dir)
		eventually(t, 2*time.Second, "re-registration", func() bool { return reg2.count("nvidia.com/gpu") == 1 })
		if _, err := os.Stat(sock); err != nil {
			t.Errorf("plugin socket not served again: %v", err)
		}
		if err := stop(); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(sock); !os.IsNotExist(err) {
			t.Errorf("socket left behind after stop: %v", err)
		}
	})
	t.Run("waits for a kubelet that is not there yet", func(t *testing.T) {
		dir := shortDir(t)
		rs := buildResources(t, "version: v1\n", 1)
		m, _ := runManager(t, dir, Set{Resources: rs})
		eventually(t, 2*time.Second, "server up", func() bool { return len(m.Servers()) == 1 })
		if n := m.Registrations()["nvidia.com/gpu"]; n != 0 {
			t.Fatalf("registered %d times without a kubelet", n)
		}
		if err := m.Ready(); err == nil || !strings.Contains(err.Error(), "nvidia.com/gpu not registered") || !strings.Contains(err.Error(), "registration socket") {
			t.Errorf("Ready without a kubelet = %v, want the resource and the missing socket named", err)
		}
		reg := startRegistry(t, dir)
		eventually(t, 2*time.Second, "registration once the kubelet appears", func() bool { return reg.count("nvidia.com/gpu") == 1 })
		eventually(t, 2*time.Second, "ready once registered", func() bool { return m.Ready() == nil })
	})
	t.Run("update serves the new resources", func(t *testing.T) {
		dir := shortDir(t)
		reg := startRegistry(t, dir)
		m, _ := runManager(t, dir, Set{Resources: buildResources(t, "version: v1\n", 2)})
		eventually(t, 2*time.Second, "first registration", func() bool { return reg.count("nvidia.com/gpu") == 1 })
		m.Update(Set{Resources: buildResources(t, "version: v1\nsharing:\n  timeSlicing:\n    renameByDefault: true\n    resources:\n    - name: nvidia.com/gpu\n      replicas: 3\n", 2)})
		eventually(t, 2*time.Second, "new resource registered", func() bool { return reg.count("nvidia.com/gpu.shared") == 1 })
		eventually(t, 2*time.Second, "old socket removed", func() bool {
			_, err := os.Stat(filepath.Join(dir, SocketName("nvidia.com/gpu")))
			return os.IsNotExist(err)
		})
	})
	t.Run("update in place keeps the registration and the stream", func(t *testing.T) {
		dir := shortDir(t)
		reg := startRegistry(t, dir)
		envvar := Contract{ListStrategies: []string{"envvar"}}
		m, _ := runManager(t, dir, Set{Resources: buildResources(t, "version: v1\n", 2), Contract: envvar})
		eventually(t, 2*time.Second, "first registration", func() bool { return reg.count("nvidia.com/gpu") == 1 })
		srv := m.Servers()[0]
		c := dial(t, srv.Socket())
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		stream, err := c.ListAndWatch(ctx, &pluginapi.Empty{})
		if err != nil {
			t.Fatal(err)
		}
		if first, err := stream.Recv(); err != nil || len(first.Devices) != 2 {
			t.Fatalf("first list %v, %v; want 2 devices", first, err)
		}
		m.Update(Set{Resources: buildResources(t, timeSliced, 2), Contract: envvar})
		next, err := stream.Recv()
		if err != nil {
			t.Fatalf("the stream ended on an in-place update: %v", err)
		}
		if len(next.Devices) != 4 || next.Devices[1].ID != "GPU-0::1" {
			t.Fatalf("list after the update: %v, want the 4 replicas", next.Devices)
		}
		if got := m.Servers(); len(got) != 1 || got[0] != srv {
			t.Errorf("servers after the update %v, want the same server", got)
		}
		if n := reg.count("nvidia.com/gpu"); n != 1 {
			t.Errorf("registered %d times, want once: registering again races the kubelet", n)
		}
		if n := m.Registrations()["nvidia.com/gpu"]; n != 1 || m.Ready() != nil {
			t.Errorf("registrations %d, ready %v after the update; want 1 and ready", n, m.Ready())
		}
		resp, err := c.Allocate(ctx, &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: []string{"GPU-1::1"}}}})
		if err != nil {
			t.Fatalf("allocating a replica the update added: %v", err)
		}
		if got := resp.ContainerResponses[0].Envs["NVIDIA_VISIBLE_DEVICES"]; got != "GPU-1" {
			t.Errorf("NVIDIA_VISIBLE_DEVICES = %q, want GPU-1", got)
		}
	})
}
