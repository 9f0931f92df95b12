package differential

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"reflect"
	"slices"
	"strconv"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gpuplane/gpuplane/api/gpunode"
	"github.com/gpuplane/gpuplane/api/scheduling/v1alpha1"
)

// cluster is one case: nodes, the pods bound to them, and the pods
// waiting for gpuplane-scheduler, each judged on its own against the
// nodes and running pods.
type cluster struct {
	nodes   []*corev1.Node
	running []*corev1.Pod
	pending []*corev1.Pod
	// objects are the case's other objects: storage classes, CSINodes,
	// PVs and claims (Volumes); DeviceClasses, ResourceSlices and
	// ResourceClaims (DRA).
	objects []runtime.Object
}

// Names the generator draws labels, taints and requests from: small pools,
// so that selectors, tolerations and affinity terms often meet what the
// nodes carry.
const (
	labelHostname = "kubernetes.io/hostname"
	labelZone     = "topology.kubernetes.io/zone"
	labelTier     = "example.com/tier"
	labelRank     = "example.com/rank"
	labelApp      = "app"
	labelRev      = "example.com/rev"
	labelTeam     = "example.com/team"

	taintUnschedulable = "node.kubernetes.io/unschedulable"

	resourceNIC       corev1.ResourceName = "example.com/nic"
	resourceMIG       corev1.ResourceName = gpunode.MIGResourcePrefix + "1g.10gb"
	resourceHugePages corev1.ResourceName = "hugepages-2Mi"

	mib = 1 << 20
)

var (
	zones      = []string{"z1", "z2", "z3"}
	tiers      = []string{"gold", "silver"}
	taintKeys  = []string{"dedicated", "gpu", "maintenance"}
	taintVals  = []string{"", "a", "b"}
	effects    = []corev1.TaintEffect{corev1.TaintEffectNoSchedule, corev1.TaintEffectNoExecute, corev1.TaintEffectPreferNoSchedule}
	products   = []struct{ name, memMiB string }{{"NVIDIA-H100-80GB-HBM3", "81559"}, {"NVIDIA-A100-SXM4-40GB", "40960"}}
	apps       = []string{"web", "train", "db"}
	namespaces = []string{"team-a", "team-b", "team-c"}
	teams      = []string{"gold", "silver"}
)

// gen draws clusters from one seed.
type gen struct {
	r  *rand.Rand
	on map[Feature]bool
}

func newGen(seed uint64, on map[Feature]bool) *gen {
	return &gen{r: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), on: on}
}

func (g *gen) chance(p float64) bool { return g.r.Float64() < p }
func (g *gen) pick(n int) int        { return g.r.IntN(n) }

func pickOf[T any](g *gen, xs []T) T { return xs[g.r.IntN(len(xs))] }

// free is what is left of a node as running pods are bound to it.
type free struct {
	list  corev1.ResourceList // allocatable less the running pods' requests
	pods  int
	ports []corev1.ContainerPort // host ports the running pods bind
}

// cluster draws a case: 1 to 6 nodes, up to 4 pods bound to each, 1 to 4
// pending pods.
func (g *gen) cluster() *cluster {
	c := &cluster{}
	n := 1 + g.pick(6)
	left := make([]*free, n)
	for i := range n {
		node := g.node(i)
		c.nodes = append(c.nodes, node)
		left[i] = &free{list: node.Status.Allocatable.DeepCopy(), pods: int(node.Status.Allocatable.Pods().Value())}
	}
	for i, node := range c.nodes {
		for k := range g.pick(5) {
			if p := g.running(node, left[i], fmt.Sprintf("run-%d-%d", i, k)); p != nil {
				c.running = append(c.running, p)
			}
		}
	}
	for k := range 1 + g.pick(4) {
		c.pending = append(c.pending, g.pending(c, left, fmt.Sprintf("pending-%d", k)))
	}
	if g.on[Volumes] {
		g.volumes(c)
	}
	if g.on[DRA] {
		g.dra(c)
	}
	return c
}

// namespaceObjects are the namespaces pods are drawn in, the same in every
// case (kube-scheduler's informers list them once), with labels that
// namespaceSelectors select.
func namespaceObjects() []runtime.Object {
	out := make([]runtime.Object, len(namespaces))
	for i, ns := range namespaces {
		out[i] = &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, UID: types.UID("uid-" + ns),
			Labels: map[string]string{corev1.LabelMetadataName: ns, labelTeam: teams[i%len(teams)]}}}
	}
	return out
}

// node draws a node as a kubelet and GPU Feature Discovery describe it.
func (g *gen) node(i int) *corev1.Node {
	name := fmt.Sprintf("node-%d", i)
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("uid-" + name), Labels: map[string]string{
		labelHostname:          name,
		"kubernetes.io/os":     "linux",
		"kubernetes.io/arch":   "amd64",
		labelZone:              pickOf(g, zones),
		labelRank:              strconv.Itoa(1 + g.pick(5)),
		"node-role.example/ok": "true",
	}}}
	if g.chance(0.7) {
		n.Labels[labelTier] = pickOf(g, tiers)
	}
	alloc := corev1.ResourceList{
		corev1.ResourceCPU:    *resource.NewMilliQuantity(pickOf(g, []int64{1000, 2000, 3500, 4000, 16000, 128000}), resource.DecimalSI),
		corev1.ResourcePods:   *resource.NewQuantity(110, resource.DecimalSI),
		corev1.ResourceMemory: g.nodeMemory(),
	}
	if g.on[PodCount] {
		alloc[corev1.ResourcePods] = *resource.NewQuantity(int64(1+g.pick(4)), resource.DecimalSI)
	}
	if g.on[GPUs] && g.chance(0.6) {
		gpus := pickOf(g, []int{1, 2, 4, 8})
		p := pickOf(g, products)
		n.Labels[gpunode.LabelGPUProduct] = p.name
		n.Labels[gpunode.LabelGPUMemory] = p.memMiB
		n.Labels[gpunode.LabelGPUCount] = strconv.Itoa(gpus)
		count := gpus
		if g.on[TimeSlicing] && g.chance(0.4) {
			replicas := pickOf(g, []int{2, 4})
			n.Labels[gpunode.LabelGPUReplicas] = strconv.Itoa(replicas)
			count *= replicas
		}
		alloc[gpunode.ResourceGPU] = *resource.NewQuantity(int64(count), resource.DecimalSI)
		switch {
		case g.on[SharedGPUs] && g.chance(0.3):
			replicas := pickOf(g, []int{2, 4})
			n.Labels[gpunode.LabelGPUReplicas] = strconv.Itoa(replicas)
			if g.chance(0.5) {
				// A device plugin whose labeller does not say the
				// factor: the replicas per GPU are allocatable over
				// nvidia.com/gpu.count.
				delete(n.Labels, gpunode.LabelGPUReplicas)
			}
			delete(alloc, gpunode.ResourceGPU)
			alloc[gpunode.ResourceGPUShared] = *resource.NewQuantity(int64(gpus*replicas), resource.DecimalSI)
		case g.on[MIG] && g.chance(0.3):
			delete(alloc, gpunode.ResourceGPU)
			alloc[resourceMIG] = *resource.NewQuantity(int64(7*gpus), resource.DecimalSI)
		}
	}
	if g.on[EphemeralStorage] {
		alloc[corev1.ResourceEphemeralStorage] = *resource.NewQuantity(int64(10+g.pick(90))<<30, resource.BinarySI)
	}
	if g.on[HugePages] && g.chance(0.5) {
		alloc[resourceHugePages] = *resource.NewQuantity(int64(g.pick(8))*2*mib, resource.BinarySI)
	}
	if g.on[ExtendedResources] && g.chance(0.5) {
		alloc[resourceNIC] = *resource.NewQuantity(int64(g.pick(4)), resource.DecimalSI)
	}
	n.Status.Allocatable = alloc
	n.Status.Capacity = alloc.DeepCopy()
	if g.on[Taints] {
		for range g.pick(3) {
			n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: pickOf(g, taintKeys), Value: pickOf(g, taintVals), Effect: pickOf(g, effects)})
		}
		n.Spec.Taints = uniqueTaints(n.Spec.Taints)
	}
	if g.on[Unschedulable] && g.chance(0.2) {
		n.Spec.Unschedulable = true
		if g.chance(0.5) {
			n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: taintUnschedulable, Effect: corev1.TaintEffectNoSchedule})
		}
	}
	return n
}

// uniqueTaints drops a taint whose key and effect an earlier one has: the
// API server refuses such a node.
func uniqueTaints(ts []corev1.Taint) []corev1.Taint {
	var out []corev1.Taint
	seen := map[string]bool{}
	for _, t := range ts {
		k := t.Key + ":" + string(t.Effect)
		if !seen[k] {
			seen[k] = true
			out = append(out, t)
		}
	}
	return out
}

// nodeMemory is a node's allocatable memory: in Ki as kubelets report it
// (capacity less reservations), or whole Gi; with SubMiBMemory also in
// bytes.
func (g *gen) nodeMemory() resource.Quantity {
	switch {
	case g.on[SubMiBMemory] && g.chance(0.3):
		return *resource.NewQuantity(int64(1+g.pick(64))<<30-int64(g.pick(1<<20)), resource.DecimalSI)
	case g.chance(0.5):
		return *resource.NewQuantity(int64(1+g.pick(64))<<30, resource.BinarySI)
	}
	return *resource.NewQuantity((int64(1+g.pick(64))<<20-int64(g.pick(1<<16)))<<10, resource.BinarySI)
}

// running draws a pod bound to node that fits what is left of it (the
// kubelet admitted it), or nil when nothing is left of it to take.
func (g *gen) running(node *corev1.Node, left *free, name string) *corev1.Pod {
	if left.pods == 0 {
		return nil
	}
	finished := g.on[FinishedPods] && g.chance(0.15)
	want := corev1.ResourceList{}
	// Map order is random: resources are drawn in name order, so that a
	// seed always draws the same case.
	over := g.on[Overcommitted] && g.chance(0.1)
	for _, res := range slices.Sorted(maps.Keys(left.list)) {
		q := left.list[res]
		if over {
			// Room the node no longer has: its allocatable shrank
			// after the pod was bound (a kubelet restarted with larger
			// reservations, a GPU taken out of service).
			q = node.Status.Allocatable[res]
			q.Add(q)
		}
		if q.Sign() < 0 {
			q = resource.Quantity{}
		}
		if res == corev1.ResourcePods || g.chance(0.3) {
			continue
		}
		var v int64
		switch res {
		case corev1.ResourceCPU:
			v = g.r.Int64N(q.MilliValue()/2 + 1)
		case corev1.ResourceMemory:
			v = g.memoryUpTo(q.Value() / 2)
		case resourceHugePages:
			v = g.r.Int64N(q.Value()/(2*mib)+1) * 2 * mib
		case corev1.ResourceEphemeralStorage:
			v = g.r.Int64N(q.Value()/2/mib+1) * mib
		case resourceMIG:
			v = min(g.r.Int64N(q.Value()+1), 1) // one MIG device a pod
		default:
			v = g.r.Int64N(q.Value() + 1)
		}
		if v > 0 {
			want[res] = g.quantity(res, v)
		}
	}
	p := g.pod(name, want)
	if !over && !fits(podRequests(p), left.list) {
		// The overhead took it past what is left.
		p.Spec.Overhead, p.Spec.RuntimeClassName = nil, nil
	}
	p.Spec.NodeName = node.Name
	p.Spec.SchedulerName = pickOf(g, []string{corev1.DefaultSchedulerName, v1alpha1.SchedulerName})
	p.Status.Phase = corev1.PodRunning
	if finished {
		p.Status.Phase = pickOf(g, []corev1.PodPhase{corev1.PodSucceeded, corev1.PodFailed})
		return p
	}
	if g.on[HostPorts] && g.chance(0.4) {
		// The kubelet admits no pod whose host ports conflict with
		// those its node's pods bind.
		for _, cp := range g.hostPorts() {
			if !slices.ContainsFunc(left.ports, func(q corev1.ContainerPort) bool { return portsConflict(cp, q) }) {
				left.ports = append(left.ports, cp)
				p.Spec.Containers[0].Ports = append(p.Spec.Containers[0].Ports, cp)
			}
		}
	}
	if g.on[InterPodAffinity] && g.chance(0.2) {
		p.Spec.Affinity = &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{g.podTerm(p)}}}
	}
	if g.on[TerminatingPods] && g.chance(0.25) {
		// Being deleted: the kubelet stops it within its grace period,
		// and until it is gone it holds all it holds.
		p.DeletionTimestamp, p.DeletionGracePeriodSeconds = ptrTo(metav1.Unix(1_700_000_100, 0)), ptrTo(int64(30))
	}
	for res, q := range podRequests(p) {
		if l, ok := left.list[res]; ok {
			l.Sub(q)
			left.list[res] = l
		}
	}
	left.pods--
	return p
}

// fits reports whether want fits in left, resource by resource.
func fits(want, left corev1.ResourceList) bool {
	for res, q := range want {
		if l, ok := left[res]; ok && l.Cmp(q) < 0 {
			return false
		}
	}
	return true
}

// memoryUpTo draws a memory request of at most limit bytes: whole MiB, or
// with SubMiBMemory any number of bytes.
func (g *gen) memoryUpTo(limit int64) int64 {
	if limit <= 0 {
		return 0
	}
	if g.on[SubMiBMemory] && g.chance(0.5) {
		return g.r.Int64N(limit + 1)
	}
	return g.r.Int64N(limit/mib+1) * mib
}

// quantity is v of res as a pod would ask it: CPU in milli-cores, memory
// in bytes (printed in the largest binary unit that is exact, or as a
// decimal quantity when SubMiBMemory draws one), the rest as counts.
func (g *gen) quantity(res corev1.ResourceName, v int64) resource.Quantity {
	switch res {
	case corev1.ResourceCPU:
		return *resource.NewMilliQuantity(v, resource.DecimalSI)
	case corev1.ResourceMemory, corev1.ResourceEphemeralStorage, resourceHugePages:
		if v%mib != 0 {
			return *resource.NewQuantity(v, resource.DecimalSI)
		}
		return *resource.NewQuantity(v, resource.BinarySI)
	}
	return *resource.NewQuantity(v, resource.DecimalSI)
}

// pod makes a pod whose requests, as the kubelet and both schedulers sum
// them, are want, spread over its containers in one of the shapes pods
// take: one container; two; an init container that asks for as much as
// the pod; a sidecar (an init container that keeps running) plus a
// container. Extended resources go to the first container, with limits
// equal to their requests, as the API server requires.
func (g *gen) pod(name string, want corev1.ResourceList) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: pickOf(g, namespaces), Name: name, UID: types.UID("uid-" + name),
		CreationTimestamp: metav1.Unix(1_700_000_000, 0), Labels: map[string]string{labelApp: pickOf(g, apps)}}}
	if (g.on[InterPodAffinity] || g.on[TopologySpread]) && g.chance(0.5) {
		// A second label, for matchLabelKeys and mismatchLabelKeys.
		p.Labels[labelRev] = pickOf(g, []string{"1", "2"})
	}
	main := corev1.Container{Name: "main", Image: "registry.k8s.io/pause:3.10", Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{}}}
	var second *corev1.Container
	var init *corev1.Container
	shape := g.pick(4)
	if g.on[PodLevelResources] && g.chance(0.2) {
		shape = 4
	}
	if shape > 0 {
		second = &corev1.Container{Name: "second", Image: main.Image, Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{}}}
	}
	for _, res := range slices.Sorted(maps.Keys(want)) {
		q := want[res]
		if res != corev1.ResourceCPU && res != corev1.ResourceMemory {
			main.Resources.Requests[res] = q
			if isExtended(res) || res == resourceHugePages {
				if main.Resources.Limits == nil {
					main.Resources.Limits = corev1.ResourceList{}
				}
				main.Resources.Limits[res] = q
			}
			continue
		}
		switch shape {
		case 0: // one container
			main.Resources.Requests[res] = q
		case 1, 3: // two containers, or a sidecar and a container: the sum
			a, b := g.split(res, q)
			main.Resources.Requests[res], second.Resources.Requests[res] = a, b
		case 2: // an init container: the larger of it and the containers
			a, _ := g.split(res, q)
			main.Resources.Requests[res], second.Resources.Requests[res] = a, q
		case 4: // pod-level resources, above what the container asks
			a, _ := g.split(res, q)
			main.Resources.Requests[res] = a
			if p.Spec.Resources == nil {
				p.Spec.Resources = &corev1.ResourceRequirements{Requests: corev1.ResourceList{}}
			}
			p.Spec.Resources.Requests[res] = q
		}
	}
	p.Spec.Containers = []corev1.Container{main}
	switch shape {
	case 1:
		p.Spec.Containers = append(p.Spec.Containers, *second)
	case 2:
		init = second
		init.Name = "init"
		p.Spec.InitContainers = []corev1.Container{*init}
	case 3:
		always := corev1.ContainerRestartPolicyAlways
		second.Name, second.RestartPolicy = "sidecar", &always
		p.Spec.InitContainers = []corev1.Container{*second}
	}
	if g.on[Overhead] && g.chance(0.3) {
		p.Spec.RuntimeClassName = ptrTo("kata")
		p.Spec.Overhead = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("250m"), corev1.ResourceMemory: resource.MustParse("120Mi")}
	}
	return p
}

// split divides q in two parts that sum to q.
func (g *gen) split(res corev1.ResourceName, q resource.Quantity) (resource.Quantity, resource.Quantity) {
	if res == corev1.ResourceCPU {
		v := q.MilliValue()
		a := g.r.Int64N(v + 1)
		return *resource.NewMilliQuantity(a, resource.DecimalSI), *resource.NewMilliQuantity(v-a, resource.DecimalSI)
	}
	v := q.Value()
	a := g.r.Int64N(v/mib+1) * mib
	if a > v {
		a = v
	}
	return g.quantity(res, a), g.quantity(res, v-a)
}

func isExtended(res corev1.ResourceName) bool {
	return res != corev1.ResourceCPU && res != corev1.ResourceMemory && res != corev1.ResourceEphemeralStorage && res != corev1.ResourcePods && res != resourceHugePages
}

func ptrTo[T any](v T) *T { return &v }

// A seed draws the same case every time, with every feature on: the seed a
// failure prints reproduces it.
func TestGeneratorIsDeterministic(t *testing.T) {
	all := map[Feature]bool{}
	for _, f := range allFeatures {
		all[f] = true
	}
	for s := range uint64(50) {
		a, b := newGen(s, all).cluster(), newGen(s, all).cluster()
		if !reflect.DeepEqual(a, b) {
			t.Fatalf("seed %d drew two different cases", s)
		}
	}
}

// hostPorts draws one or two host ports of a container: few numbers, TCP
// or UDP, on every address or on one of two, so that ports conflict by
// number, protocol and address alike.
func (g *gen) hostPorts() []corev1.ContainerPort {
	var out []corev1.ContainerPort
	for range 1 + g.pick(2) {
		cp := corev1.ContainerPort{HostPort: pickOf(g, []int32{80, 443, 8080}), Protocol: corev1.ProtocolTCP}
		if g.chance(0.3) {
			cp.Protocol = corev1.ProtocolUDP
		}
		if g.chance(0.4) {
			cp.HostIP = pickOf(g, []string{"10.0.0.1", "10.0.0.2"})
		}
		cp.ContainerPort = cp.HostPort
		// The API server refuses a pod binding one protocol, address and
		// port twice.
		if !slices.ContainsFunc(out, func(q corev1.ContainerPort) bool {
			return q.HostPort == cp.HostPort && q.Protocol == cp.Protocol && q.HostIP == cp.HostIP
		}) {
			out = append(out, cp)
		}
	}
	return out
}

// portsConflict reports whether two host ports cannot both be bound on one
// node: same number and protocol, on every address or the same one.
func portsConflict(a, b corev1.ContainerPort) bool {
	return a.HostPort == b.HostPort && a.Protocol == b.Protocol && (a.HostIP == "" || b.HostIP == "" || a.HostIP == b.HostIP)
}
