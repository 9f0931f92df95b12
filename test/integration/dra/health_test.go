package dra_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	configv1 "github.com/gpuplane/gpuplane/api/config/v1"
	apidra "github.com/gpuplane/gpuplane/api/dra"
	"github.com/gpuplane/gpuplane/internal/cdi"
	"github.com/gpuplane/gpuplane/internal/dra"
	"github.com/gpuplane/gpuplane/internal/gpu/sim"
	"github.com/gpuplane/gpuplane/internal/health"
	"github.com/gpuplane/gpuplane/internal/nodesim"
	"github.com/gpuplane/gpuplane/test/integration/framework"
)

// monitorHealth is the health monitor as the driver's health source, as
// the agent wires it.
type monitorHealth struct{ m *health.Monitor }

func (h monitorHealth) Unhealthy(uuid string) (string, bool) {
	d, ok := h.m.Device(uuid)
	if !ok || d.Healthy {
		return "", false
	}
	return d.Reason, true
}

// TestUnhealthyGPUTainted runs the driver in the test's process over a
// simulated node whose faults the test injects (the agent's own process
// cannot be reached for that), with the agent's health monitor: a GPU
// that falls off the bus is tainted in the ResourceSlice, and
// kube-scheduler stops allocating it.
func TestUnhealthyGPUTainted(t *testing.T) {
	const nodeName = "dra-health"
	installClasses(t)
	ctx := t.Context()
	dir, err := os.MkdirTemp("", "dra-h-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	sim1, err := nodesim.Start(ctx, nodesim.Config{NodeName: nodeName, Dir: filepath.Join(dir, "k"), Client: env.Client, DeleteNodeOnStop: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_ = sim1.Stop(c)
		_ = env.Client.ResourceV1().ResourceSlices().DeleteCollection(c, metav1.DeleteOptions{}, metav1.ListOptions{FieldSelector: "spec.nodeName=" + nodeName})
	})
	p, err := sim.Parse(strings.NewReader(profile), "test")
	if err != nil {
		t.Fatal(err)
	}
	backend, err := sim.New(p, sim.Options{NodeName: nodeName})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = backend.Close() })
	devices, err := backend.Devices(ctx)
	if err != nil {
		t.Fatal(err)
	}
	policy, err := health.NewPolicy(configv1.Health{}, func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	monitor, err := health.NewMonitor(backend, devices, health.Options{Policy: policy, CheckInterval: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(context.Background())
	done := make(chan error, 2)
	running := 2
	t.Cleanup(func() {
		stop()
		for ; running > 0; running-- {
			<-done
		}
	})
	go func() { done <- monitor.Run(runCtx) }()
	w, err := cdi.NewWriter(cdi.Options{Dir: filepath.Join(dir, "cdi")})
	if err != nil {
		t.Fatal(err)
	}
	driver, err := dra.New(ctx, dra.Options{Backend: backend, NodeName: nodeName, CDI: w, StateFile: filepath.Join(dir, "state.json"), Health: monitorHealth{monitor}})
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		done <- driver.Serve(runCtx, dra.ServeOptions{Client: env.Client, RegistrarDir: sim1.PluginRegistryDir(),
			PluginDir: filepath.Join(sim1.PluginsDir(), apidra.DriverName), Resync: 200 * time.Millisecond})
	}()
	framework.Eventually(t, 60*time.Second, "the driver's slices published", func(ctx context.Context) (bool, error) {
		select {
		case err := <-done:
			running--
			t.Fatalf("the driver or the monitor stopped: %v", err)
		default:
		}
		devs, err := sliceDevices(ctx, nodeName)
		if err != nil {
			return false, err
		}
		return len(devs) > 3 && slices.Contains(sim1.DRADrivers(), apidra.DriverName), fmt.Errorf("%d devices, drivers %v", len(devs), sim1.DRADrivers())
	})

	if err := backend.LoseGPU(2); err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, 60*time.Second, "gpu-2 tainted unhealthy", func(ctx context.Context) (bool, error) {
		devs, err := sliceDevices(ctx, nodeName)
		if err != nil {
			return false, err
		}
		ts := devs["gpu-2"].Taints
		ok := slices.ContainsFunc(ts, func(tn resourceapi.DeviceTaint) bool {
			return tn.Key == apidra.TaintUnhealthy && tn.Effect == resourceapi.DeviceTaintEffectNoSchedule
		})
		return ok, fmt.Errorf("taints %v", ts)
	})

	// Three whole GPUs are published, one tainted: a claim for three
	// cannot be allocated, one for two gets the healthy ones.
	ns := env.CreateNamespace(t)
	createTemplate(t, ns, "three", claimSpec([]request{{name: "gpu", class: "gpu.gpuplane.io", count: 3}}, "", ""))
	createTemplate(t, ns, "two", claimSpec([]request{{name: "gpu", class: "gpu.gpuplane.io", count: 2}}, "", ""))
	createPod(t, onNode(ns, "three", nodeName).ClaimTemplate("gpu", "three").Obj())
	pendingWith(t, ns, "three", "cannot allocate")
	createPod(t, onNode(ns, "two", nodeName).ClaimTemplate("gpu", "two").Obj())
	preparedCDI(t, ns, "two")
	if devs := allocatedDevices(podClaim(t, ns, "two")); slices.Contains(devs, "gpu-2") {
		t.Errorf("allocated %v: the unhealthy gpu-2 among them", devs)
	}
	deletePod(t, ns, "three")
	deletePod(t, ns, "two")
}
