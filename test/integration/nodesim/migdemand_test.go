package nodesim_test

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gpuplane/gpuplane/api/gpunode"
	"github.com/gpuplane/gpuplane/internal/adapter"
	"github.com/gpuplane/gpuplane/test/integration/framework"
)

const mig1g = "nvidia.com/mig-1g.10gb"

// runGPUplaneScheduler runs gpuplane-scheduler in-process, with the CRDs
// from deploy/crds, until the test ends.
func runGPUplaneScheduler(t testing.TB, cfg adapter.Config) {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	env.InstallCRDs(t, filepath.Join(filepath.Dir(file), "..", "..", "..", "deploy", "crds"))
	cfg.RESTConfig, cfg.SchedulerName = env.Config, "gpuplane-scheduler"
	if cfg.CycleInterval == 0 {
		cfg.CycleInterval = 200 * time.Millisecond
	}
	framework.RunScheduler(t, cfg)
}

func labelNode(t testing.TB, node, key, value string) {
	t.Helper()
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"labels": map[string]string{key: value}}})
	if _, err := env.Client.CoreV1().Nodes().Patch(t.Context(), node, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
}

// TestMIGLayoutFollowsDemand: on a simulated DGX H100 whose node opts in
// (gpuplane.io/mig-layout-policy=follow-demand), with seven whole-GPU
// pods running and one GPU idle, a pod asking for nvidia.com/mig-1g.10gb,
// which no GPU offers, makes the real gpuplane-scheduler propose a layout
// for the idle GPU; the real agent re-partitions that GPU alone, the new
// MIG devices become allocatable, the pod is bound and runs on them, and
// the seven pods keep their devices (PodResources). No pod is evicted.
func TestMIGLayoutFollowsDemand(t *testing.T) {
	const nodeName = "sim-h100-demand"
	ns := env.CreateNamespace(t)
	s := migNode(t, nodeName, ns)
	waitCapacity(t, nodeName, map[string]int64{gpuRes: 8})
	runGPUplaneScheduler(t, adapter.Config{MIGDemandMinWait: time.Second, MIGLayoutDwell: time.Minute, MIGProposalTimeout: time.Minute})

	// Seven whole-GPU pods, placed by gpuplane-scheduler before the node
	// opts in, leave one GPU idle.
	for i := range 7 {
		createPod(t, framework.Pod(ns, fmt.Sprintf("w%d", i)).GPUs(1).SchedulerName("gpuplane-scheduler").Obj())
	}
	index, _ := topology(t, nodeName)
	held := map[int]string{}
	for i := range 7 {
		name := fmt.Sprintf("w%d", i)
		ids := allocation(t, ns, name).DeviceIDs(gpuRes)
		if len(ids) != 1 {
			t.Fatalf("pod %s got %v", name, ids)
		}
		held[index[ids[0]].Index] = name
	}
	idle := -1
	for g := range 8 {
		if held[g] == "" {
			idle = g
		}
	}
	before := listPodResources(t, s)
	labelNode(t, nodeName, gpunode.LabelMIGLayoutPolicy, gpunode.MIGLayoutFollowDemand)

	start := time.Now()
	createPod(t, framework.Pod(ns, "mig").Limit(mig1g, "1").SchedulerName("gpuplane-scheduler").Obj())
	env.WaitPodPhase(t, ns, "mig", corev1.PodRunning, 90*time.Second)
	t.Logf("pending MIG pod to Running through a proposal: %v", time.Since(start))

	n, err := env.Client.CoreV1().Nodes().Get(t.Context(), nodeName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	prop, err := gpunode.ParseMIGProposal(n.Annotations[gpunode.MIGProposalAnnotation])
	if err != nil {
		t.Fatalf("the node's proposal: %v", err)
	}
	if len(prop.GPUs) != 1 || prop.GPUs[0].Index != idle || !prop.GPUs[0].MIG || prop.GPUs[0].Devices["1g.10gb"] != 7 {
		t.Fatalf("proposal %+v, want GPU %d (the idle one) in 7x1g.10gb", prop.GPUs, idle)
	}
	layout, err := gpunode.ParseMIGLayout(n.Annotations[gpunode.MIGLayoutAnnotation])
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range layout.GPUs {
		if want := g.Index == idle; g.MIG != want {
			t.Errorf("GPU %d: MIG %v, want %v", g.Index, g.MIG, want)
		}
	}
	if q := n.Status.Allocatable[mig1g]; q.Value() != 7 {
		t.Errorf("allocatable %s = %s, want 7", mig1g, q.String())
	}
	if ids := allocation(t, ns, "mig").DeviceIDs(mig1g); len(ids) != 1 {
		t.Errorf("the MIG pod holds %v of %s", ids, mig1g)
	}
	now := listPodResources(t, s)
	for g, name := range held {
		p, err := env.Client.CoreV1().Pods(ns).Get(t.Context(), name, metav1.GetOptions{})
		if err != nil || p.Status.Phase != corev1.PodRunning || p.DeletionTimestamp != nil {
			t.Errorf("pod %s on GPU %d disturbed: %v", name, g, err)
			continue
		}
		if !sameSet(now[ns+"/"+name][gpuRes], before[ns+"/"+name][gpuRes]) {
			t.Errorf("pod %s: PodResources %v, was %v", name, now[ns+"/"+name], before[ns+"/"+name])
		}
	}
	waitMIGState(t, nodeName, gpunode.MIGConfigStateSuccess, gpunode.ReasonMIGApplied, 30*time.Second)
}
