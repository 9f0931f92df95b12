package dra_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"

	configv1 "github.com/gpuplane/gpuplane/api/config/v1"
	apidra "github.com/gpuplane/gpuplane/api/dra"
	"github.com/gpuplane/gpuplane/api/gpupod"
	"github.com/gpuplane/gpuplane/internal/dra"
	"github.com/gpuplane/gpuplane/internal/localcluster"
	"github.com/gpuplane/gpuplane/internal/nodesim"
	"github.com/gpuplane/gpuplane/internal/testutil/build"
	"github.com/gpuplane/gpuplane/test/integration/framework"
)

// profile is two H100s in MIG mode, two NVLinked H100s and an A100 on PCIe.
const profile = `version: v1
name: dra-mixed
driverVersion: "560.35.03"
cudaDriverVersion: "12.6"
gpus:
  - model: H100-SXM5-80GB
    count: 2
    migEnabled: true
  - model: H100-SXM5-80GB
    count: 2
  - model: A100-SXM4-80GB
topology:
  pairs:
    - gpus: [2, 3]
      nvlink: 18
    - gpus: [2, 4]
      pcie: SYS
    - gpus: [3, 4]
      pcie: SYS
`

var classesOnce sync.Once

// installClasses creates gpuplane's DeviceClasses for the default config.
func installClasses(t *testing.T) {
	t.Helper()
	classesOnce.Do(func() {
		cfg, err := configv1.Load(strings.NewReader(""), configv1.Options{})
		if err != nil {
			t.Fatal(err)
		}
		classes, err := dra.DeviceClasses(cfg, []string{"1g.10gb", "3g.40gb"})
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range classes {
			_, err := env.Client.ResourceV1().DeviceClasses().Create(context.Background(), c, metav1.CreateOptions{})
			if err != nil && !apierrors.IsAlreadyExists(err) {
				t.Fatalf("creating DeviceClass %s: %v", c.Name, err)
			}
		}
	})
}

// node starts a simulated node whose agent runs the device plugin and the
// DRA driver (with extra agent flags), and waits for its ResourceSlices.
func node(t *testing.T, name string, extra ...string) *nodesim.Simulator {
	t.Helper()
	return nodeWith(t, name, nodeOptions{args: extra})
}

// nodeOptions vary a simulated node: the agent's extra flags, whether
// its device plugin is expected to advertise nvidia.com/gpu, and the MIG
// state its simulated GPUs start in (a sim state file, --simulate-state).
type nodeOptions struct {
	args     []string
	labels   map[string]string
	noPlugin bool
	gpuState string
}

func nodeWith(t *testing.T, name string, o nodeOptions) *nodesim.Simulator {
	t.Helper()
	installClasses(t)
	dir, err := os.MkdirTemp("", "dra-")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "profile.yaml")
	if err := os.WriteFile(path, []byte(profile), 0o600); err != nil {
		t.Fatal(err)
	}
	if o.gpuState != "" {
		// The node simulator passes its directory's gpu-state.json.
		if err := os.MkdirAll(filepath.Join(dir, "k"), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "k", "gpu-state.json"), []byte(o.gpuState), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	var log *slog.Logger
	if testing.Verbose() {
		log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	}
	sim, err := nodesim.Start(t.Context(), nodesim.Config{
		NodeName: name, Dir: filepath.Join(dir, "k"), Client: env.Client, DeleteNodeOnStop: true, Logger: log, Labels: o.labels,
		Agent: &nodesim.AgentConfig{Binary: agentBinary, Profile: path, Kubeconfig: env.ControlPlane.Kubeconfig(), DRA: true, ExtraArgs: o.args},
	})
	if err != nil {
		t.Fatalf("starting simulated node %s: %v", name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		zero := int64(0)
		pods, _ := env.Client.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + name})
		for _, p := range pods.Items {
			_ = env.Client.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero})
		}
		if err := sim.Stop(ctx); err != nil {
			t.Errorf("stopping simulated node %s: %v", name, err)
		}
		_ = env.Client.ResourceV1().ResourceSlices().DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{FieldSelector: "spec.nodeName=" + name})
		if t.Failed() {
			t.Logf("agent log of %s (tail):\n%s", name, localcluster.TailFile(filepath.Join(dir, "k", "agent.log"), 60))
		}
		_ = os.RemoveAll(dir)
	})
	framework.Eventually(t, 90*time.Second, "node "+name+" with the DRA driver registered and its ResourceSlices published", func(ctx context.Context) (bool, error) {
		if !slices.Contains(sim.DRADrivers(), apidra.DriverName) {
			return false, fmt.Errorf("registered DRA drivers: %v", sim.DRADrivers())
		}
		devs, err := sliceDevices(ctx, name)
		if err != nil {
			return false, err
		}
		if _, ok := devs["gpu-4"]; !ok {
			return false, fmt.Errorf("%d devices published, no gpu-4", len(devs))
		}
		n, err := env.Client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		if o.noPlugin {
			if !framework.NodeReady(n) {
				return false, fmt.Errorf("node not Ready")
			}
			return true, nil
		}
		if q := n.Status.Allocatable["nvidia.com/gpu"]; q.Value() == 0 || !framework.NodeReady(n) {
			return false, fmt.Errorf("node not Ready with nvidia.com/gpu (%s)", q.String())
		}
		return true, nil
	})
	return sim
}

// sliceDevices are the devices the node's ResourceSlices publish, by name.
func sliceDevices(ctx context.Context, nodeName string) (map[string]resourceapi.Device, error) {
	list, err := env.Client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + nodeName})
	if err != nil {
		return nil, err
	}
	out := map[string]resourceapi.Device{}
	for _, s := range list.Items {
		if s.Spec.Driver != apidra.DriverName {
			continue
		}
		for _, d := range s.Spec.Devices {
			out[d.Name] = d
		}
	}
	return out, nil
}

// request is one exact device request of a claim.
type request struct {
	name, class string
	count       int64
	cel         []string
}

func claimSpec(reqs []request, constraintAttr string, config string) resourceapi.ResourceClaimSpec {
	var spec resourceapi.ResourceClaimSpec
	for _, r := range reqs {
		er := &resourceapi.ExactDeviceRequest{DeviceClassName: r.class, AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: max(r.count, 1)}
		for _, c := range r.cel {
			er.Selectors = append(er.Selectors, resourceapi.DeviceSelector{CEL: &resourceapi.CELDeviceSelector{Expression: c}})
		}
		spec.Devices.Requests = append(spec.Devices.Requests, resourceapi.DeviceRequest{Name: r.name, Exactly: er})
	}
	if constraintAttr != "" {
		spec.Devices.Constraints = []resourceapi.DeviceConstraint{{MatchAttribute: ptr.To(resourceapi.FullyQualifiedName(constraintAttr))}}
	}
	if config != "" {
		spec.Devices.Config = []resourceapi.DeviceClaimConfiguration{{DeviceConfiguration: resourceapi.DeviceConfiguration{
			Opaque: &resourceapi.OpaqueDeviceConfiguration{Driver: apidra.DriverName, Parameters: runtime.RawExtension{Raw: []byte(config)}},
		}}}
	}
	return spec
}

func createTemplate(t *testing.T, ns, name string, spec resourceapi.ResourceClaimSpec) {
	t.Helper()
	tmpl := &resourceapi.ResourceClaimTemplate{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: resourceapi.ResourceClaimTemplateSpec{Spec: spec}}
	if _, err := env.Client.ResourceV1().ResourceClaimTemplates(ns).Create(t.Context(), tmpl, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating ResourceClaimTemplate %s: %v", name, err)
	}
}

func createClaim(t *testing.T, ns, name string, spec resourceapi.ResourceClaimSpec) {
	t.Helper()
	c := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: spec}
	if _, err := env.Client.ResourceV1().ResourceClaims(ns).Create(t.Context(), c, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating ResourceClaim %s: %v", name, err)
	}
}

// onNode is a pod of one busybox container on nodeName, by node selector
// so that kube-scheduler places it.
func onNode(ns, name, nodeName string) *build.PodBuilder {
	return build.Pod(ns, name).Image("busybox").NodeSelector("kubernetes.io/hostname", nodeName)
}

func createPod(t *testing.T, pod *corev1.Pod) {
	t.Helper()
	if _, err := env.Client.CoreV1().Pods(pod.Namespace).Create(t.Context(), pod, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating pod %s/%s: %v", pod.Namespace, pod.Name, err)
	}
}

func deletePod(t *testing.T, ns, name string) {
	t.Helper()
	zero := int64(0)
	if err := env.Client.CoreV1().Pods(ns).Delete(t.Context(), name, metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil && !apierrors.IsNotFound(err) {
		t.Fatalf("deleting pod %s/%s: %v", ns, name, err)
	}
}

// preparedCDI waits until the pod runs and returns the CDI device IDs its
// node recorded for its claim "gpu".
func preparedCDI(t *testing.T, ns, name string) []string {
	t.Helper()
	env.WaitPodPhase(t, ns, name, corev1.PodRunning, 90*time.Second)
	pod, err := env.Client.CoreV1().Pods(ns).Get(t.Context(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var m map[string][]string
	if err := json.Unmarshal([]byte(pod.Annotations[apidra.PodClaimsAnnotation]), &m); err != nil {
		t.Fatalf("pod %s/%s runs without a readable %s: %v", ns, name, apidra.PodClaimsAnnotation, err)
	}
	if len(m["gpu"]) == 0 {
		t.Fatalf("pod %s/%s: no CDI devices for its claim: %v", ns, name, m)
	}
	return m["gpu"]
}

// podClaim returns the pod's claim, allocated.
func podClaim(t *testing.T, ns, podName string) *resourceapi.ResourceClaim {
	t.Helper()
	pod, err := env.Client.CoreV1().Pods(ns).Get(t.Context(), podName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	name := ""
	for _, st := range pod.Status.ResourceClaimStatuses {
		if st.Name == "gpu" && st.ResourceClaimName != nil {
			name = *st.ResourceClaimName
		}
	}
	if name == "" && len(pod.Spec.ResourceClaims) > 0 && pod.Spec.ResourceClaims[0].ResourceClaimName != nil {
		name = *pod.Spec.ResourceClaims[0].ResourceClaimName
	}
	c, err := env.Client.ResourceV1().ResourceClaims(ns).Get(t.Context(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the claim of pod %s/%s: %v", ns, podName, err)
	}
	return c
}

func allocatedDevices(c *resourceapi.ResourceClaim) []string {
	if c.Status.Allocation == nil {
		return nil
	}
	var out []string
	for _, r := range c.Status.Allocation.Devices.Results {
		out = append(out, r.Device)
	}
	slices.Sort(out)
	return out
}

// cdiSpecs lists the claim CDI specs on the node.
func cdiSpecs(sim *nodesim.Simulator) []string {
	entries, _ := os.ReadDir(filepath.Join(sim.Dir(), "cdi"))
	var out []string
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), "gpuplane_claim_") {
			out = append(out, e.Name())
		}
	}
	return out
}

func waitNoCDISpec(t *testing.T, sim *nodesim.Simulator, claimUID string) {
	t.Helper()
	framework.Eventually(t, 60*time.Second, "the CDI spec of claim "+claimUID+" removed", func(context.Context) (bool, error) {
		for _, s := range cdiSpecs(sim) {
			if strings.Contains(s, claimUID) {
				return false, fmt.Errorf("still there: %s", s)
			}
		}
		return true, nil
	})
}

// pendingWith waits until the pod is not scheduled and its PodScheduled
// condition or an event on it says want.
func pendingWith(t *testing.T, ns, name, want string) {
	t.Helper()
	framework.Eventually(t, 60*time.Second, fmt.Sprintf("pod %s/%s pending with %q", ns, name, want), func(ctx context.Context) (bool, error) {
		pod, err := env.Client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		if pod.Status.Phase != corev1.PodPending {
			return false, fmt.Errorf("phase %s", pod.Status.Phase)
		}
		var said []string
		for _, c := range pod.Status.Conditions {
			if c.Type == corev1.PodScheduled {
				said = append(said, c.Message)
			}
		}
		evs, err := env.Client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + name})
		if err != nil {
			return false, err
		}
		for _, e := range evs.Items {
			said = append(said, e.Reason+": "+e.Message)
		}
		for _, s := range said {
			if strings.Contains(s, want) {
				return true, nil
			}
		}
		return false, fmt.Errorf("said %q", said)
	})
}

// heldOnce maps every GPU (by UUID) the running pods of ns hold, through
// the device plugin (the node's record on the pod), their claims or the
// claim of their extended resources, to the pod; a GPU held by two pods
// fails the test.
func heldOnce(t *testing.T, ns, nodeName string) map[string]string {
	t.Helper()
	uuids := map[string]string{}
	devs, err := sliceDevices(t.Context(), nodeName)
	if err != nil {
		t.Fatal(err)
	}
	for name, d := range devs {
		if u := d.Attributes[apidra.AttrUUID].StringValue; u != nil {
			uuids[name] = *u
		}
	}
	pods, err := env.Client.CoreV1().Pods(ns).List(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	held := map[string]string{}
	for _, p := range pods.Items {
		if p.Status.Phase != corev1.PodRunning {
			continue
		}
		var gpus []string
		if a, _ := gpupod.ReadAllocation(&p); a != nil {
			for _, c := range a.Containers {
				gpus = append(gpus, c.Devices["nvidia.com/gpu"]...)
			}
		}
		var claims []*resourceapi.ResourceClaim
		if len(p.Spec.ResourceClaims) > 0 {
			claims = append(claims, podClaim(t, ns, p.Name))
		}
		if st := p.Status.ExtendedResourceClaimStatus; st != nil {
			c, err := env.Client.ResourceV1().ResourceClaims(ns).Get(t.Context(), st.ResourceClaimName, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			claims = append(claims, c)
		}
		for _, c := range claims {
			for _, d := range allocatedDevices(c) {
				u, ok := uuids[d]
				if !ok {
					t.Fatalf("pod %s holds device %s, which the node does not publish", p.Name, d)
				}
				gpus = append(gpus, u)
			}
		}
		for _, g := range gpus {
			if other, dup := held[g]; dup {
				t.Errorf("GPU %s is held by %s and %s", g, other, p.Name)
			}
			held[g] = p.Name
		}
	}
	return held
}
