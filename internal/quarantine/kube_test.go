package quarantine

import (
	"context"
	"errors"
	"strings"
	"testing"

	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"

	configv1 "github.com/gpuplane/gpuplane/api/config/v1"
	"github.com/gpuplane/gpuplane/internal/gpu"
	"github.com/gpuplane/gpuplane/internal/gpu/sim"
	"github.com/gpuplane/gpuplane/internal/sharing"
)

// simDGXA100 is a simulated DGX A100, closed with the test.
func simDGXA100(t *testing.T) *sim.Backend {
	t.Helper()
	p, err := sim.Load("dgxa100")
	if err != nil {
		t.Fatal(err)
	}
	b, err := sim.New(p, sim.Options{NodeName: "n"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return b
}

func TestBackendGPUs(t *testing.T) {
	ctx := context.Background()
	b := simDGXA100(t)
	if err := b.SetMIGMode(ctx, 2, true); err != nil {
		t.Fatal(err)
	}
	gi, err := b.CreateGPUInstance(ctx, 2, "3g.20gb", nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.CreateComputeInstance(ctx, 2, gi.ID, ""); err != nil {
		t.Fatal(err)
	}
	devices, err := b.Devices(ctx)
	if err != nil {
		t.Fatal(err)
	}
	g := BackendGPUs{Backend: b, Devices: devices}

	if err := b.LoseGPU(3); err != nil {
		t.Fatal(err)
	}
	if err := g.Check(ctx, 3); !errors.Is(err, gpu.ErrGPULost) {
		t.Fatalf("Check of a lost GPU = %v", err)
	}
	if err := g.Reset(ctx, 3); err != nil {
		t.Fatal(err)
	}
	if err := g.Check(ctx, 3); err != nil {
		t.Fatalf("Check after the reset = %v", err)
	}
	// A reset destroys GPU 2's MIG instances: it must not pass as if
	// nothing had happened.
	if err := g.Check(ctx, 2); err != nil {
		t.Fatalf("Check of a MIG GPU before its reset = %v", err)
	}
	if err := g.Reset(ctx, 2); err != nil {
		t.Fatal(err)
	}
	if err := g.Check(ctx, 2); err == nil || !strings.Contains(err.Error(), "1 of its 1 MIG devices are gone") {
		t.Fatalf("Check after a reset that destroyed the MIG devices = %v", err)
	}
	if err := (BackendGPUs{Backend: &gpu.Null{}}).Reset(ctx, 0); !errors.Is(err, gpu.ErrNotSupported) {
		t.Fatalf("Reset on a backend without one = %v", err)
	}
}

type fakePodResources struct {
	resp *podresourcesv1.ListPodResourcesResponse
}

func (f fakePodResources) List(context.Context) (*podresourcesv1.ListPodResourcesResponse, error) {
	return f.resp, nil
}

func TestKubePodsOnGPU(t *testing.T) {
	ctx := context.Background()
	b := simDGXA100(t)
	devices, err := b.Devices(ctx)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := configv1.Load(strings.NewReader(""), configv1.Options{})
	if err != nil {
		t.Fatal(err)
	}
	rs, err := sharing.Build(cfg, devices)
	if err != nil {
		t.Fatal(err)
	}
	// The device plugin gave GPU 3 to dp-pod.
	list := fakePodResources{&podresourcesv1.ListPodResourcesResponse{PodResources: []*podresourcesv1.PodResources{{
		Namespace: "ns", Name: "dp-pod", Containers: []*podresourcesv1.ContainerResources{{
			Devices: []*podresourcesv1.ContainerDevices{{ResourceName: "nvidia.com/gpu", DeviceIds: []string{devices[3].UUID}}},
		}},
	}}}}
	served := sharing.NewServed(rs)
	k := NewKubePods(list, func() *sharing.Served { return served }, nil, nil)
	// Pods using DRA claims prepared on GPU 3: claim-pod, and dp-pod
	// once more (one entry).
	claimErr := errors.New("the API server is away")
	var failClaims bool
	k.SetClaimPods(func(_ context.Context, index int) ([]PodRef, error) {
		if failClaims {
			return nil, claimErr
		}
		if index != 3 {
			return nil, nil
		}
		return []PodRef{{Namespace: "ns", Name: "claim-pod", UID: "u1"}, {Namespace: "ns", Name: "dp-pod"}}, nil
	})
	for _, tc := range []struct {
		name  string
		index int
		want  []string
	}{
		{"the plugin's pod and the claim's", 3, []string{"ns/dp-pod", "ns/claim-pod"}},
		{"a GPU no one holds", 2, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := k.OnGPU(ctx, tc.index)
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, p := range got {
				names = append(names, p.String())
			}
			if strings.Join(names, ",") != strings.Join(tc.want, ",") {
				t.Errorf("OnGPU(%d) = %v, want %v", tc.index, names, tc.want)
			}
		})
	}
	t.Run("the claims cannot be read", func(t *testing.T) {
		failClaims = true
		if _, err := k.OnGPU(ctx, 3); !errors.Is(err, claimErr) {
			t.Errorf("OnGPU = %v, want the claims' error: a drain must not pass for empty", err)
		}
	})
}
