package dra_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

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
	createPod(t, onNode(ns, "gpu", nodeName).GPUs(1).Obj())
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

// TestNodeRelabelledBetweenAPIs moves a running node between APIs with
// its gpuplane.io/gpu-api label, the agent running throughout: to dra,
// the device plugin's resource goes and pods asking for nvidia.com/gpu
// are served through claims, never on a GPU the device plugin's pods
// still hold; back to device-plugin, the driver stays while a claim is
// prepared (the plugin serving beside it), and goes once none is.
func TestNodeRelabelledBetweenAPIs(t *testing.T) {
	const nodeName = "dra-relabel"
	sim := node(t, nodeName)
	ns := env.CreateNamespace(t)
	agentLog := func() string {
		data, _ := os.ReadFile(filepath.Join(sim.Dir(), "agent.log"))
		return string(data)
	}
	allocatable := func(ctx context.Context) (int64, error) {
		n, err := env.Client.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
		if err != nil {
			return 0, err
		}
		q := n.Status.Allocatable["nvidia.com/gpu"]
		return q.Value(), nil
	}
	relabel := func(api gpunode.GPUAPI) {
		t.Helper()
		patch := fmt.Sprintf(`{"metadata":{"labels":{%q:%q}}}`, gpunode.LabelGPUAPI, api)
		if _, err := env.Client.CoreV1().Nodes().Patch(t.Context(), nodeName, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	// Both APIs: two pods through the device plugin.
	for i := range 2 {
		createPod(t, onNode(ns, fmt.Sprint("dp-", i), nodeName).GPUs(1).Obj())
	}
	for i := range 2 {
		env.WaitPodPhase(t, ns, fmt.Sprint("dp-", i), corev1.PodRunning, 90*time.Second)
	}

	relabel(gpunode.GPUAPIDRA)
	framework.Eventually(t, 90*time.Second, "the agent serves through DRA only: the device plugin's resource gone", func(ctx context.Context) (bool, error) {
		if !strings.Contains(agentLog(), "to=dra") {
			return false, errors.New("the agent has not switched")
		}
		n, err := allocatable(ctx)
		if err != nil {
			return false, err
		}
		return n == 0, fmt.Errorf("allocatable nvidia.com/gpu %d", n)
	})
	// The whole GPUs DRA offers, less those the device plugin's pods
	// hold, are served to new pods through claims; the rest wait.
	devs, err := sliceDevices(t.Context(), nodeName)
	if err != nil {
		t.Fatal(err)
	}
	held := heldOnce(t, ns, nodeName)
	free := 0
	for name, d := range devs {
		if strings.Contains(name, "-mig-") {
			continue
		}
		if u := d.Attributes[apidra.AttrUUID].StringValue; u != nil && held[*u] == "" {
			free++
		}
	}
	for i := range 3 {
		createPod(t, onNode(ns, fmt.Sprint("ext-", i), nodeName).GPUs(1).Obj())
	}
	framework.Eventually(t, 90*time.Second, fmt.Sprintf("%d pods served through claims", free), func(ctx context.Context) (bool, error) {
		pods, err := env.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		running := 0
		var others []string
		for _, p := range pods.Items {
			if !strings.HasPrefix(p.Name, "ext-") {
				continue
			}
			if p.Status.Phase != corev1.PodRunning {
				others = append(others, fmt.Sprintf("%s %s on %q %v", p.Name, p.Status.Phase, p.Spec.NodeName, p.Status.Conditions))
				continue
			}
			if p.Status.ExtendedResourceClaimStatus == nil {
				return false, fmt.Errorf("pod %s runs without a claim", p.Name)
			}
			running++
		}
		return running == free, fmt.Errorf("%d running; %v", running, others)
	})
	if got := heldOnce(t, ns, nodeName); len(got) != len(held)+free {
		t.Errorf("GPUs held %v, want the device plugin's %d and %d through claims", got, len(held), free)
	}

	// Back to the device plugin: the claims keep the driver, beside the
	// plugin, until their pods are gone.
	relabel(gpunode.GPUAPIDevicePlugin)
	framework.Eventually(t, 90*time.Second, "the device plugin serves again beside the driver", func(ctx context.Context) (bool, error) {
		if !strings.Contains(agentLog(), "ResourceClaims are prepared on this node") {
			return false, errors.New("the agent does not say it keeps the driver")
		}
		n, err := allocatable(ctx)
		if err != nil {
			return false, err
		}
		return n > 0, fmt.Errorf("allocatable nvidia.com/gpu %d", n)
	})
	// The switch restarts the agent's parts, the driver with them: it
	// registers again within moments, as it must to unprepare the claims.
	framework.Eventually(t, 30*time.Second, "the driver registered again while claims are prepared", func(context.Context) (bool, error) {
		return slices.Contains(sim.DRADrivers(), apidra.DriverName), fmt.Errorf("registered DRA drivers %v", sim.DRADrivers())
	})
	heldOnce(t, ns, nodeName)
	for i := range 3 {
		deletePod(t, ns, fmt.Sprint("ext-", i))
	}
	framework.Eventually(t, 120*time.Second, "the driver gone once no claim is prepared", func(ctx context.Context) (bool, error) {
		if !strings.Contains(agentLog(), "to=device-plugin") {
			return false, errors.New("the agent has not switched")
		}
		return !slices.Contains(sim.DRADrivers(), apidra.DriverName), fmt.Errorf("registered DRA drivers %v", sim.DRADrivers())
	})
	for i := range 2 {
		if p, err := env.Client.CoreV1().Pods(ns).Get(t.Context(), fmt.Sprint("dp-", i), metav1.GetOptions{}); err != nil || p.Status.Phase != corev1.PodRunning {
			t.Errorf("pod dp-%d through the switches: %v, phase %v", i, err, p.Status.Phase)
		}
	}
	// A switch stops the parts on purpose: none of them may report that
	// as a failure.
	if strings.Contains(agentLog(), "agent part failed") {
		t.Error("a GPU API switch was logged as a part failing")
	}
}
