package dra_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	apidra "github.com/gpuplane/gpuplane/api/dra"
	"github.com/gpuplane/gpuplane/api/gpunode"
	"github.com/gpuplane/gpuplane/test/integration/framework"
)

// TestNodeSwitchedToDRA: a node labelled gpuplane.io/gpu-api=dra
// advertises no nvidia.com/gpu through the device plugin, so a pod asking
// for nvidia.com/gpu: 1 is served by kube-scheduler through the
// DeviceClass whose extendedResourceName it is, and prepared by the
// driver.
func TestNodeSwitchedToDRA(t *testing.T) {
	const nodeName = "dra-only"
	sim := nodeWith(t, nodeName, nodeOptions{labels: map[string]string{gpunode.LabelGPUAPI: string(gpunode.GPUAPIDRA)}, noPlugin: true})
	// The agent says it withholds the resources before it publishes its
	// slices (which node() waited for): read its log rather than wait
	// for something not to happen.
	framework.Eventually(t, 30*time.Second, "the agent withholds the device plugin's resources", func(context.Context) (bool, error) {
		data, err := os.ReadFile(filepath.Join(sim.Dir(), "agent.log"))
		if err != nil {
			return false, err
		}
		return strings.Contains(string(data), "the device plugin advertises no resource"), nil
	})
	noGPUs := func(ctx context.Context) error {
		n, err := env.Client.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		for name, q := range n.Status.Allocatable {
			if strings.HasPrefix(string(name), "nvidia.com/") && !q.IsZero() {
				return fmt.Errorf("node advertises %s=%s", name, q.String())
			}
		}
		return nil
	}
	if err := noGPUs(t.Context()); err != nil {
		t.Fatal(err)
	}
	ns := env.CreateNamespace(t)
	createPod(t, dpPod(ns, "gpu", nodeName))
	env.WaitPodPhase(t, ns, "gpu", corev1.PodRunning, 90*time.Second)
	pod, err := env.Client.CoreV1().Pods(ns).Get(t.Context(), "gpu", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	st := pod.Status.ExtendedResourceClaimStatus
	if st == nil {
		t.Fatal("the pod runs without an extendedResourceClaimStatus: it was not served through DRA")
	}
	c, err := env.Client.ResourceV1().ResourceClaims(ns).Get(t.Context(), st.ResourceClaimName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if devs := allocatedDevices(c); len(devs) != 1 || !strings.HasPrefix(devs[0], "gpu-") || strings.Contains(devs[0], "-mig-") {
		t.Errorf("allocated %v, want one whole GPU", devs)
	}
	if !strings.Contains(pod.Annotations[apidra.PodClaimsAnnotation], st.ResourceClaimName) {
		t.Errorf("%s = %s, want the CDI devices of %s", apidra.PodClaimsAnnotation, pod.Annotations[apidra.PodClaimsAnnotation], st.ResourceClaimName)
	}
	if err := noGPUs(t.Context()); err != nil {
		t.Error(err)
	}
	deletePod(t, ns, "gpu")
	waitNoCDISpec(t, sim, string(c.UID))
}
