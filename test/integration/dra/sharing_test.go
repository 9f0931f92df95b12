package dra_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	apidra "github.com/gpuplane/gpuplane/api/dra"
	"github.com/gpuplane/gpuplane/internal/cdi"
	"github.com/gpuplane/gpuplane/test/integration/framework"
)

// capacitySpec asks for one GPU matching cel with memory of capacity.
func capacitySpec(memory, cel string) resourceapi.ResourceClaimSpec {
	spec := claimSpec([]request{{name: "gpu", class: "gpu.gpuplane.io", cel: []string{cel}}}, "", "")
	spec.Devices.Requests[0].Exactly.Capacity = &resourceapi.CapacityRequirements{Requests: map[resourceapi.QualifiedName]resource.Quantity{
		apidra.CapacityMemory: resource.MustParse(memory),
	}}
	return spec
}

// TestConsumableCapacity: on a node whose agent publishes GPUs for
// consumable capacity, kube-scheduler's allocator puts two claims of 20Gi
// on one 80GB A100, records what each consumed, and the driver prepares
// each with its share; a third claim that does not fit stays pending.
func TestConsumableCapacity(t *testing.T) {
	const nodeName = "dra-capacity"
	sim := nodeWith(t, nodeName, nodeOptions{args: []string{"--dra-shared-gpus"}})
	ns := env.CreateNamespace(t)
	a100 := gpuAttr + `.productName.contains("A100")`
	framework.Eventually(t, 30*time.Second, "gpu-4 published for multiple allocations", func(ctx context.Context) (bool, error) {
		devs, err := sliceDevices(ctx, nodeName)
		if err != nil {
			return false, err
		}
		d := devs["gpu-4"]
		if d.AllowMultipleAllocations == nil || !*d.AllowMultipleAllocations {
			return false, fmt.Errorf("gpu-4: %+v", d)
		}
		return true, nil
	})
	createTemplate(t, ns, "share20", capacitySpec("20Gi", a100))
	var shares []string
	for _, pod := range []string{"share-a", "share-b"} {
		createPod(t, onNode(ns, pod, nodeName).ClaimTemplate("gpu", "share20").Obj())
	}
	for _, pod := range []string{"share-a", "share-b"} {
		preparedCDI(t, ns, pod)
		c := podClaim(t, ns, pod)
		r := c.Status.Allocation.Devices.Results
		if len(r) != 1 || r[0].Device != "gpu-4" || r[0].ShareID == nil {
			t.Fatalf("pod %s: allocation %+v, want a share of gpu-4", pod, r)
		}
		got := r[0].ConsumedCapacity[apidra.CapacityMemory]
		if got.Cmp(resource.MustParse("20Gi")) != 0 {
			t.Errorf("pod %s: consumed memory %s, want 20Gi", pod, got.String())
		}
		shares = append(shares, string(*r[0].ShareID))
		data, err := os.ReadFile(cdi.ClaimSpecPath(filepath.Join(sim.Dir(), "cdi"), string(c.UID)))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(data), "GPUPLANE_GPU_MEMORY_LIMIT_MIB=20480") {
			t.Errorf("pod %s: CDI spec without its memory limit:\n%s", pod, data)
		}
	}
	if shares[0] == shares[1] {
		t.Errorf("both claims got share %s", shares[0])
	}
	createTemplate(t, ns, "share50", capacitySpec("50Gi", a100))
	createPod(t, onNode(ns, "share-c", nodeName).ClaimTemplate("gpu", "share50").Obj())
	pendingWith(t, ns, "share-c", "cannot allocate all claims")
	deletePod(t, ns, "share-a")
	env.WaitPodPhase(t, ns, "share-c", "Running", 90*time.Second)
}

// TestSharingOnTheNode: a claim configured for MPS gets its own control
// daemon's pipe and log directories in its CDI spec (the daemon binary is
// not on a machine without GPUs; internal/dra's tests drive it), and a
// time-sliced claim is prepared.
func TestSharingOnTheNode(t *testing.T) {
	const nodeName = "dra-sharing"
	sim := node(t, nodeName)
	ns := env.CreateNamespace(t)
	createTemplate(t, ns, "mps", claimSpec([]request{{name: "gpu", class: "gpu.gpuplane.io", cel: []string{gpuAttr + `.productName.contains("A100")`}}}, "",
		`{"apiVersion":"gpu.gpuplane.io/v1alpha1","kind":"GpuConfig","sharing":{"strategy":"MPS","mpsConfig":{"defaultActiveThreadPercentage":50}}}`))
	createPod(t, onNode(ns, "mps", nodeName).ClaimTemplate("gpu", "mps").Obj())
	preparedCDI(t, ns, "mps")
	c := podClaim(t, ns, "mps")
	data, err := os.ReadFile(cdi.ClaimSpecPath(filepath.Join(sim.Dir(), "cdi"), string(c.UID)))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"CUDA_MPS_PIPE_DIRECTORY=", "claim-" + string(c.UID) + "/pipe", "claim-" + string(c.UID) + "/log", "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=50"} {
		if !strings.Contains(string(data), want) {
			t.Errorf("CDI spec lacks %q:\n%s", want, data)
		}
	}
	deletePod(t, ns, "mps")
	waitNoCDISpec(t, sim, string(c.UID))
}
