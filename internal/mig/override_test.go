package mig_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gpuplane/gpuplane/api/gpunode"
	"github.com/gpuplane/gpuplane/internal/mig"
)

// TestReconcileProposals: gpuplane-scheduler's proposals
// (gpuplane.io/mig-proposal) are per-GPU overrides of the label's config,
// applied only to GPUs that hold no pod; nothing is ever evicted for one.
func TestReconcileProposals(t *testing.T) {
	mig7 := mig.Layout{Enabled: true, Devices: map[string]int{"1g.10gb": 7}}
	tests := []struct {
		name string
		// label is the node's nvidia.com/mig.config ("" none); busy the
		// GPUs pods hold.
		label     string
		busy      []int
		overrides map[int]mig.Layout
		wantState string
		wantMsg   string
		// wantMIG is, per GPU, its MIG device count after the pass.
		wantMIG map[int]int
	}{
		{
			name: "an idle GPU of a node with no config takes its proposal", busy: []int{0, 1, 2, 3, 4, 5, 6},
			overrides: map[int]mig.Layout{7: mig7},
			wantState: gpunode.MIGConfigStateSuccess + "/" + gpunode.ReasonMIGApplied, wantMsg: "GPU 7: whole GPU -> mig: 7x1g.10gb",
			wantMIG: map[int]int{7: 7, 6: 0, 0: 0},
		},
		{
			name: "a busy GPU's proposal waits and evicts nothing", busy: []int{3},
			overrides: map[int]mig.Layout{3: mig7},
			wantState: gpunode.MIGConfigStatePending + "/" + gpunode.ReasonMIGProposalWaiting, wantMsg: "GPU 3: mig: 7x1g.10gb waits for ml/train-3 to finish",
			wantMIG: map[int]int{3: 0},
		},
		{
			name: "idle GPUs take theirs while a busy one waits", busy: []int{3},
			overrides: map[int]mig.Layout{3: mig7, 5: mig7},
			wantState: gpunode.MIGConfigStatePending + "/" + gpunode.ReasonMIGProposalWaiting, wantMsg: "GPU 5: whole GPU -> mig: 7x1g.10gb; GPU 3: mig: 7x1g.10gb waits",
			wantMIG: map[int]int{3: 0, 5: 7},
		},
		{
			name: "a proposal overrides the label's config for its GPU", label: "all-1g.10gb", busy: []int{0, 1, 2, 3, 4, 5, 6},
			overrides: map[int]mig.Layout{7: {Enabled: false}},
			wantState: gpunode.MIGConfigStateSuccess + "/" + gpunode.ReasonMIGApplied,
			wantMIG:   map[int]int{7: 0, 6: 7},
		},
		{
			name: "a proposal that does not fit fails naming it", busy: nil,
			overrides: map[int]mig.Layout{2: {Enabled: true, Devices: map[string]int{"3g.40gb": 3}}},
			wantState: gpunode.MIGConfigStateFailed + "/" + gpunode.ReasonMIGInvalidConfig, wantMsg: "gpuplane.io/mig-proposal: GPU 2",
			wantMIG: map[int]int{2: 0},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b := newSim(t, "dgxh100")
			ctx := context.Background()
			c := &fakeCluster{config: []byte(twoConfigs), blocked: map[string]bool{}}
			if tc.label != "" {
				// The label's config is in place before the proposal.
				spec, _ := mig.ParseBytes([]byte(twoConfigs))
				gpus, _ := mig.GPUs(ctx, b)
				p, err := mig.NewPlan(spec, tc.label, gpus)
				if err != nil {
					t.Fatal(err)
				}
				applyPlan(t, b, p)
				c.name = tc.label
			}
			for _, g := range tc.busy {
				c.pods = append(c.pods, mig.Pod{Namespace: "ml", Name: fmt.Sprintf("train-%d", g), UID: fmt.Sprintf("uid-%d", g), GPUs: []int{g}})
			}
			r := &mig.Reconciler{HW: b, Cluster: c, Devices: &fakeDevices{}, EvictionTimeout: 200 * time.Millisecond, Poll: 10 * time.Millisecond,
				Overrides: func(context.Context) (map[int]mig.Layout, error) { return tc.overrides, nil }}
			out := r.Reconcile(ctx)
			if got := out.Status.State + "/" + out.Status.Reason; got != tc.wantState || !strings.Contains(out.Status.Message, tc.wantMsg) {
				t.Fatalf("status %s %q, want %s containing %q", got, out.Status.Message, tc.wantState, tc.wantMsg)
			}
			if len(c.evicted) != 0 {
				t.Fatalf("evicted %v for a proposal", c.evicted)
			}
			devs, _ := b.Devices(ctx)
			for g, n := range tc.wantMIG {
				if len(devs[g].MIGDevices) != n {
					t.Errorf("GPU %d has %d MIG devices, want %d", g, len(devs[g].MIGDevices), n)
				}
			}
		})
	}
}

// TestReconcileProposalAppliesOnceIdle: the waiting proposal is applied
// by the pass after its GPU's pod has gone, and a pass after that changes
// nothing.
func TestReconcileProposalAppliesOnceIdle(t *testing.T) {
	b := newSim(t, "dgxh100")
	ctx := context.Background()
	c := &fakeCluster{blocked: map[string]bool{}, pods: []mig.Pod{{Namespace: "ml", Name: "train-3", UID: "u3", GPUs: []int{3}}}}
	prop, err := gpunode.ParseMIGProposal(`{"v":1,"gpus":[{"i":3,"mig":true,"devices":{"3g.40gb":2},"at":1}]}`)
	if err != nil {
		t.Fatal(err)
	}
	d := &fakeDevices{}
	r := &mig.Reconciler{HW: b, Cluster: c, Devices: d, Poll: 10 * time.Millisecond,
		Overrides: func(context.Context) (map[int]mig.Layout, error) { return mig.Overrides(prop), nil }}
	if out := r.Reconcile(ctx); out.Status.Reason != gpunode.ReasonMIGProposalWaiting || !out.Retry {
		t.Fatalf("with a pod on GPU 3: %+v", out.Status)
	}
	if last := d.withdrawn[len(d.withdrawn)-1]; len(last) != 0 {
		t.Fatalf("GPU 3 waits for its pod but its devices stay withdrawn: %v", d.withdrawn)
	}
	c.pods = nil
	if out := r.Reconcile(ctx); out.Status.State != gpunode.MIGConfigStateSuccess || len(out.Plan.Changes) != 1 {
		t.Fatalf("once GPU 3 is idle: %+v", out.Status)
	}
	devs, _ := b.Devices(ctx)
	if len(devs[3].MIGDevices) != 2 || devs[3].MIGDevices[0].Profile != "3g.40gb" {
		t.Fatalf("GPU 3 has %+v", devs[3].MIGDevices)
	}
	if out := r.Reconcile(ctx); out.Status.State != gpunode.MIGConfigStateSuccess || len(out.Plan.Changes) != 0 {
		t.Fatalf("third pass: %+v", out)
	}
}
