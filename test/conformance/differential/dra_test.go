package differential

import (
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/gpuplane/gpuplane/api/dra"
	"github.com/gpuplane/gpuplane/api/gpunode"
)

// DeviceClasses the generator draws (DRA): every GPU of gpuplane's
// driver, and its H100s alone.
const (
	classGPU  = "gpu.gpuplane.io"
	classH100 = "h100.gpu.gpuplane.io"
)

// draGen draws the DRA objects of one case: classes, a ResourceSlice per
// node that publishes GPUs through DRA (a node with no nvidia.com/gpu of
// its own), claims allocated to running pods as the DRA plugin and the
// kubelet leave them, and claims of pending pods.
type draGen struct {
	g *gen
	c *cluster
	// free is, by node, the devices no allocated claim holds.
	free   map[string][]string
	claims []*resourceapi.ResourceClaim
}

// dra adds DRA objects to c, and claims to its pods.
func (g *gen) dra(c *cluster) {
	d := &draGen{g: g, c: c, free: map[string][]string{}}
	for _, dc := range []*resourceapi.DeviceClass{
		{ObjectMeta: metav1.ObjectMeta{Name: classGPU}, Spec: resourceapi.DeviceClassSpec{Selectors: []resourceapi.DeviceSelector{
			{CEL: &resourceapi.CELDeviceSelector{Expression: fmt.Sprintf("device.driver == %q", dra.DriverName)}}}}},
		{ObjectMeta: metav1.ObjectMeta{Name: classH100}, Spec: resourceapi.DeviceClassSpec{Selectors: []resourceapi.DeviceSelector{
			{CEL: &resourceapi.CELDeviceSelector{Expression: fmt.Sprintf("device.driver == %q", dra.DriverName)}},
			{CEL: &resourceapi.CELDeviceSelector{Expression: fmt.Sprintf("device.attributes[%q].productName == %q", dra.DriverName, products[0].name)}}}}},
	} {
		if g.chance(0.9) {
			dc.TypeMeta = metav1.TypeMeta{APIVersion: "resource.k8s.io/v1", Kind: "DeviceClass"}
			dc.UID = types.UID("uid-class-" + dc.Name)
			c.objects = append(c.objects, dc)
		}
	}
	for _, n := range c.nodes {
		// A node's agent publishes its GPUs one way: through DRA, or
		// as extended resources with GPU Feature Discovery's labels.
		if _, gfd := n.Labels[gpunode.LabelGPUCount]; gfd || !g.chance(0.5) {
			continue
		}
		c.objects = append(c.objects, d.slice(n))
	}
	for _, p := range c.running {
		if p.Status.Phase == corev1.PodRunning && len(d.free[p.Spec.NodeName]) > 0 && g.chance(0.5) {
			d.allocated(p)
		}
	}
	for _, n := range c.nodes {
		if len(d.free[n.Name]) > 0 && g.chance(0.15) {
			// Allocated, and reserved for no pod: it holds its devices
			// all the same.
			d.allocate(n.Name, pickOf(g, namespaces), "held-"+n.Name, 1+g.pick(len(d.free[n.Name])))
		}
	}
	for _, p := range c.pending {
		if g.chance(0.5) {
			d.pendingClaim(p)
		}
	}
	for _, cl := range d.claims {
		c.objects = append(c.objects, cl)
	}
}

// slice is the ResourceSlice gpuplane's driver publishes for node n: 1 to
// 8 GPUs of one product.
func (d *draGen) slice(n *corev1.Node) *resourceapi.ResourceSlice {
	g := d.g
	p := pickOf(g, products)
	s := &resourceapi.ResourceSlice{TypeMeta: metav1.TypeMeta{APIVersion: "resource.k8s.io/v1", Kind: "ResourceSlice"},
		ObjectMeta: metav1.ObjectMeta{Name: n.Name + "-gpus", UID: types.UID("uid-slice-" + n.Name)},
		Spec: resourceapi.ResourceSliceSpec{Driver: dra.DriverName, NodeName: ptr.To(n.Name),
			Pool: resourceapi.ResourcePool{Name: n.Name, Generation: 1, ResourceSliceCount: 1}}}
	mem := "80Gi"
	if p.name != products[0].name {
		mem = "40Gi"
	}
	for i := range 1 + g.pick(8) {
		name := fmt.Sprint("gpu-", i)
		s.Spec.Devices = append(s.Spec.Devices, resourceapi.Device{Name: name,
			Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
				dra.AttrType:        {StringValue: ptr.To(dra.TypeGPU)},
				dra.AttrIndex:       {IntValue: ptr.To(int64(i))},
				dra.AttrProductName: {StringValue: ptr.To(p.name)},
				dra.AttrUUID:        {StringValue: ptr.To(fmt.Sprintf("GPU-%s-%d", n.Name, i))},
			},
			Capacity: map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{dra.CapacityMemory: {Value: resource.MustParse(mem)}},
		})
		d.free[n.Name] = append(d.free[n.Name], name)
	}
	return s
}

// claim makes an unallocated claim of one request named "gpu".
func (d *draGen) claim(ns, name string, req resourceapi.DeviceRequest) *resourceapi.ResourceClaim {
	cl := &resourceapi.ResourceClaim{TypeMeta: metav1.TypeMeta{APIVersion: "resource.k8s.io/v1", Kind: "ResourceClaim"},
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID("uid-claim-" + ns + "-" + name)},
		Spec:       resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{req}}}}
	d.claims = append(d.claims, cl)
	return cl
}

// allocate makes a claim of count whole GPUs of the gpu class allocated on
// node, taking the lowest free devices, as the DRA plugin writes it.
func (d *draGen) allocate(node, ns, name string, count int) *resourceapi.ResourceClaim {
	cl := d.claim(ns, name, resourceapi.DeviceRequest{Name: "gpu", Exactly: &resourceapi.ExactDeviceRequest{
		DeviceClassName: classGPU, AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: int64(count)}})
	alloc := &resourceapi.AllocationResult{NodeSelector: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
		MatchFields: []corev1.NodeSelectorRequirement{{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{node}}}}}}}
	for _, dev := range d.free[node][:count] {
		alloc.Devices.Results = append(alloc.Devices.Results, resourceapi.DeviceRequestAllocationResult{
			Request: "gpu", Driver: dra.DriverName, Pool: node, Device: dev})
	}
	d.free[node] = d.free[node][count:]
	cl.Status.Allocation = alloc
	return cl
}

// use makes pod p name claim cl in its first container.
func use(p *corev1.Pod, cl string) {
	name := fmt.Sprint("claim-", len(p.Spec.ResourceClaims))
	p.Spec.ResourceClaims = append(p.Spec.ResourceClaims, corev1.PodResourceClaim{Name: name, ResourceClaimName: ptr.To(cl)})
	p.Spec.Containers[0].Resources.Claims = append(p.Spec.Containers[0].Resources.Claims, corev1.ResourceClaim{Name: name})
}

// allocated gives running pod p a claim allocated on its node and
// reserved for it.
func (d *draGen) allocated(p *corev1.Pod) {
	free := d.free[p.Spec.NodeName]
	cl := d.allocate(p.Spec.NodeName, p.Namespace, "claim-"+p.Name, 1+d.g.pick(len(free)))
	cl.Status.ReservedFor = []resourceapi.ResourceClaimConsumerReference{{Resource: "pods", Name: p.Name, UID: p.UID}}
	use(p, cl.Name)
}

// pendingClaim gives pending pod p a claim: one of its own (an exact
// count, every matching GPU of a node, or the first of alternatives that
// fits, with selectors on product and memory), one a running pod holds
// already, or one that is missing.
func (d *draGen) pendingClaim(p *corev1.Pod) {
	g := d.g
	class := func() string { return pickOf(g, []string{classGPU, classGPU, classH100, "absent-class"}) }
	selectors := func() []resourceapi.DeviceSelector {
		var out []resourceapi.DeviceSelector
		switch g.pick(4) {
		case 0:
			out = append(out, resourceapi.DeviceSelector{CEL: &resourceapi.CELDeviceSelector{
				Expression: fmt.Sprintf("device.attributes[%q].productName == %q", dra.DriverName, pickOf(g, products).name)}})
		case 1:
			out = append(out, resourceapi.DeviceSelector{CEL: &resourceapi.CELDeviceSelector{
				Expression: fmt.Sprintf("device.capacity[%q].memory.compareTo(quantity(%q)) >= 0", dra.DriverName, pickOf(g, []string{"40Gi", "64Gi"}))}})
		}
		return out
	}
	name := p.Name + "-gpu"
	switch g.pick(6) {
	case 0, 1:
		d.claim(p.Namespace, name, resourceapi.DeviceRequest{Name: "gpu", Exactly: &resourceapi.ExactDeviceRequest{
			DeviceClassName: class(), AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: int64(1 + g.pick(4)), Selectors: selectors()}})
	case 2:
		d.claim(p.Namespace, name, resourceapi.DeviceRequest{Name: "gpu", Exactly: &resourceapi.ExactDeviceRequest{
			DeviceClassName: class(), AllocationMode: resourceapi.DeviceAllocationModeAll, Selectors: selectors()}})
	case 3:
		var subs []resourceapi.DeviceSubRequest
		for k := range 1 + g.pick(3) {
			subs = append(subs, resourceapi.DeviceSubRequest{Name: fmt.Sprint("alt-", k), DeviceClassName: class(),
				AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: int64(1 + g.pick(4)), Selectors: selectors()})
		}
		d.claim(p.Namespace, name, resourceapi.DeviceRequest{Name: "gpu", FirstAvailable: subs})
	case 4:
		// A claim a running pod of the namespace holds: the pod shares
		// its devices, on their node.
		i := slices.IndexFunc(d.claims, func(cl *resourceapi.ResourceClaim) bool {
			return cl.Namespace == p.Namespace && len(cl.Status.ReservedFor) > 0
		})
		if i < 0 {
			return
		}
		name = d.claims[i].Name
	}
	// case 5: the claim is missing.
	use(p, name)
}
