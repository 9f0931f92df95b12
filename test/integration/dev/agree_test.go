package dev_test

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpuplane/gpuplane/api/gpupod"
	"github.com/gpuplane/gpuplane/internal/gpu"
	"github.com/gpuplane/gpuplane/test/integration/framework"
)

// agreePods is how many pods TestSchedulerAndNodeAgree runs through the
// cluster, about eight times what its GPUs hold at once.
const agreePods = 200

// TestSchedulerAndNodeAgree runs a random stream of short pods placed by
// gpuplane-scheduler through nodes with whole GPUs, time-sliced GPUs and
// MIG devices, some asking for part of a GPU the ways gpuplane, KAI and
// HAMi spell it: every pod runs (the kubelet refuses none as not
// fitting), and each gets exactly the GPUs the scheduler chose for it: the
// whole GPUs by index, a replica of the GPU a fraction was placed on, a
// MIG instance of the chosen size on the chosen GPU. GPUPLANE_E2E_SEED
// replays a run.
func TestSchedulerAndNodeAgree(t *testing.T) {
	nodes := []string{"dgxh100", "dgxh100:time-slicing=4", "dgxh100:mig-mixed"}
	stateDir, client := cluster(t, "--node-profiles", strings.Join(nodes, ","))
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("GPUPLANE_E2E_SEED"); s != "" {
		var err error
		if seed, err = strconv.ParseUint(s, 10, 64); err != nil {
			t.Fatalf("GPUPLANE_E2E_SEED: %v", err)
		}
	}
	t.Logf("seed %d (GPUPLANE_E2E_SEED=%d replays this run)", seed, seed)
	rng := rand.New(rand.NewPCG(seed, 0))
	kinds := []struct {
		resource string
		count    int64
		// annotations, or a second resource, that ask for part of the GPU
		fraction map[string]string
		extra    corev1.ResourceName
	}{
		{resource: "nvidia.com/gpu", count: 1}, {resource: "nvidia.com/gpu", count: 1}, {resource: "nvidia.com/gpu", count: 2},
		{resource: "nvidia.com/gpu", count: 2}, {resource: "nvidia.com/gpu", count: 4},
		{resource: "nvidia.com/mig-1g.10gb", count: 1}, {resource: "nvidia.com/mig-1g.10gb", count: 1}, {resource: "nvidia.com/mig-3g.40gb", count: 1},
		{resource: "nvidia.com/gpu", count: 1, fraction: map[string]string{gpupod.FractionAnnotation: "0.25"}},
		{resource: "nvidia.com/gpu", count: 1, fraction: map[string]string{gpupod.KAIFraction: "0.5", gpupod.KAIMemory: "20000"}},
		{resource: "nvidia.com/gpu", count: 1, extra: gpupod.HAMiMemory},
	}
	ctx := t.Context()
	for i := range agreePods {
		k := kinds[rng.IntN(len(kinds))]
		b := framework.Pod("default", fmt.Sprintf("agree-%d", i)).SchedulerName("gpuplane-scheduler").
			RestartPolicy(corev1.RestartPolicyNever).Limit(corev1.ResourceName(k.resource), fmt.Sprint(k.count))
		if k.extra != "" {
			b = b.Limit(k.extra, "10000") // HAMi's gpumem, MiB
		}
		p := b.Obj()
		p.Annotations = map[string]string{gpupod.DurationAnnotation: fmt.Sprintf("%dms", 500+rng.IntN(4000))}
		maps.Copy(p.Annotations, k.fraction)
		if _, err := client.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	var pods []corev1.Pod
	framework.Eventually(t, 5*time.Minute, fmt.Sprintf("%d pods ended", agreePods), func(ctx context.Context) (bool, error) {
		l, err := client.CoreV1().Pods("default").List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		ended := 0
		for _, p := range l.Items {
			if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
				ended++
			}
		}
		pods = l.Items
		return ended == agreePods, fmt.Errorf("%d of %d ended", ended, agreePods)
	})

	devices := map[string]map[string]gpuOf{}
	agreed := 0
	for _, p := range pods {
		if p.Status.Phase != corev1.PodSucceeded {
			t.Errorf("pod %s on %s ended %s: %s: %s (chose %q)", p.Name, p.Spec.NodeName, p.Status.Phase, p.Status.Reason, p.Status.Message, p.Annotations[gpupod.GPUsAnnotation])
			continue
		}
		if devices[p.Spec.NodeName] == nil {
			devices[p.Spec.NodeName] = nodeDevices(t, stateDir, p.Spec.NodeName)
		}
		a, err := gpupod.ReadAllocation(&p)
		if err != nil || a == nil {
			t.Errorf("pod %s has no allocation record: %v", p.Name, err)
			continue
		}
		choice, err := gpupod.ParseGPUs(p.Annotations[gpupod.GPUsAnnotation], 8)
		if err != nil || len(choice) == 0 {
			t.Errorf("pod %s has no GPU choice (%q): %v", p.Name, p.Annotations[gpupod.GPUsAnnotation], err)
			continue
		}
		var want, got []string
		for _, c := range choice {
			want = append(want, gpuOf{c.Index, c.MIGSlices}.String())
		}
		for _, c := range a.Containers {
			for _, ids := range c.Devices {
				for _, id := range ids {
					base, _, _ := strings.Cut(id, "::")
					d, ok := devices[p.Spec.NodeName][base]
					if !ok {
						t.Fatalf("pod %s got device %s, which node %s does not have", p.Name, id, p.Spec.NodeName)
					}
					got = append(got, d.String())
				}
			}
		}
		slices.Sort(want)
		slices.Sort(got)
		got = slices.Compact(got) // replicas of one GPU
		if slices.Equal(want, got) {
			agreed++
		} else {
			t.Errorf("pod %s on %s: the scheduler chose %v, the node gave %v", p.Name, p.Spec.NodeName, want, got)
		}
	}
	t.Logf("%d of %d pods got the GPUs the scheduler chose", agreed, len(pods))
}

// gpuOf is where a device is: its GPU's index, and its MIG slices.
type gpuOf struct{ index, migSlices int }

func (g gpuOf) String() string {
	if g.migSlices > 0 {
		return fmt.Sprintf("%d:m%d", g.index, g.migSlices)
	}
	return strconv.Itoa(g.index)
}

// nodeDevices maps a dev node's device UUIDs (GPUs and MIG devices) to
// where they are, from the agent's inventory of the same simulated node.
func nodeDevices(t *testing.T, stateDir, node string) map[string]gpuOf {
	t.Helper()
	profile := filepath.Join(stateDir, "nodes", node, "profile.yaml")
	if _, err := os.Stat(profile); err != nil {
		profile = "dgxh100"
	}
	out, err := exec.CommandContext(t.Context(), filepath.Join(binDir, "gpuplane-agent"), "inventory", "--simulate", profile, "--node-name", node, "-o", "json").Output()
	if err != nil {
		t.Fatalf("inventory of %s: %v", node, err)
	}
	var inv struct {
		Devices []gpu.Device `json:"devices"`
	}
	if err := json.Unmarshal(out, &inv); err != nil {
		t.Fatalf("inventory of %s: %v", node, err)
	}
	m := map[string]gpuOf{}
	for _, d := range inv.Devices {
		m[d.UUID] = gpuOf{index: d.Index}
		for _, mig := range d.MIGDevices {
			m[mig.UUID] = gpuOf{mig.ParentIndex, mig.GPUSlices}
		}
	}
	return m
}
