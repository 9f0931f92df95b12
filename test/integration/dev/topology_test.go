package dev_test

import (
	"context"
	"fmt"
	"maps"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpuplane/gpuplane/api/gpunode"
	"github.com/gpuplane/gpuplane/internal/cli/dev"
	"github.com/gpuplane/gpuplane/test/integration/framework"
)

// TestTopologyLayout lays out a small cluster of GB200 NVL72 trays in two
// blocks of racks, simulated trays (their agents label the clique from
// their GPUs' fabric) and kwok trays (labelled by dev up) sharing a rack,
// and checks every node's block, rack and NVLink-domain labels as the API
// server holds them.
func TestTopologyLayout(t *testing.T) {
	_, client := cluster(t, "--nodes", "3", "--profile", "gb200-nvl72", "--kwok-nodes", "3", "--scheduler", "none",
		"--topology", "blocks=2,racks=2,rack-nodes=2,nvl72")
	// Nodes fill racks of two in order: three trays with agents, then
	// three kwok trays; racks 1 and 2 form block 1, rack 3 block 2.
	want := map[string]struct{ block, rack int }{
		"gpu-node-1": {1, 1}, "gpu-node-2": {1, 1},
		"gpu-node-3": {1, 2}, "kwok-gpu-0": {1, 2},
		"kwok-gpu-1": {2, 3}, "kwok-gpu-2": {2, 3},
	}
	// The agents write the clique label once their first labelling pass
	// has read the GPUs' fabric.
	framework.Eventually(t, 60*time.Second, "every node labelled with its NVLink domain", func(ctx context.Context) (bool, error) {
		list, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: gpunode.LabelGPUClique})
		return err == nil && len(list.Items) == len(want), err
	})
	list, err := client.CoreV1().Nodes().List(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != len(want) {
		t.Fatalf("%d nodes, want %d", len(list.Items), len(want))
	}
	for _, n := range list.Items {
		w, ok := want[n.Name]
		if !ok {
			t.Errorf("unexpected node %s", n.Name)
			continue
		}
		wantLabels := map[string]string{
			dev.LabelTopologyBlock:  fmt.Sprintf("block-%d", w.block),
			dev.LabelTopologyRack:   fmt.Sprintf("rack-%d", w.rack),
			gpunode.LabelGPUClique:  dev.RackFabric(w.rack),
			gpunode.LabelGPUProduct: "NVIDIA-GB200",
			gpunode.LabelGPUCount:   "4",
		}
		got := map[string]string{}
		for k := range wantLabels {
			if v, ok := n.Labels[k]; ok {
				got[k] = v
			}
		}
		if !maps.Equal(got, wantLabels) {
			t.Errorf("node %s labels %v, want %v", n.Name, got, wantLabels)
		}
	}
}
