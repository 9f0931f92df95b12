package dev_test

import (
	"context"
	"fmt"
	"maps"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
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

// TestGangInOneNVLinkDomain places a gang that requires one NVLink domain
// (examples/topology, Kueue's annotation) on two NVL72 racks of two trays,
// one tray of the first rack taken: only the second rack, a simulated tray
// whose agent labelled its clique and a kwok tray labelled by dev up, can
// hold both workers, so they must land there, as the API server records
// the binds.
func TestGangInOneNVLinkDomain(t *testing.T) {
	stateDir, client := cluster(t, "--nodes", "3", "--profile", "gb200-nvl72", "--kwok-nodes", "1", "--scheduler", "gpuplane",
		"--topology", "rack-nodes=2,nvl72")
	dumpOnFailure(t, stateDir)
	framework.Eventually(t, 60*time.Second, "every node labelled with its NVLink domain", func(ctx context.Context) (bool, error) {
		list, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: gpunode.LabelGPUClique})
		return err == nil && len(list.Items) == 4, err
	})
	blocker := framework.Pod("default", "blocker").GPUs(4).SchedulerName("gpuplane-scheduler").NodeSelector(corev1.LabelHostname, "gpu-node-1").Obj()
	if _, err := client.CoreV1().Pods("default").Create(t.Context(), blocker, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, 60*time.Second, "the blocker bound to gpu-node-1", func(ctx context.Context) (bool, error) {
		p, err := client.CoreV1().Pods("default").Get(ctx, "blocker", metav1.GetOptions{})
		return err == nil && p.Spec.NodeName == "gpu-node-1", err
	})
	example := filepath.Join(framework.RepoRoot(), "examples", "topology", "04-nvlink-gang.yaml")
	if out, err := kubectl(t, stateDir, "apply", "-f", example); err != nil {
		t.Fatalf("kubectl apply %s: %v\n%s", example, err, out)
	}
	var pods []corev1.Pod
	framework.Eventually(t, 90*time.Second, "both workers of nvlink-train bound", func(ctx context.Context) (bool, error) {
		list, err := client.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "job-name=nvlink-train"})
		if err != nil {
			return false, err
		}
		pods = list.Items
		bound := 0
		for _, p := range pods {
			if p.Spec.NodeName != "" {
				bound++
			}
		}
		return bound == 2, nil
	})
	want := dev.RackFabric(2)
	for _, p := range pods {
		n, err := client.CoreV1().Nodes().Get(t.Context(), p.Spec.NodeName, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got := n.Labels[gpunode.LabelGPUClique]; got != want {
			t.Errorf("pod %s on %s in NVLink domain %q, want %q (rack-2, the one rack with two free trays)", p.Name, n.Name, got, want)
		}
	}
}
