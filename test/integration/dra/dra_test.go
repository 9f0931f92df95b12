package dra_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	apidra "github.com/gpuplane/gpuplane/api/dra"
	"github.com/gpuplane/gpuplane/internal/cdi"
	"github.com/gpuplane/gpuplane/test/integration/framework"
)

const gpuAttr = `device.attributes["gpu.gpuplane.io"]`

// TestClaims runs claims of every kind through kube-scheduler's allocation
// and the agent's prepare on one node, one after the other.
func TestClaims(t *testing.T) {
	const nodeName = "dra-claims"
	sim := node(t, nodeName)
	ns := env.CreateNamespace(t)

	t.Run("CEL selector picks an H100 by productName", func(t *testing.T) {
		createTemplate(t, ns, "h100", claimSpec([]request{{name: "gpu", class: "gpu.gpuplane.io", cel: []string{gpuAttr + `.productName.contains("H100")`}}}, "", ""))
		createPod(t, onNode(ns, "h100", nodeName).ClaimTemplate("gpu", "h100").Obj())
		ids := preparedCDI(t, ns, "h100")
		c := podClaim(t, ns, "h100")
		devs := allocatedDevices(c)
		if len(devs) != 1 || (devs[0] != "gpu-2" && devs[0] != "gpu-3") {
			t.Fatalf("allocated %v, want one of the whole H100s gpu-2, gpu-3", devs)
		}
		if want := cdi.ClaimDeviceID(string(c.UID), devs[0]); len(ids) != 1 || ids[0] != want {
			t.Errorf("CDI devices %v, want %s", ids, want)
		}
		data, err := os.ReadFile(cdi.ClaimSpecPath(filepath.Join(sim.Dir(), "cdi"), string(c.UID)))
		if err != nil {
			t.Fatalf("the claim's CDI spec: %v", err)
		}
		if !strings.Contains(string(data), "NVIDIA_VISIBLE_DEVICES=GPU-") {
			t.Errorf("CDI spec without the GPU:\n%s", data)
		}
		deletePod(t, ns, "h100")
		waitNoCDISpec(t, sim, string(c.UID))
	})

	t.Run("multi-GPU claim on an NVLink set", func(t *testing.T) {
		createTemplate(t, ns, "pair", claimSpec([]request{{name: "gpu", class: "gpu.gpuplane.io", count: 2}}, apidra.DriverName+"/"+apidra.AttrNVLinkDomain, ""))
		createPod(t, onNode(ns, "pair", nodeName).ClaimTemplate("gpu", "pair").Obj())
		ids := preparedCDI(t, ns, "pair")
		c := podClaim(t, ns, "pair")
		if devs := allocatedDevices(c); !slices.Equal(devs, []string{"gpu-2", "gpu-3"}) {
			t.Fatalf("allocated %v, want the NVLinked gpu-2 and gpu-3 (gpu-4 is on PCIe only)", devs)
		}
		if len(ids) != 2 {
			t.Errorf("CDI devices %v, want two", ids)
		}
		deletePod(t, ns, "pair")
		waitNoCDISpec(t, sim, string(c.UID))
	})

	t.Run("dynamic MIG claim", func(t *testing.T) {
		createTemplate(t, ns, "mig", claimSpec([]request{{name: "gpu", class: "mig-1g.10gb.gpu.gpuplane.io"}}, "", ""))
		createPod(t, onNode(ns, "mig", nodeName).ClaimTemplate("gpu", "mig").Obj())
		preparedCDI(t, ns, "mig")
		c := podClaim(t, ns, "mig")
		devs := allocatedDevices(c)
		if len(devs) != 1 || !strings.Contains(devs[0], "-mig-1g-10gb-") {
			t.Fatalf("allocated %v, want a 1g.10gb MIG device", devs)
		}
		data, err := os.ReadFile(cdi.ClaimSpecPath(filepath.Join(sim.Dir(), "cdi"), string(c.UID)))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(data), "NVIDIA_VISIBLE_DEVICES=MIG-") {
			t.Errorf("the MIG device was not created for the claim; CDI spec:\n%s", data)
		}
		deletePod(t, ns, "mig")
		waitNoCDISpec(t, sim, string(c.UID))
	})

	t.Run("shared claim used by two pods", func(t *testing.T) {
		createClaim(t, ns, "shared", claimSpec([]request{{name: "gpu", class: "gpu.gpuplane.io", cel: []string{gpuAttr + `.productName.contains("A100")`}}}, "",
			`{"apiVersion":"gpu.gpuplane.io/v1alpha1","kind":"GpuConfig","sharing":{"strategy":"TimeSlicing","timeSlicingConfig":{"interval":"Long"}}}`))
		createPod(t, onNode(ns, "shared-a", nodeName).Claim("gpu", "shared").Obj())
		createPod(t, onNode(ns, "shared-b", nodeName).Claim("gpu", "shared").Obj())
		a, b := preparedCDI(t, ns, "shared-a"), preparedCDI(t, ns, "shared-b")
		if !slices.Equal(a, b) {
			t.Errorf("the pods of one claim got %v and %v", a, b)
		}
		c := podClaim(t, ns, "shared-a")
		if len(c.Status.ReservedFor) != 2 {
			t.Errorf("reservedFor = %v, want both pods", c.Status.ReservedFor)
		}
		deletePod(t, ns, "shared-a")
		env.WaitPodPhase(t, ns, "shared-b", corev1.PodRunning, 10*time.Second)
		if !slices.ContainsFunc(cdiSpecs(sim), func(s string) bool { return strings.Contains(s, string(c.UID)) }) {
			t.Error("the claim was unprepared while shared-b still uses it")
		}
		deletePod(t, ns, "shared-b")
		waitNoCDISpec(t, sim, string(c.UID))
	})

	t.Run("extended resource served through DRA", func(t *testing.T) {
		// No device plugin on the node advertises nvidia.com/mig-1g.10gb:
		// kube-scheduler serves the request through the DeviceClass whose
		// extendedResourceName it is.
		pod := onNode(ns, "ext", nodeName).Limit("nvidia.com/mig-1g.10gb", "1").Obj()
		createPod(t, pod)
		env.WaitPodPhase(t, ns, "ext", corev1.PodRunning, 90*time.Second)
		got, err := env.Client.CoreV1().Pods(ns).Get(t.Context(), "ext", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		st := got.Status.ExtendedResourceClaimStatus
		if st == nil {
			t.Fatal("no extendedResourceClaimStatus")
		}
		if !strings.Contains(got.Annotations[apidra.PodClaimsAnnotation], st.ResourceClaimName) {
			t.Errorf("%s = %s, want the CDI devices of %s", apidra.PodClaimsAnnotation, got.Annotations[apidra.PodClaimsAnnotation], st.ResourceClaimName)
		}
		c, err := env.Client.ResourceV1().ResourceClaims(ns).Get(t.Context(), st.ResourceClaimName, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if devs := allocatedDevices(c); len(devs) != 1 || !strings.Contains(devs[0], "-mig-1g-10gb-") {
			t.Errorf("allocated %v, want a 1g.10gb MIG device", devs)
		}
		deletePod(t, ns, "ext")
		waitNoCDISpec(t, sim, string(c.UID))
	})

	t.Run("agent restart between prepare and unprepare", func(t *testing.T) {
		createTemplate(t, ns, "restart", claimSpec([]request{{name: "gpu", class: "mig-3g.40gb.gpu.gpuplane.io"}}, "", ""))
		createPod(t, onNode(ns, "restart", nodeName).ClaimTemplate("gpu", "restart").Obj())
		preparedCDI(t, ns, "restart")
		c := podClaim(t, ns, "restart")
		before, _ := sim.AgentRestarts()
		if err := syscall.Kill(sim.AgentPid(), syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		framework.Eventually(t, 90*time.Second, "the agent restarted and registered again", func(context.Context) (bool, error) {
			n, _ := sim.AgentRestarts()
			return n > before && slices.Contains(sim.DRADrivers(), apidra.DriverName), nil
		})
		deletePod(t, ns, "restart")
		waitNoCDISpec(t, sim, string(c.UID))
		// The MIG instance the restarted agent restored was destroyed:
		// the same placement serves the next claim.
		createPod(t, onNode(ns, "restart-2", nodeName).ClaimTemplate("gpu", "restart").Obj())
		preparedCDI(t, ns, "restart-2")
		deletePod(t, ns, "restart-2")
	})
}

// TestBadInput: claims that cannot be served get a clear reason on the pod,
// and nothing is prepared.
func TestBadInput(t *testing.T) {
	const nodeName = "dra-bad"
	sim := node(t, nodeName)
	ns := env.CreateNamespace(t)
	tests := []struct {
		name   string
		spec   func() (template string)
		reason string
	}{
		{name: "no device can satisfy", reason: "cannot allocate all claims", spec: func() string {
			createTemplate(t, ns, "ten", claimSpec([]request{{name: "gpu", class: "gpu.gpuplane.io", count: 10}}, "", ""))
			return "ten"
		}},
		{name: "CEL on an unknown attribute", reason: "noSuchAttribute", spec: func() string {
			createTemplate(t, ns, "unknown-attr", claimSpec([]request{{name: "gpu", class: "gpu.gpuplane.io", cel: []string{gpuAttr + `.noSuchAttribute == "x"`}}}, "", ""))
			return "unknown-attr"
		}},
		{name: "DeviceClass that does not exist", reason: "nope.gpu.gpuplane.io", spec: func() string {
			createTemplate(t, ns, "no-class", claimSpec([]request{{name: "gpu", class: "nope.gpu.gpuplane.io"}}, "", ""))
			return "no-class"
		}},
		{name: "opaque config with an unknown field", reason: `unknown field "replicas"`, spec: func() string {
			createTemplate(t, ns, "bad-config", claimSpec([]request{{name: "gpu", class: "gpu.gpuplane.io"}}, "",
				`{"apiVersion":"gpu.gpuplane.io/v1alpha1","kind":"GpuConfig","sharing":{"strategy":"TimeSlicing","replicas":4}}`))
			return "bad-config"
		}},
		{name: "a sharing mode the device cannot do", reason: "MIG devices cannot be time-sliced", spec: func() string {
			createTemplate(t, ns, "mig-timeslice", claimSpec([]request{{name: "gpu", class: "mig-1g.10gb.gpu.gpuplane.io"}}, "",
				`{"apiVersion":"gpu.gpuplane.io/v1alpha1","kind":"MigDeviceConfig","sharing":{"strategy":"TimeSlicing"}}`))
			return "mig-timeslice"
		}},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pod := fmt.Sprintf("bad-%d", i)
			createPod(t, onNode(ns, pod, nodeName).ClaimTemplate("gpu", tt.spec()).Obj())
			pendingWith(t, ns, pod, tt.reason)
			if specs := cdiSpecs(sim); len(specs) != 0 {
				t.Errorf("CDI specs on the node: %v", specs)
			}
			deletePod(t, ns, pod)
		})
	}
}

// TestPluginAndDRAShareANode: pods asking for nvidia.com/gpu through the
// device plugin and pods with claims on one node never get the same GPU.
// The node has five GPUs: the plugin serves all five whole (MIG strategy
// none); DRA the three not in MIG mode whole, and MIG devices of the two in
// MIG mode.
func TestPluginAndDRAShareANode(t *testing.T) {
	const nodeName = "dra-both"
	node(t, nodeName)
	ns := env.CreateNamespace(t)
	createTemplate(t, ns, "one", claimSpec([]request{{name: "gpu", class: "gpu.gpuplane.io"}}, "", ""))
	createTemplate(t, ns, "mig", claimSpec([]request{{name: "gpu", class: "mig.gpu.gpuplane.io"}}, "", ""))

	// Claims take the three whole GPUs: the plugin withdraws them.
	for i := range 3 {
		createPod(t, onNode(ns, fmt.Sprintf("claim-%d", i), nodeName).ClaimTemplate("gpu", "one").Obj())
	}
	for i := range 3 {
		preparedCDI(t, ns, fmt.Sprintf("claim-%d", i))
	}
	framework.Eventually(t, 60*time.Second, "nvidia.com/gpu allocatable down to the two GPUs no claim holds", func(ctx context.Context) (bool, error) {
		n, err := env.Client.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		q := n.Status.Allocatable["nvidia.com/gpu"]
		return q.Value() == 2, fmt.Errorf("allocatable %s", q.String())
	})

	// The plugin gives the other two to pods; more wait.
	for i := range 3 {
		createPod(t, onNode(ns, fmt.Sprintf("dp-%d", i), nodeName).GPUs(1).Obj())
	}
	env.WaitPodPhase(t, ns, "dp-0", corev1.PodRunning, 60*time.Second)
	env.WaitPodPhase(t, ns, "dp-1", corev1.PodRunning, 60*time.Second)
	pendingWith(t, ns, "dp-2", "nvidia.com/gpu")

	// Those GPUs are in MIG mode: DRA taints their MIG devices, so a MIG
	// claim finds none.
	framework.Eventually(t, 60*time.Second, "MIG devices of plugin-held GPUs tainted", func(ctx context.Context) (bool, error) {
		devs, err := sliceDevices(ctx, nodeName)
		if err != nil {
			return false, err
		}
		for name, d := range devs {
			if !strings.Contains(name, "-mig-") {
				continue
			}
			if !slices.ContainsFunc(d.Taints, func(tn resourceapi.DeviceTaint) bool { return tn.Key == apidra.TaintDevicePlugin }) {
				return false, fmt.Errorf("%s untainted", name)
			}
		}
		return true, nil
	})
	createPod(t, onNode(ns, "mig-0", nodeName).ClaimTemplate("gpu", "mig").Obj())
	pendingWith(t, ns, "mig-0", "cannot allocate")

	// No GPU is held twice.
	held := heldOnce(t, ns, nodeName)
	if len(held) != 5 {
		t.Errorf("GPUs held: %v, want all five, each once", held)
	}
}
