package scheduler_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	configv1 "github.com/gpuplane/gpuplane/api/config/v1"
	apidra "github.com/gpuplane/gpuplane/api/dra"
	"github.com/gpuplane/gpuplane/internal/adapter"
	"github.com/gpuplane/gpuplane/internal/cdi"
	"github.com/gpuplane/gpuplane/internal/dra"
	"github.com/gpuplane/gpuplane/internal/gpu/sim"
	"github.com/gpuplane/gpuplane/test/integration/framework"
)

// TestDRATaintedDevicesAreNotChosen taints both GPUs of one node
// unhealthy in its ResourceSlice: claims go to the other node, a claim
// that tolerates the taint may take them.
func TestDRATaintedDevicesAreNotChosen(t *testing.T) {
	c := newDRACluster(t, 2, 2)
	ctx := t.Context()
	slices := env.Client.ResourceV1().ResourceSlices()
	tainted := c.nodes[0]
	s, err := slices.Get(ctx, tainted+"-"+apidra.DriverName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range s.Spec.Devices {
		s.Spec.Devices[i].Taints = []resourceapi.DeviceTaint{{Key: apidra.TaintUnhealthy, Value: "xid-79", Effect: resourceapi.DeviceTaintEffectNoSchedule}}
	}
	if s, err = slices.Update(ctx, s, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if len(s.Spec.Devices[0].Taints) != 1 {
		t.Fatalf("the API server dropped the device taints (DRADeviceTaints off?): %+v", s.Spec.Devices[0])
	}
	c.run(adapter.Config{})
	for i := range 3 {
		name := fmt.Sprint("p-", i)
		c.claim(name, 1)
		c.create(c.pod(name).Label("app", "taints").Claim("gpu", name))
	}
	c.waitBound("app=taints", 2, 120*time.Second)
	ps, err := c.pods(ctx, "app=taints")
	if err != nil {
		t.Fatal(err)
	}
	for name, p := range ps {
		switch p.Spec.NodeName {
		case tainted:
			t.Errorf("pod %s was bound to %s, whose devices are all tainted", name, tainted)
		case "":
			c.waitCondition(name, corev1.PodReasonUnschedulable, "free devices for the claims", 60*time.Second)
		}
	}
	// A claim that tolerates the taint takes one of the tainted devices.
	tol := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: c.ns, Name: "tolerant"}, Spec: framework.DRAClaimSpec(c.class, 1)}
	tol.Spec.Devices.Requests[0].Exactly.Tolerations = []resourceapi.DeviceToleration{{Key: apidra.TaintUnhealthy, Operator: resourceapi.DeviceTolerationOpExists}}
	if _, err := env.Client.ResourceV1().ResourceClaims(c.ns).Create(ctx, tol, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	c.create(c.pod("tolerant").Label("app", "tolerant").Claim("gpu", "tolerant"))
	c.waitBound("app=tolerant", 1, 120*time.Second)
	if ps, err := c.pods(ctx, "app=tolerant"); err != nil || ps["tolerant"].Spec.NodeName != tainted {
		t.Errorf("the tolerant pod is on %q (%v), want %s", ps["tolerant"].Spec.NodeName, err, tainted)
	}
	if _, err := c.checkClaims(ctx); err != nil {
		t.Error(err)
	}
}

// migProfile is a node of two H100s in MIG mode, no instance made yet.
const migProfile = `version: v1
name: dra-mig
driverVersion: "560.35.03"
cudaDriverVersion: "12.6"
gpus:
  - model: H100-SXM5-80GB
    count: 2
    migEnabled: true
`

// agentNode runs the agent's DRA driver on the sim backend for a kwok
// node and publishes its pool as the agent does (one ResourceSlice per
// slice of its pool), so that the scheduler sees exactly the agent's
// devices, attributes, counters and taints.
func agentNode(t *testing.T, node, profile string) *dra.Driver {
	t.Helper()
	p, err := sim.Parse(strings.NewReader(profile), "test")
	if err != nil {
		t.Fatal(err)
	}
	b, err := sim.New(p, sim.Options{NodeName: node})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	dir := t.TempDir()
	w, err := cdi.NewWriter(cdi.Options{Dir: dir + "/cdi"})
	if err != nil {
		t.Fatal(err)
	}
	d, err := dra.New(t.Context(), dra.Options{Backend: b, NodeName: node, CDI: w, StateFile: dir + "/state/checkpoint.json", MPSRoot: dir + "/mps"})
	if err != nil {
		t.Fatal(err)
	}
	pool := d.Resources().Pools[node]
	for i, sl := range pool.Slices {
		s := &resourceapi.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%s-%d", node, apidra.DriverName, i)},
			Spec: resourceapi.ResourceSliceSpec{Driver: apidra.DriverName, NodeName: ptr.To(node),
				Pool:    resourceapi.ResourcePool{Name: node, Generation: 1, ResourceSliceCount: int64(len(pool.Slices))},
				Devices: sl.Devices, SharedCounters: sl.SharedCounters}}
		if _, err := env.Client.ResourceV1().ResourceSlices().Create(t.Context(), s, metav1.CreateOptions{}); err != nil {
			t.Fatalf("publishing the agent's slice %d of %s: %v", i, node, err)
		}
		t.Cleanup(func() {
			_ = env.Client.ResourceV1().ResourceSlices().Delete(context.Background(), s.Name, metav1.DeleteOptions{})
		})
	}
	return d
}

// TestDRADynamicMIGClaims places claims for MIG devices on a node whose
// GPUs are in MIG mode with no instance made, from the agent's own
// ResourceSlices: two 4g.40gb instances cannot share a GPU's 7 compute
// slices, so they get one GPU each and a third waits; a 3g.40gb then
// takes the other half of a GPU. The agent's driver prepares what the
// scheduler allocated, creating the instances.
func TestDRADynamicMIGClaims(t *testing.T) {
	b := gpuNodes(1, "mig")[0].GPUs(0)
	node := b.Obj().Name
	c := &draCluster{cluster: newCluster(t, b), nodes: []string{node}}
	c.class = "mig-" + c.ns
	classes, err := dra.DeviceClasses(&configv1.Config{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, dc := range classes {
		if dc.Name != dra.ClassMIG {
			continue
		}
		dc = dc.DeepCopy()
		dc.Name, dc.Spec.ExtendedResourceName = c.class, nil
		if _, err := env.Client.ResourceV1().DeviceClasses().Create(t.Context(), dc, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = env.Client.ResourceV1().DeviceClasses().Delete(context.Background(), dc.Name, metav1.DeleteOptions{})
		})
	}
	driver := agentNode(t, node, migProfile)
	c.run(adapter.Config{})
	profile := func(p string) string { return fmt.Sprintf("device.attributes[%q].profile == %q", apidra.DriverName, p) }
	for i := range 3 {
		name := fmt.Sprint("big-", i)
		c.claim(name, 1, profile("4g.40gb"))
		c.create(c.pod(name).Label("app", "big").Claim("gpu", name))
	}
	c.waitBound("app=big", 2, 120*time.Second)
	ps, err := c.pods(t.Context(), "app=big")
	if err != nil {
		t.Fatal(err)
	}
	for name, p := range ps {
		if p.Spec.NodeName == "" {
			c.waitCondition(name, corev1.PodReasonUnschedulable, "free devices for the claims", 60*time.Second)
		}
	}
	claims, err := c.claims(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	gpus := map[string]bool{}
	var allocated []*resourceapi.ResourceClaim
	for _, cl := range claims {
		if cl.Status.Allocation == nil {
			continue
		}
		allocated = append(allocated, cl)
		dev := cl.Status.Allocation.Devices.Results[0].Device
		if !strings.Contains(dev, "-mig-4g-40gb-") {
			t.Errorf("claim %s got %s, want a 4g.40gb device", cl.Name, dev)
		}
		gpus[strings.SplitN(dev, "-mig-", 2)[0]] = true
	}
	if len(allocated) != 2 || len(gpus) != 2 {
		t.Fatalf("%d claims allocated on GPUs %v, want two 4g.40gb on two GPUs", len(allocated), gpus)
	}
	// A 3g.40gb fits beside a 4g.40gb: memory slices 4-7 of a GPU.
	c.claim("half", 1, profile("3g.40gb"))
	c.create(c.pod("half").Label("app", "half").Claim("gpu", "half"))
	c.waitBound("app=half", 1, 120*time.Second)
	if _, err := c.checkClaims(t.Context()); err != nil {
		t.Fatal(err)
	}
	half, err := env.Client.ResourceV1().ResourceClaims(c.ns).Get(t.Context(), "half", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if dev := half.Status.Allocation.Devices.Results[0].Device; !strings.HasSuffix(dev, "-mig-3g-40gb-4-4") {
		t.Errorf("the 3g.40gb claim got %s, want the placement at memory slice 4 beside the 4g.40gb", dev)
	}
	// The agent's driver prepares exactly what was allocated: it makes
	// the three instances and returns their CDI devices.
	allocated = append(allocated, half)
	res, err := driver.PrepareResourceClaims(t.Context(), allocated)
	if err != nil {
		t.Fatal(err)
	}
	for _, cl := range allocated {
		r := res[cl.UID]
		if r.Err != nil || len(r.Devices) != 1 || len(r.Devices[0].CDIDeviceIDs) == 0 {
			t.Errorf("preparing claim %s: %+v", cl.Name, r)
		}
	}
}
