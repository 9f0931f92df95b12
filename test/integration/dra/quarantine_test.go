package dra_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpuplane/gpuplane/test/integration/framework"
)

func freeLoopbackAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return addr
}

// simFault posts one of the simulated GPUs' fault controls to the agent.
func simFault(t *testing.T, control, path string) {
	t.Helper()
	framework.Eventually(t, 30*time.Second, "the agent's fault controls answer "+path, func(ctx context.Context) (bool, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+control+path, nil)
		if err != nil {
			return false, err
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return false, err
		}
		defer func() { _ = resp.Body.Close() }()
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("POST %s: %d %s", path, resp.StatusCode, body)
		}
		return true, nil
	})
}

// TestQuarantineEvictsClaimPods: a GPU held through a DRA claim falls off
// the bus (XID 79) on a running agent; its quarantine evicts the claim's
// pod, which the device plugin's PodResources never lists, and leaves the
// pod of a claim on another GPU running.
func TestQuarantineEvictsClaimPods(t *testing.T) {
	const nodeName = "dra-quarantine"
	ns := env.CreateNamespace(t)
	control := freeLoopbackAddr(t)
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

	simFault(t, control, "/xid?gpu=4&xid=79")
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
