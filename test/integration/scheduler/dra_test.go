package scheduler_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"

	"github.com/gpuplane/gpuplane/api/scheduling/v1alpha1"
	"github.com/gpuplane/gpuplane/internal/adapter"
	"github.com/gpuplane/gpuplane/test/integration/framework"
)

// draCluster is a test cluster of kwok nodes with no device-plugin GPUs
// whose GPUs are published in ResourceSlices of gpuplane's driver, and a
// DeviceClass of the test's own selecting them.
type draCluster struct {
	*cluster
	class string
	nodes []string
}

func newDRACluster(t *testing.T, nodes, gpus int) *draCluster {
	t.Helper()
	bs := gpuNodes(nodes, "dra")
	names := make([]string, nodes)
	for i, b := range bs {
		b.GPUs(0)
		names[i] = b.Obj().Name
	}
	c := &draCluster{cluster: newCluster(t, bs...), nodes: names}
	c.class = "gpu-" + c.ns
	ctx := t.Context()
	rc := env.Client.ResourceV1()
	if _, err := rc.DeviceClasses().Create(ctx, framework.DRAGPUClass(c.class), metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating the DeviceClass: %v", err)
	}
	t.Cleanup(func() { _ = rc.DeviceClasses().Delete(context.Background(), c.class, metav1.DeleteOptions{}) })
	for _, n := range names {
		s := framework.DRAGPUSlice(n, gpus, "NVIDIA-H100-80GB-HBM3")
		if _, err := rc.ResourceSlices().Create(ctx, s, metav1.CreateOptions{}); err != nil {
			t.Fatalf("creating the ResourceSlice of %s: %v", n, err)
		}
		name := s.Name
		t.Cleanup(func() { _ = rc.ResourceSlices().Delete(context.Background(), name, metav1.DeleteOptions{}) })
	}
	return c
}

func (c *draCluster) claim(name string, count int64, selectors ...string) {
	c.t.Helper()
	cl := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: c.ns, Name: name}, Spec: framework.DRAClaimSpec(c.class, count, selectors...)}
	if _, err := env.Client.ResourceV1().ResourceClaims(c.ns).Create(c.t.Context(), cl, metav1.CreateOptions{}); err != nil {
		c.t.Fatalf("creating ResourceClaim %s: %v", name, err)
	}
}

func (c *draCluster) template(name string, count int64) {
	c.t.Helper()
	tpl := &resourceapi.ResourceClaimTemplate{ObjectMeta: metav1.ObjectMeta{Namespace: c.ns, Name: name},
		Spec: resourceapi.ResourceClaimTemplateSpec{Spec: framework.DRAClaimSpec(c.class, count)}}
	if _, err := env.Client.ResourceV1().ResourceClaimTemplates(c.ns).Create(c.t.Context(), tpl, metav1.CreateOptions{}); err != nil {
		c.t.Fatalf("creating ResourceClaimTemplate %s: %v", name, err)
	}
}

// claims lists the test's claims by name.
func (c *draCluster) claims(ctx context.Context) (map[string]*resourceapi.ResourceClaim, error) {
	list, err := env.Client.ResourceV1().ResourceClaims(c.ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	out := map[string]*resourceapi.ResourceClaim{}
	for i := range list.Items {
		out[list.Items[i].Name] = &list.Items[i]
	}
	return out, nil
}

// checkClaims checks every bound pod's claims against the API server:
// allocated on the pod's node, reserved for the pod, and no device held by
// two claims. It returns the devices per node.
func (c *draCluster) checkClaims(ctx context.Context) (map[string][]string, error) {
	pods, err := c.pods(ctx, "")
	if err != nil {
		return nil, err
	}
	claims, err := c.claims(ctx)
	if err != nil {
		return nil, err
	}
	owner := map[string]string{} // device -> claim
	perNode := map[string][]string{}
	for _, cl := range claims {
		a := cl.Status.Allocation
		if a == nil {
			continue
		}
		for _, r := range a.Devices.Results {
			dev := r.Pool + "/" + r.Device
			if o, ok := owner[dev]; ok {
				return nil, fmt.Errorf("device %s allocated to claims %s and %s", dev, o, cl.Name)
			}
			owner[dev] = cl.Name
			perNode[r.Pool] = append(perNode[r.Pool], r.Device)
		}
		if !slices.Contains(cl.Finalizers, resourceapi.Finalizer) {
			return nil, fmt.Errorf("claim %s is allocated without the %s finalizer", cl.Name, resourceapi.Finalizer)
		}
	}
	for _, p := range pods {
		if p.Spec.NodeName == "" {
			continue
		}
		for i, rc := range p.Spec.ResourceClaims {
			name := ptr.Deref(rc.ResourceClaimName, "")
			if name == "" && i < len(p.Status.ResourceClaimStatuses) {
				name = ptr.Deref(p.Status.ResourceClaimStatuses[i].ResourceClaimName, "")
			}
			cl := claims[name]
			if cl == nil || cl.Status.Allocation == nil {
				return nil, fmt.Errorf("pod %s is bound to %s but its claim %q is not allocated", p.Name, p.Spec.NodeName, name)
			}
			if !slices.ContainsFunc(cl.Status.ReservedFor, func(r resourceapi.ResourceClaimConsumerReference) bool { return r.UID == p.UID }) {
				return nil, fmt.Errorf("pod %s is bound but claim %s is not reserved for it: %+v", p.Name, name, cl.Status.ReservedFor)
			}
			for _, r := range cl.Status.Allocation.Devices.Results {
				if r.Pool != p.Spec.NodeName {
					return nil, fmt.Errorf("pod %s is on %s but its claim %s has device %s/%s", p.Name, p.Spec.NodeName, name, r.Pool, r.Device)
				}
			}
		}
	}
	return perNode, nil
}

// TestDRATemplateClaimsNeverShareADevice: 18 pods whose claims come from
// one template on 16 GPUs. No device is ever in two claims, at any state
// the claims' watch shows; 16 pods end bound, each on its own device.
func TestDRATemplateClaimsNeverShareADevice(t *testing.T) {
	c := newDRACluster(t, 2, 8)
	c.template("one-gpu", 1)
	c.alwaysClaims("no device allocated to two claims", exclusiveDevices)
	c.run(adapter.Config{})
	for i := range 18 {
		c.create(c.pod(fmt.Sprintf("p-%02d", i)).Label("app", "dra").ClaimTemplate("gpu", "one-gpu"))
	}
	c.waitBound("app=dra", 16, 120*time.Second)
	framework.Eventually(t, 60*time.Second, "claims allocated and reserved", func(ctx context.Context) (bool, error) {
		c.failIfBroken()
		perNode, err := c.checkClaims(ctx)
		if err != nil {
			return false, err
		}
		n := 0
		for _, d := range perNode {
			n += len(d)
		}
		return n == 16, fmt.Errorf("%d devices allocated, want 16", n)
	})
	// The two left wait, saying the claims' devices are taken.
	ps, err := c.pods(t.Context(), "app=dra")
	if err != nil {
		t.Fatal(err)
	}
	for name, p := range ps {
		if p.Spec.NodeName == "" {
			c.waitCondition(name, corev1.PodReasonUnschedulable, "insufficient free devices for the claims", 60*time.Second)
		}
	}
}

func TestDRAGangClaimsAllOrNone(t *testing.T) {
	c := newDRACluster(t, 2, 8)
	c.alwaysClaims("no device allocated to two claims", exclusiveDevices)
	c.alwaysPods("no member of the gang that does not fit bound", v1alpha1.PodGroupLabel+"=too-big", atMostBound(0))
	c.run(adapter.Config{})
	// fits: 3 pods of 4 GPUs on 16; too-big: 2 pods of 8 beside it do not.
	c.podGroup("fits", 3, "")
	c.podGroup("too-big", 2, "")
	for i := range 3 {
		name := fmt.Sprint("fits-", i)
		c.claim(name, 4)
		c.create(c.pod(name).Label(v1alpha1.PodGroupLabel, "fits").Claim("gpu", name))
	}
	c.waitBound(v1alpha1.PodGroupLabel+"=fits", 3, 120*time.Second)
	for i := range 2 {
		name := fmt.Sprint("big-", i)
		c.claim(name, 8)
		c.create(c.pod(name).Label(v1alpha1.PodGroupLabel, "too-big").Claim("gpu", name))
	}
	c.waitCondition("big-0", corev1.PodReasonUnschedulable, "insufficient free devices for the claims", 60*time.Second)
	if n, _, err := c.bound(t.Context(), v1alpha1.PodGroupLabel+"=too-big"); err != nil || n != 0 {
		t.Fatalf("%d members of the gang that does not fit are bound (%v)", n, err)
	}
	claims, err := c.claims(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"big-0", "big-1"} {
		if cl := claims[name]; cl.Status.Allocation != nil || len(cl.Status.ReservedFor) > 0 || len(cl.Finalizers) > 0 {
			t.Errorf("claim %s of the unplaced gang was touched: %+v %v", name, cl.Status, cl.Finalizers)
		}
	}
	if _, err := c.checkClaims(t.Context()); err != nil {
		t.Error(err)
	}
}

func TestDRASharedClaimServesTwoPods(t *testing.T) {
	c := newDRACluster(t, 2, 8)
	c.run(adapter.Config{})
	c.claim("shared", 2)
	c.create(c.pod("first").Label("app", "shared").Claim("gpu", "shared"))
	c.waitBound("app=shared", 1, 120*time.Second)
	c.create(c.pod("second").Label("app", "shared").Claim("gpu", "shared"))
	c.waitBound("app=shared", 2, 120*time.Second)
	framework.Eventually(t, 60*time.Second, "the shared claim reserved for both pods on one node", func(ctx context.Context) (bool, error) {
		ps, err := c.pods(ctx, "app=shared")
		if err != nil {
			return false, err
		}
		if ps["first"].Spec.NodeName != ps["second"].Spec.NodeName {
			return false, fmt.Errorf("pods on %s and %s", ps["first"].Spec.NodeName, ps["second"].Spec.NodeName)
		}
		cl, err := env.Client.ResourceV1().ResourceClaims(c.ns).Get(ctx, "shared", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		if _, err := c.checkClaims(ctx); err != nil {
			return false, err
		}
		return len(cl.Status.ReservedFor) == 2 && len(cl.Status.Allocation.Devices.Results) == 2,
			fmt.Errorf("reservedFor %+v", cl.Status.ReservedFor)
	})
}

func TestDRABadClaimsWaitWithAReason(t *testing.T) {
	c := newDRACluster(t, 1, 8)
	c.run(adapter.Config{})
	c.claim("b200", 1, `device.attributes["gpu.gpuplane.io"].productName == "B200"`)
	c.claim("nosuch", 1, `device.attributes["gpu.gpuplane.io"].nosuch == "x"`)
	missing := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: c.ns, Name: "missing-class"}, Spec: framework.DRAClaimSpec("no-such-class-"+c.ns, 1)}
	if _, err := env.Client.ResourceV1().ResourceClaims(c.ns).Create(t.Context(), missing, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	c.create(c.pod("b200").Claim("gpu", "b200"), c.pod("nosuch").Claim("gpu", "nosuch"), c.pod("missing-class").Claim("gpu", "missing-class"))
	c.waitCondition("b200", corev1.PodReasonUnschedulable, "no device satisfies the claims", 60*time.Second)
	c.waitCondition("nosuch", "SelectorFailed", "ResourceClaim "+c.ns+`/nosuch: spec.devices.requests[0] ("gpu").exactly.selectors[0]`, 60*time.Second)
	c.waitCondition("missing-class", "DeviceClassNotFound", `DeviceClass "no-such-class-`+c.ns+`" does not exist`, 60*time.Second)
	claims, err := c.claims(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for name, cl := range claims {
		if cl.Status.Allocation != nil || len(cl.Status.ReservedFor) > 0 || len(cl.Finalizers) > 0 {
			t.Errorf("claim %s was allocated or reserved: %+v %v", name, cl.Status, cl.Finalizers)
		}
	}
}

// TestDRAFailedBindReleasesTheClaim refuses the binding of one pod with a
// ValidatingAdmissionPolicy: its claim is allocated and released again
// each time, and the device it held serves another pod.
func TestDRAFailedBindReleasesTheClaim(t *testing.T) {
	c := newDRACluster(t, 1, 1)
	ctx := t.Context()
	adm := env.Client.AdmissionregistrationV1()
	name := "deny-binding-" + c.ns
	pol := &admissionregistrationv1.ValidatingAdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: ptr.To(admissionregistrationv1.Fail),
			MatchConstraints: &admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{
				RuleWithOperations: admissionregistrationv1.RuleWithOperations{Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
					Rule: admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods/binding"}}}}}},
			Validations: []admissionregistrationv1.Validation{{Expression: `!object.metadata.name.startsWith("doomed")`, Message: "bindings of doomed pods are refused"}},
		}}
	if _, err := adm.ValidatingAdmissionPolicies().Create(ctx, pol, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = adm.ValidatingAdmissionPolicies().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	bind := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{PolicyName: name, ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny},
			MatchResources: &admissionregistrationv1.MatchResources{NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": c.ns}}}}}
	if _, err := adm.ValidatingAdmissionPolicyBindings().Create(ctx, bind, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = adm.ValidatingAdmissionPolicyBindings().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	// The policy takes effect once the API server has loaded it; a probe
	// binding of a pod nobody schedules tells when.
	probe := 0
	framework.Eventually(t, 60*time.Second, "the binding policy in force", func(ctx context.Context) (bool, error) {
		probe++
		name := fmt.Sprint("doomed-probe-", probe)
		if _, err := env.Client.CoreV1().Pods(c.ns).Create(ctx, framework.Pod(c.ns, name).SchedulerName("nobody").Obj(), metav1.CreateOptions{}); err != nil {
			return false, err
		}
		err := env.Client.CoreV1().Pods(c.ns).Bind(ctx, &corev1.Binding{ObjectMeta: metav1.ObjectMeta{Name: name},
			Target: corev1.ObjectReference{Kind: "Node", Name: c.nodes[0]}}, metav1.CreateOptions{})
		if err == nil {
			return false, errors.New("a probe was bound: the policy is not loaded yet")
		}
		return strings.Contains(err.Error(), "bindings of doomed pods are refused"), err
	})
	if err := env.Client.CoreV1().Pods(c.ns).DeleteCollection(ctx, deleteNow(), metav1.ListOptions{}); err != nil {
		t.Fatal(err)
	}

	// Watch the claim: it must go from allocated back to unallocated
	// while its pod still waits.
	c.claim("doomed", 1)
	w, err := env.Client.ResourceV1().ResourceClaims(c.ns).Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=doomed"})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	released := make(chan struct{})
	go func() {
		allocated := false
		for ev := range w.ResultChan() {
			cl, ok := ev.Object.(*resourceapi.ResourceClaim)
			if !ok {
				continue
			}
			switch {
			case cl.Status.Allocation != nil:
				allocated = true
			case allocated && len(cl.Status.ReservedFor) == 0:
				close(released)
				return
			}
		}
	}()
	c.run(adapter.Config{})
	c.create(c.pod("doomed").Claim("gpu", "doomed"))
	select {
	case <-released:
	case <-time.After(120 * time.Second):
		t.Fatal("the claim of the pod whose bind fails was not allocated and released within 120s")
	}
	framework.Eventually(t, 60*time.Second, "a FailedBinding event for the doomed pod", func(ctx context.Context) (bool, error) {
		ev, err := env.Client.CoreV1().Events(c.ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=doomed,reason=FailedBinding"})
		if err != nil {
			return false, err
		}
		return len(ev.Items) > 0, errors.New("no event yet")
	})
	if err := env.Client.CoreV1().Pods(c.ns).Delete(ctx, "doomed", deleteNow()); err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, 60*time.Second, "the doomed pod's claim released", func(ctx context.Context) (bool, error) {
		cl, err := env.Client.ResourceV1().ResourceClaims(c.ns).Get(ctx, "doomed", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		return cl.Status.Allocation == nil && len(cl.Status.ReservedFor) == 0 && len(cl.Finalizers) == 0,
			fmt.Errorf("allocation %v reservedFor %+v finalizers %v", cl.Status.Allocation != nil, cl.Status.ReservedFor, cl.Finalizers)
	})
	// A pod asking for nvidia.com/gpu, which a class maps, on the DRA-only
	// node: the claim made for it is deleted each time its bind fails,
	// and none is left once the pod is gone.
	mapped := framework.DRAGPUClass("gpu-ext-" + c.ns)
	mapped.Spec.ExtendedResourceName = ptr.To(string(framework.ResourceGPU))
	if _, err := env.Client.ResourceV1().DeviceClasses().Create(ctx, mapped, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = env.Client.ResourceV1().DeviceClasses().Delete(context.Background(), mapped.Name, metav1.DeleteOptions{})
	})
	cw, err := env.Client.ResourceV1().ResourceClaims(c.ns).Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer cw.Stop()
	extDeleted := make(chan string, 1)
	go func() {
		for ev := range cw.ResultChan() {
			cl, ok := ev.Object.(*resourceapi.ResourceClaim)
			if ok && ev.Type == watch.Deleted && cl.Annotations[resourceapi.ExtendedResourceClaimAnnotation] == "true" && cl.Status.Allocation != nil {
				extDeleted <- cl.Name
				return
			}
		}
	}()
	c.create(c.pod("doomed-ext").GPUs(1))
	select {
	case name := <-extDeleted:
		t.Logf("the claim %s made for doomed-ext was allocated, and deleted when its bind failed", name)
	case <-time.After(120 * time.Second):
		t.Fatal("no allocated extended-resource claim of the pod whose bind fails was deleted within 120s")
	}
	if err := env.Client.CoreV1().Pods(c.ns).Delete(ctx, "doomed-ext", deleteNow()); err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, 60*time.Second, "no extended-resource claim left", func(ctx context.Context) (bool, error) {
		claims, err := c.claims(ctx)
		if err != nil {
			return false, err
		}
		for name, cl := range claims {
			if cl.Annotations[resourceapi.ExtendedResourceClaimAnnotation] == "true" {
				return false, fmt.Errorf("claim %s left", name)
			}
		}
		return true, nil
	})

	// The node's one GPU was not leaked: another pod gets it.
	c.claim("next", 1)
	c.create(c.pod("next").Label("app", "next").Claim("gpu", "next"))
	c.waitBound("app=next", 1, 120*time.Second)
	if _, err := c.checkClaims(ctx); err != nil {
		t.Error(err)
	}
}
