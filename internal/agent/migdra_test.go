package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"

	apidra "github.com/gpuplane/gpuplane/api/dra"
	"github.com/gpuplane/gpuplane/internal/cdi"
	"github.com/gpuplane/gpuplane/internal/dra"
	"github.com/gpuplane/gpuplane/internal/gpu/sim"
	"github.com/gpuplane/gpuplane/internal/ledger"
	"github.com/gpuplane/gpuplane/internal/mig"
)

// allocatedClaim is a claim in ns of the node's devices, reserved for
// the given pods.
func allocatedClaim(uid, name string, pods []string, devices ...string) *resourceapi.ResourceClaim {
	c := &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID(uid)},
		Status:     resourceapi.ResourceClaimStatus{Allocation: &resourceapi.AllocationResult{}},
	}
	for i, d := range devices {
		c.Status.Allocation.Devices.Results = append(c.Status.Allocation.Devices.Results, resourceapi.DeviceRequestAllocationResult{
			Request: "r" + string(rune('0'+i)), Driver: apidra.DriverName, Pool: "node-a", Device: d,
		})
	}
	for _, p := range pods {
		c.Status.ReservedFor = append(c.Status.ReservedFor, resourceapi.ResourceClaimConsumerReference{Resource: "pods", Name: p, UID: types.UID("uid-" + p)})
	}
	return c
}

// draNode is a DGX H100 with GPU 1 in MIG mode (no instances), a DRA
// driver over it and a link to it whose API holds claims.
func draNode(t *testing.T, claims ...*resourceapi.ResourceClaim) (*sim.Backend, *draLink) {
	t.Helper()
	ctx := context.Background()
	b := simNode(t, "dgxh100")
	if err := b.SetMIGMode(ctx, 1, true); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	w, err := cdi.NewWriter(cdi.Options{Dir: dir + "/cdi"})
	if err != nil {
		t.Fatal(err)
	}
	l := ledger.New()
	d, err := dra.New(ctx, dra.Options{Backend: b, NodeName: "node-a", CDI: w, StateFile: dir + "/checkpoint.json", Ledger: l})
	if err != nil {
		t.Fatal(err)
	}
	var objs []*resourceapi.ResourceClaim
	for _, c := range claims {
		res, err := d.PrepareResourceClaims(ctx, []*resourceapi.ResourceClaim{c})
		if err != nil || res[c.UID].Err != nil {
			t.Fatalf("preparing %s: %v %v", c.Name, err, res[c.UID].Err)
		}
		objs = append(objs, c)
	}
	client := fake.NewClientset()
	for _, c := range objs {
		if _, err := client.ResourceV1().ResourceClaims(c.Namespace).Create(ctx, c, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	link := newDRALink(b, nil)
	link.driver, link.ledger, link.client = d, l, client
	return b, link
}

func TestDRALinkPodsOn(t *testing.T) {
	ctx := context.Background()
	_, link := draNode(t,
		allocatedClaim("u-dyn", "dyn", []string{"trainer", "helper"}, "gpu-1-mig-3g-40gb-4-4"),
		allocatedClaim("u-whole", "whole", []string{"solo"}, "gpu-2"),
		allocatedClaim("u-idle", "idle", nil, "gpu-3"),
	)
	// The device plugin's pod on GPU 2 is "solo" too: one entry.
	plugin := []mig.Pod{{Namespace: "ns", Name: "solo", UID: "uid-solo", GPUs: []int{2}}}
	for _, tc := range []struct {
		name string
		gpus map[int]bool
		want []string
	}{
		{"a dynamic MIG claim used by two pods", map[int]bool{1: true}, []string{"ns/helper[1] claims [dyn]", "ns/solo[2] claims []", "ns/trainer[1] claims [dyn]"}},
		{"a whole GPU held by the plugin's pod and its claim", map[int]bool{2: true}, []string{"ns/solo[2] claims [whole]"}},
		{"a claim no pod uses is waited for", map[int]bool{3: true}, []string{"ResourceClaim ns/idle (no pod)[3] claims [idle]", "ns/solo[2] claims []"}},
		{"a GPU nobody holds", map[int]bool{5: true}, []string{"ns/solo[2] claims []"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := link.migPodsOn(ctx, tc.gpus, slices.Clone(plugin))
			if err != nil {
				t.Fatal(err)
			}
			var s []string
			for _, p := range got {
				s = append(s, p.String()+fmt.Sprint(p.GPUs)+" claims "+fmt.Sprint(p.Claims))
			}
			slices.Sort(s)
			if !slices.Equal(s, tc.want) {
				t.Errorf("pods %q, want %q", s, tc.want)
			}
		})
	}

	t.Run("the quarantine evicts the claims' pods, not a claim without one", func(t *testing.T) {
		refs, err := link.quarantinePods(ctx, 1)
		if err != nil {
			t.Fatal(err)
		}
		if len(refs) != 2 || refs[0].Name != "trainer" || refs[0].UID != "uid-trainer" || refs[1].Name != "helper" {
			t.Errorf("pods on GPU 1 = %+v", refs)
		}
		if refs, _ := link.quarantinePods(ctx, 3); len(refs) != 0 {
			t.Errorf("pods on GPU 3 = %+v", refs)
		}
	})

	t.Run("the claim replaced by a new one of its name", func(t *testing.T) {
		if err := link.client.ResourceV1().ResourceClaims("ns").Delete(ctx, "whole", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		c := allocatedClaim("u-new", "whole", []string{"someone-else"}, "gpu-4")
		if _, err := link.client.ResourceV1().ResourceClaims("ns").Create(ctx, c, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		got, err := link.migPodsOn(ctx, map[int]bool{2: true}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != 1 || got[0].Name != "" || got[0].Claims[0] != "whole" {
			t.Errorf("pods on GPU 2 = %+v, want the prepared claim alone", got)
		}
	})

	t.Run("a GPU off the bus still shows its claims' pods", func(t *testing.T) {
		b := link.gpus.(*sim.Backend)
		if err := b.LoseGPU(1); err != nil {
			t.Fatal(err)
		}
		defer func() { _ = b.Recover(1) }()
		refs, err := link.quarantinePods(ctx, 1)
		if err != nil || len(refs) != 2 {
			t.Errorf("pods on the lost GPU 1 = %+v, %v", refs, err)
		}
	})

	t.Run("off without the DRA driver", func(t *testing.T) {
		var off *draLink
		got, err := off.migPodsOn(ctx, map[int]bool{1: true}, plugin)
		if err != nil || len(got) != 1 {
			t.Errorf("migPodsOn with DRA off = %v, %v", got, err)
		}
		if hs, err := (&draLink{}).holders(ctx, 1); hs != nil || err != nil {
			t.Errorf("holders with DRA off = %v, %v", hs, err)
		}
	})
}

func TestClaimGuard(t *testing.T) {
	ctx := context.Background()
	b, link := draNode(t, allocatedClaim("u-dyn", "dyn", []string{"trainer"}, "gpu-1-mig-3g-40gb-4-4"))
	hw := claimGuard{Hardware: b, link: link}
	gis, err := b.GPUInstances(ctx, 1)
	if err != nil || len(gis) != 1 {
		t.Fatalf("the claim's instance: %+v, %v", gis, err)
	}
	claimGI := gis[0].ID

	t.Run("the claim's instance is no part of the GPU's layout", func(t *testing.T) {
		gpus, err := mig.GPUs(ctx, hw)
		if err != nil {
			t.Fatal(err)
		}
		if l := gpus[1].Current; !l.Enabled || l.Count() != 0 {
			t.Errorf("GPU 1's layout = %s, want MIG with no devices", l)
		}
		// The config the node runs (MIG on, no static devices) has
		// nothing to put back.
		spec, err := mig.ParseBytes([]byte("version: v1\nmig-configs:\n  dra:\n    - devices: [1]\n      mig-enabled: true\n      mig-devices: {}\n"))
		if err != nil {
			t.Fatal(err)
		}
		plan, err := mig.NewPlan(spec, "dra", gpus)
		if err != nil {
			t.Fatal(err)
		}
		if len(plan.Changes) != 0 {
			t.Errorf("a claim's dynamic instance is planned away: %+v", plan.Changes)
		}
		if gis, _ := hw.GPUInstances(ctx, 1); len(gis) != 0 {
			t.Errorf("GPUInstances shows the claim's: %+v", gis)
		}
	})

	t.Run("destroying it or leaving MIG mode is refused", func(t *testing.T) {
		for name, err := range map[string]error{
			"DestroyComputeInstance": hw.DestroyComputeInstance(ctx, 1, claimGI, 0),
			"DestroyGPUInstance":     hw.DestroyGPUInstance(ctx, 1, claimGI),
			"SetMIGMode(false)":      hw.SetMIGMode(ctx, 1, false),
		} {
			if !errors.Is(err, ErrClaimInstance) {
				t.Errorf("%s = %v, want ErrClaimInstance", name, err)
			}
		}
		// A layout change of the GPU cannot take the instance either.
		err := mig.ApplyGPU(ctx, hw, 1, mig.Layout{Enabled: false}, nil)
		if !errors.Is(err, ErrClaimInstance) {
			t.Errorf("ApplyGPU to whole GPU = %v, want ErrClaimInstance", err)
		}
		if gis, _ := b.GPUInstances(ctx, 1); len(gis) != 1 || gis[0].ID != claimGI {
			t.Errorf("the claim's instance is gone: %+v", gis)
		}
	})

	t.Run("other GPUs change freely", func(t *testing.T) {
		if err := hw.SetMIGMode(ctx, 4, true); err != nil {
			t.Fatal(err)
		}
		if err := hw.SetMIGMode(ctx, 4, false); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("withdrawn from the DRA driver and read again", func(t *testing.T) {
		gate := newMIGGate(make(chan struct{}, 1))
		devs := migDevices{gate: gate, link: link, log: slog.New(slog.DiscardHandler)}
		devs.Withdraw([]int{4})
		if got := link.driver.Withdrawn(); !slices.Equal(got, []int{4}) {
			t.Errorf("DRA withdrawn = %v", got)
		}
		if err := b.SetMIGMode(ctx, 4, true); err != nil {
			t.Fatal(err)
		}
		devs.Withdraw(nil)
		if got := link.driver.Withdrawn(); len(got) != 0 {
			t.Errorf("DRA withdrawn = %v", got)
		}
		var mig4, whole4 bool
		for _, s := range link.driver.Resources().Pools["node-a"].Slices {
			for _, d := range s.Devices {
				mig4 = mig4 || d.Name == "gpu-4-mig-1g-10gb-0-1"
				whole4 = whole4 || d.Name == "gpu-4"
			}
		}
		if !mig4 || whole4 {
			t.Errorf("after GPU 4 entered MIG mode: MIG devices published %v, whole GPU published %v", mig4, whole4)
		}
	})
}
