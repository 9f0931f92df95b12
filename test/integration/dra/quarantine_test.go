package dra_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpuplane/gpuplane/internal/quarantine"
	"github.com/gpuplane/gpuplane/test/integration/framework"
)

// TestQuarantineEvictsClaimPods: a GPU held through a DRA claim falls off
// the bus (XID 79) on a running agent; its quarantine evicts the claim's
// pod, which the device plugin's PodResources never lists, and leaves the
// pod of a claim on another GPU running.
func TestQuarantineEvictsClaimPods(t *testing.T) {
	const nodeName = "dra-quarantine"
	ns := env.CreateNamespace(t)
	control := framework.FreeLoopbackAddr(t)
	node(t, nodeName, "--simulate-control-addr", control)
	createTemplate(t, ns, "a100", claimSpec([]request{{name: "gpu", class: "gpu.gpuplane.io", cel: []string{gpuAttr + `.productName.contains("A100")`}}}, "", ""))
	createTemplate(t, ns, "gpu2", claimSpec([]request{{name: "gpu", class: "gpu.gpuplane.io", cel: []string{gpuAttr + `.index == 2`}}}, "", ""))
	createPod(t, onNode(ns, "on-a100", nodeName).ClaimTemplate("gpu", "a100").Obj())
	createPod(t, onNode(ns, "on-gpu2", nodeName).ClaimTemplate("gpu", "gpu2").Obj())
	preparedCDI(t, ns, "on-a100")
	preparedCDI(t, ns, "on-gpu2")
	if got := allocatedDevices(podClaim(t, ns, "on-a100")); len(got) != 1 || got[0] != "gpu-4" {
		t.Fatalf("the A100 claim got %v, want gpu-4", got)
	}

	framework.SimFault(t, control, "/xid?gpu=4&xid=79")
	framework.Eventually(t, 2*time.Minute, "the A100 claim's pod evicted", func(ctx context.Context) (bool, error) {
		p, err := env.Client.CoreV1().Pods(ns).Get(ctx, "on-a100", metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		if err != nil {
			return false, err
		}
		return p.DeletionTimestamp != nil, nil
	})
	if err := running(t, ns, "on-gpu2"); err != nil {
		t.Errorf("the pod of GPU 2's claim was disturbed: %v", err)
	}
}

// TestQuarantineResetRepublishesSlices: GPU 2's MIG mode was switched on
// while it was busy, so the switch waits for the GPU's next reset, as on
// real GPUs. A double-bit ECC error (XID 48) quarantines it; its reset
// applies the pending mode, and the DRA driver's ResourceSlices follow:
// GPU 2's MIG devices, no whole gpu-2 that no longer exists.
func TestQuarantineResetRepublishesSlices(t *testing.T) {
	const nodeName = "dra-q-reset"
	control := framework.FreeLoopbackAddr(t)
	nodeWith(t, nodeName, nodeOptions{args: []string{"--simulate-control-addr", control},
		gpuState: `{"version": 1, "gpus": [{"index": 2, "current": false, "pending": true}]}`})
	devs, err := sliceDevices(t.Context(), nodeName)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := devs["gpu-2"]; !ok {
		t.Fatalf("before the reset, gpu-2 is not published whole (%d devices)", len(devs))
	}

	framework.SimFault(t, control, "/xid?gpu=2&xid=48")
	framework.Eventually(t, 90*time.Second, "ResourceSlices with GPU 2's MIG devices instead of the whole GPU", func(ctx context.Context) (bool, error) {
		devs, err := sliceDevices(ctx, nodeName)
		if err != nil {
			return false, err
		}
		if _, ok := devs["gpu-2"]; ok {
			return false, fmt.Errorf("gpu-2 still published whole")
		}
		if _, ok := devs["gpu-2-mig-1g-10gb-0-1"]; !ok {
			return false, fmt.Errorf("no gpu-2-mig-1g-10gb-0-1 among %d devices", len(devs))
		}
		return true, nil
	})
	framework.Eventually(t, 30*time.Second, "a "+quarantine.ReasonReset+" event for GPU 2", func(context.Context) (bool, error) {
		events := nodeEvents(t, nodeName)
		return slices.ContainsFunc(events, func(e string) bool { return strings.HasPrefix(e, quarantine.ReasonReset+": GPU 2 ") }), fmt.Errorf("events %q", events)
	})
	for _, e := range nodeEvents(t, nodeName) {
		if strings.HasPrefix(e, quarantine.ReasonRefreshFailed) {
			t.Errorf("node event %q", e)
		}
	}
}
