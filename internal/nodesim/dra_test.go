package nodesim

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"

	apidra "github.com/gpuplane/gpuplane/api/dra"
	"github.com/gpuplane/gpuplane/internal/cdi"
	"github.com/gpuplane/gpuplane/internal/dra"
	"github.com/gpuplane/gpuplane/internal/gpu/sim"
	"github.com/gpuplane/gpuplane/internal/ledger"
	"github.com/gpuplane/gpuplane/internal/testutil/build"
)

// draNode is a simulator with gpuplane's DRA driver (internal/dra on the
// simulated backend) serving its plugin directories.
type draNode struct {
	t      *testing.T
	s      *Simulator
	client *fake.Clientset
	sim    *sim.Backend
	cdiDir string
	state  string
	driver *dra.Driver
	cancel context.CancelFunc
	done   chan error
}

func startDRANode(t *testing.T) *draNode {
	t.Helper()
	client := fake.NewClientset()
	// t.TempDir's long names leave no room for socket paths.
	dir, err := os.MkdirTemp("", "nodesim-dra-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	s, err := Start(t.Context(), Config{NodeName: "n1", Dir: filepath.Join(dir, "kubelet"), Client: client})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Stop(context.Background()); err != nil {
			t.Error(err)
		}
	})
	p, err := sim.Builtin("dgxh100")
	if err != nil {
		t.Fatal(err)
	}
	b, err := sim.New(p, sim.Options{NodeName: "n1"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	n := &draNode{t: t, s: s, client: client, sim: b, cdiDir: filepath.Join(dir, "cdi"), state: filepath.Join(dir, "dra", "checkpoint.json")}
	n.startDriver()
	return n
}

// startDriver runs the DRA driver as the agent's --dra part does and waits
// until the simulator registered it.
func (n *draNode) startDriver() {
	t := n.t
	t.Helper()
	w, err := cdi.NewWriter(cdi.Options{Dir: n.cdiDir})
	if err != nil {
		t.Fatal(err)
	}
	d, err := dra.New(t.Context(), dra.Options{Backend: n.sim, NodeName: "n1", CDI: w, StateFile: n.state, Ledger: ledger.New(), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	n.driver, n.cancel, n.done = d, cancel, make(chan error, 1)
	go func() {
		n.done <- d.Serve(ctx, dra.ServeOptions{Client: n.client, RegistrarDir: n.s.PluginRegistryDir(), PluginDir: filepath.Join(n.s.PluginsDir(), apidra.DriverName)})
	}()
	t.Cleanup(n.stopDriver)
	waitFor(t, "the driver's registration", func() bool { return slices.Contains(n.s.DRADrivers(), apidra.DriverName) })
}

func (n *draNode) stopDriver() {
	if n.cancel == nil {
		return
	}
	n.cancel()
	// Stopped before its first publish is through (the fake API's
	// informers sync slowly), Serve says so; anything else is a failure.
	if err := <-n.done; err != nil && !errors.Is(err, context.Canceled) {
		n.t.Errorf("the driver ended with %v", err)
	}
	n.cancel = nil
}

// claim creates a claim of one device of node n1, allocated, with opaque
// config when raw is set, reserved for the pods of the given UIDs.
func (n *draNode) claim(name, device, raw string, reservedFor ...types.UID) *resourceapi.ResourceClaim {
	n.t.Helper()
	c := &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID("uid-" + name)},
		Status: resourceapi.ResourceClaimStatus{Allocation: &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{
			Results: []resourceapi.DeviceRequestAllocationResult{{Request: "gpu", Driver: apidra.DriverName, Pool: "n1", Device: device}},
		}}},
	}
	if raw != "" {
		c.Status.Allocation.Devices.Config = []resourceapi.DeviceAllocationConfiguration{{
			Source: resourceapi.AllocationConfigSourceClaim, Requests: []string{"gpu"},
			DeviceConfiguration: resourceapi.DeviceConfiguration{Opaque: &resourceapi.OpaqueDeviceConfiguration{Driver: apidra.DriverName, Parameters: runtime.RawExtension{Raw: []byte(raw)}}},
		}}
	}
	for _, uid := range reservedFor {
		c.Status.ReservedFor = append(c.Status.ReservedFor, resourceapi.ResourceClaimConsumerReference{Resource: "pods", Name: string(uid), UID: uid})
	}
	c, err := n.client.ResourceV1().ResourceClaims("ns").Create(n.t.Context(), c, metav1.CreateOptions{})
	if err != nil {
		n.t.Fatal(err)
	}
	return c
}

// pod creates a pod bound to n1 whose container uses the named claims.
func (n *draNode) pod(name string, claims ...string) *corev1.Pod {
	n.t.Helper()
	b := build.Pod("ns", name).UID(name).NodeName("n1")
	for _, c := range claims {
		b.Claim("ref-"+c, c)
	}
	pod, err := n.client.CoreV1().Pods("ns").Create(n.t.Context(), b.Obj(), metav1.CreateOptions{})
	if err != nil {
		n.t.Fatal(err)
	}
	return pod
}

func (n *draNode) get(name string) *corev1.Pod {
	p, err := n.client.CoreV1().Pods("ns").Get(n.t.Context(), name, metav1.GetOptions{})
	if err != nil {
		n.t.Fatal(err)
	}
	return p
}

func (n *draNode) delete(name string) {
	if err := n.client.CoreV1().Pods("ns").Delete(n.t.Context(), name, metav1.DeleteOptions{}); err != nil {
		n.t.Fatal(err)
	}
}

// waitRunning waits for the pod to run and returns the CDI devices
// recorded for its claims.
func (n *draNode) waitRunning(name string) map[string][]string {
	n.t.Helper()
	waitFor(n.t, "pod "+name+" running", func() bool { return n.get(name).Status.Phase == corev1.PodRunning })
	var got map[string][]string
	if err := json.Unmarshal([]byte(n.get(name).Annotations[apidra.PodClaimsAnnotation]), &got); err != nil {
		n.t.Fatalf("pod %s runs without a readable %s: %v", name, apidra.PodClaimsAnnotation, err)
	}
	return got
}

// waitEvent waits for a FailedPrepareDynamicResources event of the pod and
// returns its message; the pod is still Pending.
func (n *draNode) waitEvent(name string) string {
	n.t.Helper()
	var msg string
	waitFor(n.t, "an event of pod "+name, func() bool {
		evs, err := n.client.CoreV1().Events("ns").List(n.t.Context(), metav1.ListOptions{})
		if err != nil {
			return false
		}
		for _, e := range evs.Items {
			if e.InvolvedObject.Name == name && e.Reason == "FailedPrepareDynamicResources" {
				msg = e.Message
				return true
			}
		}
		return false
	})
	if ph := n.get(name).Status.Phase; ph == corev1.PodRunning {
		n.t.Errorf("pod %s runs although its claims were not prepared", name)
	}
	return msg
}

func (n *draNode) knowsClaim(uid types.UID) bool {
	n.s.dra.mu.Lock()
	defer n.s.dra.mu.Unlock()
	_, ok := n.s.dra.claims[uid]
	return ok
}

func TestDRAPrepare(t *testing.T) {
	n := startDRANode(t)
	c := n.claim("one", "gpu-0", "", "p1")
	n.pod("p1", "one")
	got := n.waitRunning("p1")
	want := []string{cdi.ClaimDeviceID(string(c.UID), "gpu-0")}
	if !slices.Equal(got["ref-one"], want) {
		t.Errorf("recorded %v, want %v", got, want)
	}
	if p := n.driver.Prepared(); !slices.Equal(p, []string{string(c.UID)}) {
		t.Errorf("the driver prepared %v", p)
	}
	n.delete("p1")
	waitFor(t, "unprepare", func() bool { return len(n.driver.Prepared()) == 0 && !n.knowsClaim(c.UID) })
	if _, err := os.Stat(cdi.ClaimSpecPath(n.cdiDir, string(c.UID))); !os.IsNotExist(err) {
		t.Errorf("the claim's CDI spec stayed: %v", err)
	}
}

func TestDRASharedClaim(t *testing.T) {
	n := startDRANode(t)
	c := n.claim("shared", "gpu-1", "", "p1", "p2")
	n.pod("p1", "shared")
	first := n.waitRunning("p1")
	n.pod("p2", "shared")
	second := n.waitRunning("p2")
	if !slices.Equal(first["ref-shared"], second["ref-shared"]) {
		t.Errorf("the pods of one claim got %v and %v", first, second)
	}
	n.delete("p1")
	waitFor(t, "the first pod gone", func() bool {
		n.s.dra.mu.Lock()
		defer n.s.dra.mu.Unlock()
		return len(n.s.dra.claims[c.UID].pods) == 1
	})
	if p := n.driver.Prepared(); len(p) != 1 {
		t.Fatalf("the claim was unprepared while a pod uses it: %v", p)
	}
	n.delete("p2")
	waitFor(t, "unprepare after the last pod", func() bool { return len(n.driver.Prepared()) == 0 && !n.knowsClaim(c.UID) })
}

// TestDRAPrepareRefused: what the kubelet's DRA manager refuses, or the
// driver, keeps the pod Pending with the kubelet's event and reason;
// nothing is prepared, and the pod's removal leaves no claim behind.
func TestDRAPrepareRefused(t *testing.T) {
	badConfig := `{"apiVersion":"gpu.gpuplane.io/v1alpha1","kind":"GpuConfig","sharingMode":"exclusive"}`
	_, configErr := apidra.DecodeConfig([]byte(badConfig))
	if configErr == nil {
		t.Fatal("the bad config decodes")
	}
	tests := []struct {
		name     string
		device   string
		config   string
		reserved bool
		want     string
	}{
		{name: "opaque config with an unknown field", device: "gpu-0", config: badConfig, reserved: true,
			want: "Failed to prepare dynamic resources: prepare dynamic resources: NodePrepareResources failed for ResourceClaim c: request gpu: config[0] (from the claim): " + configErr.Error()},
		{name: "a device the node does not have", device: "gpu-99", reserved: true,
			want: "NodePrepareResources failed for ResourceClaim c: request gpu: device gpu-99 is not one of this node's"},
		{name: "not reserved for the pod", device: "gpu-0",
			want: "Failed to prepare dynamic resources: prepare dynamic resources: pod p (p) is not allowed to use ResourceClaim c (uid-c)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n := startDRANode(t)
			var reserved []types.UID
			if tt.reserved {
				reserved = append(reserved, "p")
			}
			c := n.claim("c", tt.device, tt.config, reserved...)
			n.pod("p", "c")
			if msg := n.waitEvent("p"); !strings.Contains(msg, tt.want) {
				t.Errorf("event %q, want it to say %q", msg, tt.want)
			}
			if p := n.driver.Prepared(); len(p) != 0 {
				t.Errorf("the driver prepared %v", p)
			}
			n.delete("p")
			waitFor(t, "the claim forgotten", func() bool { return !n.knowsClaim(c.UID) })
		})
	}
}

func TestDRADriverNotRegistered(t *testing.T) {
	n := startDRANode(t)
	n.stopDriver()
	waitFor(t, "the driver deregistered", func() bool { return len(n.s.DRADrivers()) == 0 })
	n.claim("c", "gpu-0", "", "p")
	n.pod("p", "c")
	if msg, want := n.waitEvent("p"), "prepare dynamic resources: DRA driver "+apidra.DriverName+" is not registered"; !strings.Contains(msg, want) {
		t.Errorf("event %q, want %q", msg, want)
	}
	n.startDriver()
	n.waitRunning("p")
}

// TestDRADriverRestart: a pod removed while its driver is down keeps its
// claim until the driver is back and unprepares it from its checkpoint.
func TestDRADriverRestart(t *testing.T) {
	n := startDRANode(t)
	c := n.claim("c", "gpu-2", "", "p")
	n.pod("p", "c")
	n.waitRunning("p")
	n.stopDriver()
	n.delete("p")
	waitFor(t, "a failed unprepare", func() bool {
		n.s.dra.mu.Lock()
		defer n.s.dra.mu.Unlock()
		info := n.s.dra.claims[c.UID]
		return info != nil && info.attempts > 0
	})
	n.startDriver()
	if p := n.driver.Prepared(); !slices.Equal(p, []string{string(c.UID)}) {
		t.Fatalf("the restarted driver has %v prepared", p)
	}
	waitFor(t, "unprepare after the restart", func() bool { return len(n.driver.Prepared()) == 0 && !n.knowsClaim(c.UID) })
}

func TestPodClaimNames(t *testing.T) {
	tests := []struct {
		name    string
		pod     *corev1.Pod
		want    []podClaim
		wantErr string
	}{
		{
			name: "by name",
			pod:  &corev1.Pod{Spec: corev1.PodSpec{ResourceClaims: []corev1.PodResourceClaim{{Name: "a", ResourceClaimName: ptr.To("claim-a")}}}},
			want: []podClaim{{ref: "a", name: "claim-a"}},
		},
		{
			name: "from a template, owned by the pod",
			pod: &corev1.Pod{
				Spec:   corev1.PodSpec{ResourceClaims: []corev1.PodResourceClaim{{Name: "t", ResourceClaimTemplateName: ptr.To("tmpl")}}},
				Status: corev1.PodStatus{ResourceClaimStatuses: []corev1.PodResourceClaimStatus{{Name: "t", ResourceClaimName: ptr.To("p-t-x1")}}},
			},
			want: []podClaim{{ref: "t", name: "p-t-x1", mustCheckOwner: true}},
		},
		{
			name: "a template whose claim was not needed",
			pod: &corev1.Pod{
				Spec:   corev1.PodSpec{ResourceClaims: []corev1.PodResourceClaim{{Name: "t", ResourceClaimTemplateName: ptr.To("tmpl")}}},
				Status: corev1.PodStatus{ResourceClaimStatuses: []corev1.PodResourceClaimStatus{{Name: "t"}}},
			},
		},
		{
			name:    "a template's claim not created yet",
			pod:     &corev1.Pod{Spec: corev1.PodSpec{ResourceClaims: []corev1.PodResourceClaim{{Name: "t", ResourceClaimTemplateName: ptr.To("tmpl")}}}},
			wantErr: "not created yet",
		},
		{
			name: "the claim of extended resources",
			pod:  &corev1.Pod{Status: corev1.PodStatus{ExtendedResourceClaimStatus: &corev1.PodExtendedResourceClaimStatus{ResourceClaimName: "p-extended-resources-x"}}},
			want: []podClaim{{ref: "p-extended-resources-x", name: "p-extended-resources-x"}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.pod.Name = "p"
			got, err := podClaimNames(tt.pod)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err %v, want one saying %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("got %+v, want %+v", got, tt.want)
			}
		})
	}
}
