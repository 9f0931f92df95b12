package scheduler_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	configv1 "github.com/gpuplane/gpuplane/api/config/v1"
	apidra "github.com/gpuplane/gpuplane/api/dra"
	"github.com/gpuplane/gpuplane/api/scheduling/v1alpha1"
	"github.com/gpuplane/gpuplane/internal/adapter"
	"github.com/gpuplane/gpuplane/internal/dra"
	"github.com/gpuplane/gpuplane/test/integration/framework"
)

// extClaimsOf returns the extended-resource claims a pod controls.
func (c *draCluster) extClaimsOf(ctx context.Context, pod *corev1.Pod) ([]*resourceapi.ResourceClaim, error) {
	claims, err := c.claims(ctx)
	if err != nil {
		return nil, err
	}
	var out []*resourceapi.ResourceClaim
	for _, cl := range claims {
		if cl.Annotations[resourceapi.ExtendedResourceClaimAnnotation] != "true" {
			continue
		}
		if slices.ContainsFunc(cl.OwnerReferences, func(o metav1.OwnerReference) bool {
			return o.UID == pod.UID && o.Kind == "Pod" && ptr.Deref(o.Controller, false)
		}) {
			out = append(out, cl)
		}
	}
	return out, nil
}

// TestDRAExtendedResourceOnDRAOnlyNode checks migration without edits: a
// pod asking for nvidia.com/gpu, which a DeviceClass maps, is placed by
// gpuplane-scheduler on a node whose GPUs only DRA publishes, through a
// claim it makes as kube-scheduler does; a pod that does not fit leaves
// no claim behind.
func TestDRAExtendedResourceOnDRAOnlyNode(t *testing.T) {
	c := newDRACluster(t, 1, 4)
	ctx := t.Context()
	mapped := framework.DRAGPUClass("gpu-ext-" + c.ns)
	mapped.Spec.ExtendedResourceName = ptr.To(string(framework.ResourceGPU))
	rc := env.Client.ResourceV1().DeviceClasses()
	if _, err := rc.Create(ctx, mapped, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating the DeviceClass: %v", err)
	}
	t.Cleanup(func() { _ = rc.Delete(context.Background(), mapped.Name, metav1.DeleteOptions{}) })
	c.run(adapter.Config{})
	c.create(c.pod("two").Label("app", "ext").GPUs(2))
	c.waitBound("app=ext", 1, 120*time.Second)
	node := c.nodes[0]
	framework.Eventually(t, 60*time.Second, "the pod's claim allocated two devices of its node and named in its status", func(ctx context.Context) (bool, error) {
		p, err := env.Client.CoreV1().Pods(c.ns).Get(ctx, "two", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		if p.Spec.NodeName != node {
			return false, fmt.Errorf("pod on %q, want %s", p.Spec.NodeName, node)
		}
		claims, err := c.extClaimsOf(ctx, p)
		if err != nil {
			return false, err
		}
		if len(claims) != 1 {
			return false, fmt.Errorf("%d extended-resource claims of the pod, want 1", len(claims))
		}
		cl := claims[0]
		a := cl.Status.Allocation
		if a == nil || len(a.Devices.Results) != 2 {
			return false, fmt.Errorf("claim %s allocation %+v, want two devices", cl.Name, a)
		}
		for _, r := range a.Devices.Results {
			if r.Pool != node {
				return false, fmt.Errorf("claim %s has device %s/%s, not of node %s", cl.Name, r.Pool, r.Device, node)
			}
		}
		if a.Devices.Results[0].Device == a.Devices.Results[1].Device {
			return false, fmt.Errorf("claim %s has one device twice", cl.Name)
		}
		if !slices.Contains(cl.Finalizers, resourceapi.Finalizer) {
			return false, fmt.Errorf("claim %s has no %s finalizer", cl.Name, resourceapi.Finalizer)
		}
		if !slices.ContainsFunc(cl.Status.ReservedFor, func(r resourceapi.ResourceClaimConsumerReference) bool { return r.UID == p.UID }) {
			return false, fmt.Errorf("claim %s not reserved for the pod: %+v", cl.Name, cl.Status.ReservedFor)
		}
		if cl.GenerateName != "two-extended-resources-" {
			return false, fmt.Errorf("claim %s made with generateName %q", cl.Name, cl.GenerateName)
		}
		reqs := cl.Spec.Devices.Requests
		if len(reqs) != 1 || reqs[0].Exactly == nil || reqs[0].Exactly.DeviceClassName != mapped.Name || reqs[0].Exactly.Count != 2 {
			return false, fmt.Errorf("claim %s requests %+v, want 2 devices of %s", cl.Name, reqs, mapped.Name)
		}
		ctr := p.Spec.Containers[0]
		var keys []string
		for k := range ctr.Resources.Requests {
			keys = append(keys, string(k))
		}
		slices.Sort(keys)
		want := corev1.ContainerExtendedResourceRequest{ContainerName: ctr.Name, ResourceName: string(framework.ResourceGPU),
			RequestName: fmt.Sprintf("container-0-request-%d", slices.Index(keys, string(framework.ResourceGPU)))}
		if reqs[0].Name != want.RequestName {
			return false, fmt.Errorf("claim request named %q, want %q", reqs[0].Name, want.RequestName)
		}
		st := p.Status.ExtendedResourceClaimStatus
		if st == nil || st.ResourceClaimName != cl.Name || !slices.Equal(st.RequestMappings, []corev1.ContainerExtendedResourceRequest{want}) {
			return false, fmt.Errorf("pod status.extendedResourceClaimStatus %+v, want claim %s and mapping %+v", st, cl.Name, want)
		}
		return true, nil
	})
	// A gang of two one-GPU pods: each member's claim is written before
	// the gang's placement is committed and any member bound.
	c.podGroup("g", 2, "")
	c.create(c.pod("g-0").Label(v1alpha1.PodGroupLabel, "g").GPUs(1), c.pod("g-1").Label(v1alpha1.PodGroupLabel, "g").GPUs(1))
	c.waitBound(v1alpha1.PodGroupLabel+"=g", 2, 120*time.Second)
	framework.Eventually(t, 60*time.Second, "each gang member's claim allocated one device and named in its status", func(ctx context.Context) (bool, error) {
		ps, err := c.pods(ctx, v1alpha1.PodGroupLabel+"=g")
		if err != nil {
			return false, err
		}
		for name, p := range ps {
			claims, err := c.extClaimsOf(ctx, p)
			if err != nil {
				return false, err
			}
			if len(claims) != 1 || claims[0].Status.Allocation == nil || len(claims[0].Status.Allocation.Devices.Results) != 1 {
				return false, fmt.Errorf("pod %s has %d extended-resource claims, want 1 allocated one device", name, len(claims))
			}
			if st := p.Status.ExtendedResourceClaimStatus; st == nil || st.ResourceClaimName != claims[0].Name {
				return false, fmt.Errorf("pod %s status.extendedResourceClaimStatus %+v, want claim %s", name, st, claims[0].Name)
			}
		}
		if _, err := c.checkClaims(ctx); err != nil {
			return false, err
		}
		return true, nil
	})
	// One more GPU does not fit the node, all four held by claims: the
	// pod waits, and no claim of it stays.
	c.create(c.pod("extra").Label("app", "ext-big").GPUs(1))
	c.waitCondition("extra", corev1.PodReasonUnschedulable, "insufficient nvidia.com/gpu", 60*time.Second)
	p, err := env.Client.CoreV1().Pods(c.ns).Get(ctx, "extra", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if p.Spec.NodeName != "" {
		t.Fatalf("pod extra bound to %s", p.Spec.NodeName)
	}
	claims, err := c.extClaimsOf(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	if len(claims) != 0 {
		t.Errorf("pod extra that does not fit left claim %s", claims[0].Name)
	}
	if _, err := c.checkClaims(ctx); err != nil {
		t.Error(err)
	}
}

// TestDRAExtendedMIGAndImpliedResources: on a node whose MIG devices only
// the agent's DRA driver publishes (GPUs in MIG mode, instances made at
// prepare), a pod asking for nvidia.com/mig-1g.10gb gets a claim for one
// device of the profile's class, as kube-scheduler makes it; a pod asking
// for deviceclass.resource.kubernetes.io/<class>, the resource every
// DeviceClass implies, gets a claim of that class; one naming a class
// that does not exist waits and says so. The agent's driver prepares
// both claims.
func TestDRAExtendedMIGAndImpliedResources(t *testing.T) {
	b := gpuNodes(1, "migext")[0].GPUs(0)
	node := b.Obj().Name
	c := &draCluster{cluster: newCluster(t, b), nodes: []string{node}}
	ctx := t.Context()
	classes, err := dra.DeviceClasses(&configv1.Config{}, []string{"1g.10gb"})
	if err != nil {
		t.Fatal(err)
	}
	// The agent's classes under names of the test's own; the profile's
	// class keeps the resource it maps.
	var migClass, anyMIG string
	for _, dc := range classes {
		switch dc.Name {
		case "mig-1g.10gb." + apidra.DriverName:
		case dra.ClassMIG:
		default:
			continue
		}
		dc = dc.DeepCopy()
		dc.Name = dc.Name + "-" + c.ns
		if dc.Spec.ExtendedResourceName != nil {
			migClass = dc.Name
		} else {
			anyMIG = dc.Name
		}
		if _, err := env.Client.ResourceV1().DeviceClasses().Create(ctx, dc, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = env.Client.ResourceV1().DeviceClasses().Delete(context.Background(), dc.Name, metav1.DeleteOptions{})
		})
	}
	if migClass == "" || anyMIG == "" {
		t.Fatalf("the agent's classes have no 1g.10gb class mapping a resource and no class of all MIG devices")
	}
	driver := agentNode(t, node, migProfile)
	c.run(adapter.Config{})

	implied := corev1.ResourceName(resourceapi.ResourceDeviceClassPrefix + anyMIG)
	c.create(
		c.pod("small").Label("app", "migext").Limit("nvidia.com/mig-1g.10gb", "1"),
		c.pod("implied").Label("app", "migext").Limit(implied, "1"),
		c.pod("missing").Label("app", "missing").Limit(corev1.ResourceName(resourceapi.ResourceDeviceClassPrefix+"nosuch-"+c.ns), "1"),
	)
	c.waitBound("app=migext", 2, 120*time.Second)
	c.waitCondition("missing", "DeviceClassNotFound", `DeviceClass "nosuch-`+c.ns+`" does not exist`, 60*time.Second)
	ps, err := c.pods(ctx, "app=migext")
	if err != nil {
		t.Fatal(err)
	}
	for name, class := range map[string]string{"small": migClass, "implied": anyMIG} {
		p := ps[name]
		claims, err := c.extClaimsOf(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		if len(claims) != 1 {
			t.Fatalf("pod %s has %d extended-resource claims, want 1", name, len(claims))
		}
		cl := claims[0]
		if r := cl.Spec.Devices.Requests; len(r) != 1 || r[0].Exactly == nil || r[0].Exactly.DeviceClassName != class || r[0].Exactly.Count != 1 {
			t.Errorf("pod %s's claim requests %+v, want one device of %s", name, r, class)
		}
		a := cl.Status.Allocation
		if a == nil || len(a.Devices.Results) != 1 || a.Devices.Results[0].Pool != node {
			t.Fatalf("pod %s's claim allocation %+v, want one device of %s", name, a, node)
		}
		if name == "small" && !strings.Contains(a.Devices.Results[0].Device, "-mig-1g-10gb-") {
			t.Errorf("pod small's claim got %s, want a 1g.10gb device", a.Devices.Results[0].Device)
		}
		if st := p.Status.ExtendedResourceClaimStatus; st == nil || st.ResourceClaimName != cl.Name {
			t.Errorf("pod %s status.extendedResourceClaimStatus %+v, want claim %s", name, st, cl.Name)
		}
		// The node's driver prepares what the scheduler allocated,
		// making the instance.
		res, err := driver.PrepareResourceClaims(ctx, []*resourceapi.ResourceClaim{cl})
		if err != nil {
			t.Fatal(err)
		}
		if r := res[cl.UID]; r.Err != nil || len(r.Devices) != 1 || len(r.Devices[0].CDIDeviceIDs) == 0 {
			t.Errorf("the agent's driver preparing pod %s's claim: %+v", name, r)
		}
	}
	if _, err := c.checkClaims(ctx); err != nil {
		t.Error(err)
	}
}
