package dra_test

import (
	"context"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

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
	createPod(t, claimPod(ns, "on-a100", nodeName, "a100", ""))
	createPod(t, claimPod(ns, "on-gpu2", nodeName, "gpu2", ""))
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
