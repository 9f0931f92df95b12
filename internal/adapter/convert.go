package adapter

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	resourcehelper "k8s.io/component-helpers/resource"

	"github.com/gpuplane/gpuplane/api/gpunode"
	"github.com/gpuplane/gpuplane/api/gpupod"
	"github.com/gpuplane/gpuplane/internal/gpu"
	"github.com/gpuplane/gpuplane/internal/scheduler/model"
)

// Resource and label names the adapter reads; api/gpunode defines them.
const (
	ResourceGPU       corev1.ResourceName = gpunode.ResourceGPU
	ResourceGPUShared corev1.ResourceName = gpunode.ResourceGPUShared
	migResourcePrefix                     = gpunode.MIGResourcePrefix

	LabelGPUProduct  = gpunode.LabelGPUProduct
	LabelGPUMemory   = gpunode.LabelGPUMemory
	LabelGPUCount    = gpunode.LabelGPUCount
	LabelGPUReplicas = gpunode.LabelGPUReplicas

	// GPUsAnnotation records on a bound pod which GPUs the scheduler gave
	// it (api/gpupod).
	GPUsAnnotation = gpupod.GPUsAnnotation
	// HeldAnnotation is the node's record of the GPUs a pod holds; where
	// it differs from GPUsAnnotation, the scheduler's books follow it.
	HeldAnnotation = gpupod.HeldAnnotation
)

// Bounds on a node's CPU and memory: far above any machine, low enough
// that milli-CPU and MiB never overflow the core's int64 sums.
var (
	maxNodeCPU    = resource.MustParse("1Mi") // cores
	maxNodeMemory = resource.MustParse("1Pi") // bytes
)

// convertNode builds the core's view of a node: CPU and memory from
// allocatable, one model.GPU per physical GPU (nvidia.com/gpu, its shared
// replicas folded back into GPUs, plus GPUs in MIG mode), the model and
// memory from the feature labels and the topology from the agent's
// annotation. Every value is read with api/gpunode's bounds: a node that
// states an impossible capacity (more GPUs than a node holds, a negative or
// overflowing quantity, an unreadable label) is refused with an error that
// names the field, and the caller leaves it out of scheduling. An
// unreadable topology only ranks placements, so it is dropped with a
// warning and the node stays usable.
func convertNode(n *corev1.Node) (model.Node, string, error) {
	alloc := n.Status.Allocatable
	cpu, mem := alloc.Cpu(), alloc.Memory()
	if cpu.Sign() < 0 || cpu.Cmp(maxNodeCPU) > 0 {
		return model.Node{}, "", fmt.Errorf("status.allocatable.cpu: must be 0 to %s, got %s", maxNodeCPU.String(), cpu.String())
	}
	if mem.Sign() < 0 || mem.Cmp(maxNodeMemory) > 0 {
		return model.Node{}, "", fmt.Errorf("status.allocatable.memory: must be 0 to %s, got %s", maxNodeMemory.String(), mem.String())
	}
	out := model.Node{
		Name:          n.Name,
		MilliCPU:      cpu.MilliValue(),
		MemoryMiB:     mem.Value() >> 20,
		Unschedulable: n.Spec.Unschedulable,
	}
	var err error
	if out.Allocatable, err = nodeAllocatable(alloc); err != nil {
		return model.Node{}, "", err
	}
	devs, err := nodeDevices(n)
	if err != nil {
		return model.Node{}, "", err
	}
	whole, plain, shared, replicas, withdrawn, warning := devs.whole, devs.plain, devs.shared, devs.replicas, devs.withdrawn, devs.warning
	var topo *gpunode.Topology
	if s, ok := n.Annotations[gpunode.TopologyAnnotation]; ok {
		if topo, err = gpunode.ParseTopology(s); err != nil {
			topo, warning = nil, "annotation "+err.Error()+"; placing without NVLink topology"
		}
	}
	// Which GPUs are in MIG mode: the agent's layout in the topology when
	// it agrees with the node's whole GPUs; else the GPUs the topology or
	// the nvidia.com/gpu.count label has beyond the whole ones, last.
	var layout [][]int
	migGPUs := 0
	if hasMIG(alloc) {
		switch {
		case topo != nil && len(topo.MIG) > 0 && topo.GPUs-migCount(topo.MIG) == whole:
			layout, migGPUs = topo.MIG, migCount(topo.MIG)
		case topo != nil && topo.GPUs > whole:
			migGPUs = topo.GPUs - whole
		default:
			c, err := gpunode.ParseGPUCount(n.Labels[LabelGPUCount])
			if err != nil {
				return model.Node{}, "", fmt.Errorf("label %w (a node with MIG devices says how many GPUs it has there)", err)
			}
			migGPUs = max(c-whole, 0)
		}
	}
	if whole+migGPUs > gpunode.MaxGPUs {
		return model.Node{}, "", fmt.Errorf("status.allocatable: %d GPUs is more than the %d one node can hold", whole+migGPUs, gpunode.MaxGPUs)
	}
	product := n.Labels[LabelGPUProduct]
	var gpuMem int64
	if s, ok := n.Labels[LabelGPUMemory]; ok {
		if gpuMem, err = gpunode.ParseGPUMemoryMiB(s); err != nil {
			return model.Node{}, "", fmt.Errorf("label %w", err)
		}
	}
	if topo != nil && topo.GPUs != whole+migGPUs {
		warning = fmt.Sprintf("annotation %s describes %d GPUs but the node has %d; placing without NVLink topology", gpunode.TopologyAnnotation, topo.GPUs, whole+migGPUs)
		topo = nil
	}
	// What each GPU gives pods is its memory less what the driver keeps.
	var reserved []int64
	if topo != nil && gpuMem > 0 {
		reserved = topo.ReservedMiB
		for i, r := range reserved {
			if r >= gpuMem {
				warning = fmt.Sprintf("annotation %s: reservedMiB[%d] is %d MiB, not less than the GPU's %d MiB (label %s); placing as if the driver reserved none", gpunode.TopologyAnnotation, i, r, gpuMem, LabelGPUMemory)
				reserved = nil
				break
			}
		}
	}
	// How the node offers its GPUs: only as shares when it names its
	// replicas nvidia.com/gpu.shared and has no plain nvidia.com/gpu; only
	// whole when it shares none; both when it has both (per-GPU sharing:
	// which GPU is which is not on the Node) or keeps the name
	// nvidia.com/gpu for its replicas. Shares go only to a GPU shared under
	// the resource the pod asks through.
	sharesOnly, wholeOnly := shared > 0 && plain == 0, shared == 0 && replicas <= 1
	shareResource := ""
	switch {
	case shared > 0:
		shareResource = string(ResourceGPUShared)
	case replicas > 1:
		shareResource = string(ResourceGPU)
	}
	for i := 0; i < whole+migGPUs; i++ {
		g := model.GPU{Index: i, Model: product, MemoryMiB: gpuMem, NUMANode: -1, SharesOnly: sharesOnly, WholeOnly: wholeOnly, ShareResource: shareResource}
		if shareResource != "" {
			// One replica per share: the node's unit, in which a pod's
			// replicas are counted (model.GPU.InReplicas).
			g.MinShareMilli = model.MilliPerGPU / int64(replicas)
		}
		switch {
		case layout != nil:
			if i < len(layout) && len(layout[i]) > 0 {
				g = migGPU(g, layout[i])
			}
		case i >= whole:
			g = migGPU(g, nil)
		}
		if i < len(reserved) {
			g.MemoryMiB -= reserved[i]
		}
		g.Withdrawn = withdrawn[i]
		if topo != nil && i < len(topo.NUMA) {
			g.NUMANode = topo.NUMA[i]
		}
		out.GPUs = append(out.GPUs, g)
	}
	if topo != nil {
		out.Topology = topologyOf(topo)
	}
	if m, w := nodeMIG(n, out.GPUs); m != nil || w != "" {
		out.MIG = m
		if w != "" {
			warning = w
		}
	}
	return out, warning, nil
}

// gpuDevices is what a node's device-plugin resources say of its GPUs
// outside MIG mode.
type gpuDevices struct {
	// whole is the number of GPUs outside MIG mode: those of the plain
	// nvidia.com/gpu (less their replicas) and those that give the
	// nvidia.com/gpu.shared replicas; plain and shared are the two
	// resources' counts.
	whole, plain, shared int
	// replicas is the sharing factor: how many replicas each shared GPU
	// gives (1: none shared, or each replica counted as a GPU).
	replicas int
	// withdrawn are the GPUs the node's quarantine has out of service.
	withdrawn map[int]bool
	warning   string
}

// nodeDevices reads a node's GPUs from its allocatable and labels. The
// sharing factor is the nvidia.com/gpu.replicas label's; a node that
// advertises nvidia.com/gpu.shared without it shares each of the GPUs
// nvidia.com/gpu.count has beyond its whole ones alike, so the factor is
// its replicas over those GPUs when they divide evenly. Else each replica
// is counted as a GPU of its own, which takes every pod asking for one
// replica that the node's allocatable admits.
func nodeDevices(n *corev1.Node) (gpuDevices, error) {
	alloc := n.Status.Allocatable
	replicas, labelled := 1, false
	if s, ok := n.Labels[LabelGPUReplicas]; ok {
		r, err := gpunode.ParseReplicas(s)
		if err != nil {
			return gpuDevices{}, fmt.Errorf("label %w", err)
		}
		replicas, labelled = r, true
	}
	// Replicas are counted against MaxGPUs x MaxReplicas before dividing,
	// so a huge quantity never becomes a huge number of GPUs.
	maxDevices := int64(gpunode.MaxGPUs * gpunode.MaxReplicas)
	whole, err := deviceCount(alloc, ResourceGPU, maxDevices)
	if err != nil {
		return gpuDevices{}, err
	}
	shared, err := deviceCount(alloc, ResourceGPUShared, maxDevices)
	if err != nil {
		return gpuDevices{}, err
	}
	// GPUs the node's quarantine withdrew (gpuplane.io/gpu-quarantine) have
	// left allocatable but not capacity: the node is sized from capacity
	// then, so that every GPU keeps its index, and those GPUs serve nothing.
	withdrawn, warning := quarantinedGPUs(n)
	if len(withdrawn) > 0 {
		if whole, err = deviceCount(n.Status.Capacity, ResourceGPU, maxDevices); err != nil {
			return gpuDevices{}, errors.New(strings.Replace(err.Error(), "allocatable", "capacity", 1))
		}
		if shared, err = deviceCount(n.Status.Capacity, ResourceGPUShared, maxDevices); err != nil {
			return gpuDevices{}, errors.New(strings.Replace(err.Error(), "allocatable", "capacity", 1))
		}
	}
	if shared > 0 && !labelled && !hasMIG(alloc) {
		var w string
		replicas, w = derivedReplicas(n, whole, shared)
		if w != "" {
			warning = w
		}
	}
	plain := whole
	switch {
	case shared > 0:
		whole += shared / replicas
	case replicas > 1:
		// Replicas offered under nvidia.com/gpu itself (sharing without
		// renaming): the node has whole/replicas physical GPUs.
		whole /= replicas
	}
	return gpuDevices{whole: whole, plain: plain, shared: shared, replicas: replicas, withdrawn: withdrawn, warning: warning}, nil
}

// derivedReplicas is the sharing factor of a node with shared replicas of
// nvidia.com/gpu.shared and plain whole GPUs of nvidia.com/gpu and no
// nvidia.com/gpu.replicas label: shared over the GPUs nvidia.com/gpu.count
// has beyond the plain ones, when that divides evenly into 1 to
// gpunode.MaxReplicas; else 1, with a warning when the label is there
// but does not fit.
func derivedReplicas(n *corev1.Node, plain, shared int) (int, string) {
	s, ok := n.Labels[LabelGPUCount]
	if !ok {
		return 1, ""
	}
	count, err := gpunode.ParseGPUCount(s)
	if err != nil {
		return 1, "label " + err.Error() + "; counting each replica of " + string(ResourceGPUShared) + " as a GPU"
	}
	if gpus := count - plain; gpus > 0 && shared%gpus == 0 && shared/gpus <= gpunode.MaxReplicas {
		return shared / gpus, ""
	}
	return 1, fmt.Sprintf("label %s: %d GPUs besides the %d whole ones do not share the %d replicas of %s evenly; counting each replica as a GPU",
		LabelGPUCount, count, plain, shared, ResourceGPUShared)
}

// quarantinedGPUs reads the GPU indexes n's agent has out of service from
// its quarantine record (every state but returned). A record that does not
// parse is reported and read as none: the node is then placed by its
// allocatable alone.
func quarantinedGPUs(n *corev1.Node) (map[int]bool, string) {
	s, ok := n.Annotations[gpunode.QuarantineAnnotation]
	if !ok {
		return nil, ""
	}
	rec, err := gpunode.ParseQuarantine(s)
	if err != nil {
		return nil, "annotation " + err.Error() + "; placing by allocatable without knowing which GPUs are out of service"
	}
	var out map[int]bool
	for _, g := range rec.GPUs {
		if g.State == gpunode.QuarantineReturned {
			continue
		}
		if out == nil {
			out = map[int]bool{}
		}
		out[g.Index] = true
	}
	return out, ""
}

// migCount is how many GPUs a MIG layout puts in MIG mode.
func migCount(layout [][]int) int {
	n := 0
	for _, inst := range layout {
		if len(inst) > 0 {
			n++
		}
	}
	return n
}

// migGPU makes g a GPU in MIG mode with the given instances (slices each);
// without instances it may be split any way (7 slices).
func migGPU(g model.GPU, instances []int) model.GPU {
	g.SharesOnly, g.WholeOnly, g.ShareResource, g.MinShareMilli = false, false, "", 0
	if len(instances) == 0 {
		g.MIGSlices = 7
		return g
	}
	g.MIGInstanceSlices = instances[0]
	for _, n := range instances {
		g.MIGSlices += n
		if n != instances[0] {
			// Instances of several sizes on one GPU: which are free is
			// not known from counts of slices; place by slices.
			g.MIGInstanceSlices = 0
		}
	}
	return g
}

// deviceCount reads an extended resource's count from a node's
// allocatable: a whole number from 0 to limit.
func deviceCount(rl corev1.ResourceList, name corev1.ResourceName, limit int64) (int, error) {
	q, ok := rl[name]
	if !ok {
		return 0, nil
	}
	v, exact := q.AsInt64()
	if !exact || v < 0 || v > limit {
		return 0, fmt.Errorf("status.allocatable[%s]: must be a whole number from 0 to %d, got %s", name, limit, q.String())
	}
	return int(v), nil
}

// topologyOf turns the annotation's NVLink islands into pairwise links:
// NVLink inside an island, PCIe within a NUMA node or across the system
// otherwise.
func topologyOf(t *gpunode.Topology) *gpu.Topology {
	tp := gpu.NewTopology(t.GPUs)
	island := make([]int, t.GPUs)
	links := make([]int, t.GPUs)
	for i := range island {
		island[i] = -1
	}
	for k, g := range t.Groups {
		for _, i := range g.GPUs {
			island[i], links[i] = k, g.NVLinks
		}
	}
	numa := func(i int) int {
		if i < len(t.NUMA) {
			return t.NUMA[i]
		}
		return -1
	}
	for i := 0; i < t.GPUs; i++ {
		for j := i + 1; j < t.GPUs; j++ {
			l := gpu.Link{PCIe: gpu.PCIeSystem}
			if numa(i) >= 0 && numa(i) == numa(j) {
				l.PCIe = gpu.PCIeNode
			}
			if island[i] >= 0 && island[i] == island[j] {
				l.NVLinks = links[i]
			}
			tp.Set(i, j, l)
		}
	}
	return tp
}

func hasMIG(rl corev1.ResourceList) bool {
	for name, q := range rl {
		if strings.HasPrefix(string(name), migResourcePrefix) && !q.IsZero() {
			return true
		}
	}
	return false
}

func quantityInt(rl corev1.ResourceList, name corev1.ResourceName) int64 {
	q, ok := rl[name]
	if !ok {
		return 0
	}
	return q.Value()
}

// BadInputError is a pod, PodGroup or Queue the scheduler cannot act on;
// Reason is a CamelCase condition reason and the message says what to
// change.
type BadInputError struct {
	Reason string
	Msg    string
}

func (e *BadInputError) Error() string { return e.Msg }

func badInput(reason, format string, args ...any) *BadInputError {
	return &BadInputError{Reason: reason, Msg: fmt.Sprintf(format, args...)}
}

// checkContainers refuses, naming the container, extended resources whose
// request and limit differ and GPUs asked for in fractions: what a pod's
// containers must satisfy before their sum means anything.
func checkContainers(p *corev1.Pod) *BadInputError {
	for _, cs := range [][]corev1.Container{p.Spec.InitContainers, p.Spec.Containers} {
		for i := range cs {
			c := &cs[i]
			for name, lim := range c.Resources.Limits {
				if !isExtended(name) {
					continue
				}
				if req, ok := c.Resources.Requests[name]; ok && req.Cmp(lim) != 0 {
					return badInput("RequestsNotLimits",
						"container %q asks for %s request %s but limit %s: extended resources must have equal requests and limits (set both to the same whole number)",
						c.Name, name, req.String(), lim.String())
				}
			}
			for name, req := range c.Resources.Requests {
				if isExtended(name) && req.MilliValue()%1000 != 0 {
					return badInput("FractionalGPU",
						"container %q asks for %s of %s: GPUs are counted whole; ask for a whole number, or for nvidia.com/gpu.shared or a nvidia.com/mig-<profile> to share one",
						c.Name, req.String(), name)
				}
			}
		}
	}
	return nil
}

// podRequest builds the core's request of a pod from its containers'
// requests (init containers and pod overhead included, as the kubelet
// counts them). A request for nvidia.com/gpu.shared is a Request.Replicas,
// whose share each GPU shared under that name sets; replicas is the least
// sharing factor of nvidia.com/gpu.shared on the cluster's nodes (1 when
// unknown), which sizes the share quotas count before a GPU is chosen.
func podRequest(p *corev1.Pod, replicas int) (model.Request, error) {
	if err := checkContainers(p); err != nil {
		return model.Request{}, err
	}
	reqs := resourcehelper.PodRequests(p, resourcehelper.PodResourcesOptions{})
	if err := podRequestBounds(reqs); err != nil {
		return model.Request{}, err
	}
	out := model.Request{
		MilliCPU:  reqs.Cpu().MilliValue(),
		MemoryMiB: (reqs.Memory().Value() + 1<<20 - 1) >> 20,
		GPUs:      int(quantityInt(reqs, ResourceGPU)),
		// The pod's other tolerations reach the core through its
		// predicate class (classes.go).
		Tolerations: cordonTolerations(p),
	}
	if out.GPUs > 0 {
		// In the node's unit: replicas on GPUs time-sliced under this
		// very name, whole GPUs elsewhere (model.GPU.InReplicas).
		out.Replicas, out.ShareResource = out.GPUs, string(ResourceGPU)
	}
	var bad *BadInputError
	if out.Scalars, bad = podScalars(reqs); bad != nil {
		return model.Request{}, bad
	}
	if out.HostPorts, bad = podHostPorts(p); bad != nil {
		return model.Request{}, bad
	}
	if n := quantityInt(reqs, ResourceGPUShared); n > 0 {
		if out.GPUs > 0 {
			return model.Request{}, badInput("MixedGPURequest", "the pod asks for both %s and %s: ask for one of them", ResourceGPU, ResourceGPUShared)
		}
		if replicas < 1 {
			replicas = 1
		}
		// n replicas, in the node's unit, of whichever GPU shared under
		// this name the core picks (model.GPU.InReplicas): the share is
		// that GPU's; the estimate, the largest on any node and at most
		// a GPU, is what quotas count until then.
		out.GPUMilli = min(max(n*model.MilliPerGPU/int64(replicas), 1), model.MilliPerGPU)
		out.Replicas, out.ShareResource = int(n), string(ResourceGPUShared)
	}
	for name, q := range reqs {
		prof, ok := strings.CutPrefix(string(name), migResourcePrefix)
		if !ok || q.IsZero() {
			continue
		}
		if out.GPUs > 0 || out.GPUMilli > 0 || out.MIGSlices > 0 || q.Value() != 1 {
			return model.Request{}, badInput("MixedGPURequest", "the pod asks for %s %s besides other GPUs: gpuplane places one MIG instance per pod; split the pod or ask for whole GPUs", q.String(), name)
		}
		slices, err := strconv.Atoi(strings.SplitN(prof, "g", 2)[0])
		if err != nil || slices < 1 || slices > 7 {
			return model.Request{}, badInput("UnknownMIGProfile", "resource %s does not name a MIG profile like nvidia.com/mig-3g.40gb", name)
		}
		out.MIGSlices, out.MIGProfile = slices, prof
	}
	if out.GPUMilli > 0 {
		out.ShareResource = string(ResourceGPUShared)
	}
	frac, asked, err := gpupod.ReadFraction(p.Annotations, reqs)
	if err != nil {
		return model.Request{}, badInput("FractionOutOfRange", "%v", err)
	}
	if !asked {
		return out, nil
	}
	plain, shared := quantityInt(reqs, ResourceGPU), quantityInt(reqs, ResourceGPUShared)
	switch {
	case out.MIGSlices > 0:
		return model.Request{}, badInput("MixedGPURequest", "the pod asks for part of a GPU (%s) and for a MIG device: a MIG device is already part of a GPU; ask for one or the other", frac.Source)
	case plain+shared == 0:
		return model.Request{}, badInput("FractionWithoutGPU", "the pod asks for part of a GPU (%s) but for no GPU device: add %s: 1 (or %s: 1) to the limits of the container that uses it", frac.Source, ResourceGPU, ResourceGPUShared)
	case plain+shared > 1:
		return model.Request{}, badInput("FractionOfSeveralGPUs", "the pod asks for part of a GPU (%s) on %d GPUs: gpuplane places part of one GPU per pod; ask for 1", frac.Source, plain+shared)
	}
	out.GPUs, out.GPUMilli, out.GPUMemoryMiB, out.Replicas = 0, frac.Milli, frac.MemoryMiB, 0
	out.ShareResource = string(ResourceGPU)
	if shared > 0 {
		out.ShareResource = string(ResourceGPUShared)
	}
	if out.GPUMilli >= model.MilliPerGPU && out.GPUMemoryMiB == 0 {
		out.GPUs, out.GPUMilli, out.ShareResource = 1, 0, "" // all of it: a whole GPU
	}
	return out, nil
}

// podRequestBounds refuses a pod whose summed requests no node could hold,
// before any of them is turned into the core's integers: a quantity far
// beyond every bound would otherwise overflow milli-values.
func podRequestBounds(reqs corev1.ResourceList) *BadInputError {
	for name, q := range reqs {
		var limit resource.Quantity
		switch {
		case name == corev1.ResourceCPU:
			limit = maxNodeCPU
		case name == corev1.ResourceMemory:
			limit = maxNodeMemory
		case name == ResourceGPU || name == ResourceGPUShared:
			limit = *resource.NewQuantity(gpunode.MaxGPUs*gpunode.MaxReplicas, resource.DecimalSI)
		case strings.HasPrefix(string(name), migResourcePrefix):
			limit = *resource.NewQuantity(gpunode.MaxGPUs*7, resource.DecimalSI)
		case strings.HasPrefix(string(name), resourceapi.ResourceDeviceClassPrefix):
			limit = *resource.NewQuantity(maxClaimGPUs, resource.DecimalSI)
		default:
			continue
		}
		if q.Sign() < 0 || q.Cmp(limit) > 0 {
			return badInput("RequestOutOfRange", "the pod asks for %s of %s: no node holds more than %s; ask for less", truncate(q.String()), name, limit.String())
		}
	}
	return nil
}

// resourceBounds are the largest quota a Queue or PodGroup may name:
// beyond any cluster, within what the core's int64 sums hold.
var resourceBounds = map[corev1.ResourceName]resource.Quantity{
	corev1.ResourceCPU:    resource.MustParse("1Gi"), // cores
	corev1.ResourceMemory: resource.MustParse("1Ei"), // bytes
	ResourceGPU:           resource.MustParse("1Mi"), // GPUs
}

// boundedResources converts a Queue's or PodGroup's resource list to the
// core's quota vector (cpu, memory, nvidia.com/gpu; other names are not kept
// in quotas), refusing a negative quantity or one beyond resourceBounds.
// field names the list in the error ("spec.minResources").
func boundedResources(field string, rl corev1.ResourceList) (model.Resources, error) {
	var r model.Resources
	for name, q := range rl {
		limit, ok := resourceBounds[name]
		if !ok {
			continue
		}
		if err := checkQuantity(fmt.Sprintf("%s[%s]", field, name), q, limit); err != nil {
			return model.Resources{}, err
		}
		setResource(&r, name, q)
	}
	return r, nil
}

func checkQuantity(field string, q, limit resource.Quantity) error {
	if q.Sign() < 0 || q.Cmp(limit) > 0 {
		return fmt.Errorf("%s: must be 0 to %s, got %s", field, limit.String(), truncate(q.String()))
	}
	return nil
}

// setResource sets the component of r that name is kept in.
func setResource(r *model.Resources, name corev1.ResourceName, q resource.Quantity) {
	switch name {
	case corev1.ResourceCPU:
		r.MilliCPU = q.MilliValue()
	case corev1.ResourceMemory:
		r.MemoryMiB = q.Value() >> 20
	case ResourceGPU:
		r.GPUMilli = q.MilliValue()
	}
}

func isExtended(name corev1.ResourceName) bool {
	return strings.Contains(string(name), "/") && !strings.HasPrefix(string(name), corev1.ResourceHugePagesPrefix) &&
		!strings.HasPrefix(string(name), "kubernetes.io/")
}

// formatShares renders GPUsAnnotation's value (gpupod.FormatGPUs).
func formatShares(shares []model.GPUShare) string {
	choice := make([]gpupod.GPUChoice, len(shares))
	for i, s := range shares {
		choice[i] = gpupod.GPUChoice{Index: s.Index, MIGSlices: s.MIGSlices}
		if s.MIGSlices == 0 && s.Milli > 0 && s.Milli < model.MilliPerGPU {
			choice[i].Milli = s.Milli
		}
	}
	return gpupod.FormatGPUs(choice)
}

// parseShares reads GPUsAnnotation back (gpupod.ParseGPUs) for node; whole
// GPUs take the GPU's full capacity and memory, and a share or MIG
// instance must fit the GPU it names.
func parseShares(s string, node *model.Node) ([]model.GPUShare, error) {
	choice, err := gpupod.ParseGPUs(s, len(node.GPUs))
	if err != nil {
		return nil, fmt.Errorf("parsing pod's GPUs on node %s: %w", node.Name, err)
	}
	if len(choice) == 0 {
		return nil, nil
	}
	out := make([]model.GPUShare, len(choice))
	for k, c := range choice {
		g := &node.GPUs[c.Index]
		switch {
		case c.MIGSlices > 0:
			if g.MIGSlices > 0 && c.MIGSlices > g.MIGSlices {
				return nil, fmt.Errorf("parsing %s %q: GPU %d of node %s has %d MIG slices, not %d", GPUsAnnotation, truncate(s), c.Index, node.Name, g.MIGSlices, c.MIGSlices)
			}
			out[k] = model.GPUShare{Index: c.Index, MIGSlices: c.MIGSlices}
		case c.Whole():
			out[k] = model.GPUShare{Index: c.Index, Milli: g.Capacity(), MemoryMiB: g.MemoryMiB}
		default:
			if c.Milli > g.Capacity() {
				return nil, fmt.Errorf("parsing %s %q: share %d of GPU %d is more than its %d thousandths", GPUsAnnotation, truncate(s), c.Milli, c.Index, g.Capacity())
			}
			out[k] = model.GPUShare{Index: c.Index, Milli: c.Milli}
		}
	}
	return out, nil
}

// truncate keeps an error message short whatever the input's size.
func truncate(s string) string {
	const limit = 64
	if len(s) <= limit {
		return s
	}
	return s[:limit] + "..."
}
