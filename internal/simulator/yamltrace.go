package simulator

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"

	"sigs.k8s.io/yaml"

	"github.com/gpuplane/gpuplane/internal/gpu"
	"github.com/gpuplane/gpuplane/internal/scheduler/model"
)

// YAMLTrace is our own small trace format, for tests and examples:
//
//	nodes:
//	- {name: a100, count: 2, milliCPU: 64000, memoryMiB: 262144, gpus: 8, gpuModel: A100, nvlink: true}
//	queues:
//	- {name: team-a, guaranteed: {gpuMilli: 8000}, weight: 1}
//	pods:
//	- {name: train, queue: team-a, count: 4, minMember: 4, gpus: 1, milliCPU: 8000, createdAt: 0, duration: 3600}
//
// A pods entry with count > 1 and minMember > 0 is one gang of count pods;
// without minMember it is count independent pods named NAME-i.
//
// Dynamic Resource Allocation: a node with dra: true publishes its GPUs
// through gpuplane's DRA driver only (ResourceSlices, no device plugin),
// and a pod with claimGPUs: N asks for N whole GPUs through a
// ResourceClaim, of the models in claimModels when set (what a CEL
// selector on productName picks). The trace gives each distinct claim
// shape a device set of the GPUs of DRA nodes it selects, as
// gpuplane-scheduler's adapter does from the claims' selectors, so the
// core places such pods on exactly those GPUs:
//
//	nodes:
//	- {name: dra, count: 2, milliCPU: 64000, memoryMiB: 262144, gpus: 8, gpuModel: H100, dra: true}
//	pods:
//	- {name: claim, count: 4, claimGPUs: 1, claimModels: [H100], milliCPU: 1000}
//
// What a node counts besides CPU, memory and GPUs (model.Node.Allocatable:
// pods, ephemeral-storage, extended resources) and what a pod asks of it
// and of the node's ports (model.Request.Scalars, HostPorts):
//
//	nodes:
//	- {name: n, milliCPU: 64000, memoryMiB: 262144, gpus: 8, allocatable: {pods: 110, rdma/hca: 4}}
//	pods:
//	- {name: web, count: 2, milliCPU: 100, scalars: {rdma/hca: 1}, hostPorts: [{port: 7777}]}
//
// Topology: a node's domains are its network labels (its block, rack,
// NVLink domain), and a gang's topology places it by them
// (model.GangTopology: levels widest first, a required and a preferred
// level, slices of sliceSize pods, or of slicePods pods named in order
// when sliceSize is 0):
//
//	nodes:
//	- {name: r1, count: 8, gpus: 8, domains: {gpuplane.io/block: b1, gpuplane.io/rack: r1}}
//	pods:
//	- name: train
//	  count: 4
//	  minMember: 4
//	  gpus: 8
//	  topology: {levels: [gpuplane.io/block, gpuplane.io/rack, kubernetes.io/hostname], preferred: gpuplane.io/rack}
type YAMLTrace struct {
	Nodes  []YAMLNode    `json:"nodes"`
	Queues []model.Queue `json:"queues,omitempty"`
	Pods   []YAMLPod     `json:"pods"`
}

// YAMLNode describes count identical nodes.
type YAMLNode struct {
	Name         string            `json:"name"`
	Count        int               `json:"count,omitempty"`
	MilliCPU     int64             `json:"milliCPU"`
	MemoryMiB    int64             `json:"memoryMiB"`
	GPUs         int               `json:"gpus,omitempty"`
	GPUModel     string            `json:"gpuModel,omitempty"`
	GPUMemoryMiB int64             `json:"gpuMemoryMiB,omitempty"`
	MIGSlices    int               `json:"migSlices,omitempty"`
	NVLink       bool              `json:"nvlink,omitempty"`
	Labels       map[string]string `json:"labels,omitempty"`
	// DRA nodes offer their GPUs only through ResourceClaims.
	DRA bool `json:"dra,omitempty"`
	// MIGProfiles, when set, opts the nodes in to MIG layouts that
	// follow demand (gpuplane.io/mig-layout-policy=follow-demand): the
	// profiles their GPUs offer, e.g. {name: 1g.10gb, slices: 1,
	// instances: 7}.
	MIGProfiles []model.MIGProfile `json:"migProfiles,omitempty"`
	// Allocatable is the nodes' model.Node.Allocatable; unset, they
	// count none of it.
	Allocatable map[string]int64 `json:"allocatable,omitempty"`
	// Domains are the nodes' topology labels (model.Node.Domains), for
	// example their block, rack and NVLink domain; every node has its
	// name as kubernetes.io/hostname besides.
	Domains map[string]string `json:"domains,omitempty"`
}

// YAMLPod describes count pods of one shape.
type YAMLPod struct {
	Name         string `json:"name"`
	Count        int    `json:"count,omitempty"`
	Queue        string `json:"queue,omitempty"`
	MinMember    int    `json:"minMember,omitempty"`
	Priority     int32  `json:"priority,omitempty"`
	CreatedAt    int64  `json:"createdAt,omitempty"`
	Duration     int64  `json:"duration,omitempty"`
	MilliCPU     int64  `json:"milliCPU,omitempty"`
	MemoryMiB    int64  `json:"memoryMiB,omitempty"`
	GPUs         int    `json:"gpus,omitempty"`
	GPUMilli     int64  `json:"gpuMilli,omitempty"`
	GPUMemoryMiB int64  `json:"gpuMemoryMiB,omitempty"`
	MIGSlices    int    `json:"migSlices,omitempty"`
	// MIGProfile names the MIG profile asked for ("1g.10gb"); migSlices
	// defaults to its slices.
	MIGProfile string   `json:"migProfile,omitempty"`
	GPUModels  []string `json:"gpuModels,omitempty"`
	// ClaimGPUs asks for that many whole GPUs through a ResourceClaim,
	// of the models in ClaimModels when set.
	ClaimGPUs   int      `json:"claimGPUs,omitempty"`
	ClaimModels []string `json:"claimModels,omitempty"`
	// Namespace and Labels are the pods', PodAffinity and Spread their
	// inter-pod affinity and topology spread constraints, in the core's
	// terms (model.PodAffinity, model.SpreadConstraint): a term's
	// namespaces are listed, none meaning the pod's own. Every node has
	// its name as kubernetes.io/hostname for them.
	Namespace   string                   `json:"namespace,omitempty"`
	Labels      map[string]string        `json:"labels,omitempty"`
	PodAffinity *model.PodAffinity       `json:"podAffinity,omitempty"`
	Spread      []model.SpreadConstraint `json:"spread,omitempty"`
	// Scalars and HostPorts are the pods' model.Request.Scalars and
	// HostPorts.
	Scalars   map[string]int64 `json:"scalars,omitempty"`
	HostPorts []model.HostPort `json:"hostPorts,omitempty"`
	// Topology places the gang (count pods with minMember) by the
	// network; SlicePods, with a topology whose sliceRequired is set and
	// sliceSize 0, names the pods' sub-groups: pods 0..SlicePods-1 are
	// slice s0, the next SlicePods s1, and so on (model.Pod.Slice).
	Topology  *model.GangTopology `json:"topology,omitempty"`
	SlicePods int                 `json:"slicePods,omitempty"`
	// MinRuntime and CheckpointEvery are the pods' TracePod.MinRuntime
	// and TracePod.CheckpointEvery, in seconds.
	MinRuntime      int64 `json:"minRuntime,omitempty"`
	CheckpointEvery int64 `json:"checkpointEvery,omitempty"`
	// Movable opts the pods' group in to moves for defragmentation
	// (EventConfig.Defrag).
	Movable bool `json:"movable,omitempty"`
}

// hostnameLabel is the topology key of a node's own domain.
const hostnameLabel = "kubernetes.io/hostname"

// ReadYAMLTrace parses our YAML trace format; unknown fields are errors.
func ReadYAMLTrace(name string, r io.Reader) (*Trace, error) {
	data, err := io.ReadAll(r)
	if err != nil {
		return nil, fmt.Errorf("reading trace %s: %w", name, err)
	}
	var y YAMLTrace
	if err := yaml.UnmarshalStrict(data, &y); err != nil {
		return nil, fmt.Errorf("parsing trace %s: %w", name, err)
	}
	tr := &Trace{Source: name, Queues: y.Queues}
	for i, n := range y.Nodes {
		if n.Name == "" {
			return nil, fmt.Errorf("trace %s: nodes[%d].name: must not be empty", name, i)
		}
		if n.MilliCPU < 0 || n.MemoryMiB < 0 || n.GPUs < 0 || n.Count < 0 {
			return nil, fmt.Errorf("trace %s: nodes[%d] (%s): quantities must be >= 0", name, i, n.Name)
		}
		if n.GPUs > MaxNodeGPUs || n.MIGSlices > 7 {
			return nil, fmt.Errorf("trace %s: nodes[%d] (%s): a node has at most %d GPUs of at most 7 MIG slices, got %d of %d", name, i, n.Name, MaxNodeGPUs, n.GPUs, n.MIGSlices)
		}
		if len(n.MIGProfiles) > 32 {
			return nil, fmt.Errorf("trace %s: nodes[%d].migProfiles: at most 32, got %d", name, i, len(n.MIGProfiles))
		}
		for k, p := range n.MIGProfiles {
			if model.ProfileSlices(p.Name) == 0 || p.Slices != model.ProfileSlices(p.Name) || p.Instances < 1 || p.Instances*p.Slices > 7 {
				return nil, fmt.Errorf("trace %s: nodes[%d].migProfiles[%d]: want a profile name such as 1g.10gb, its slices, and 1 to 7/slices instances, got %+v", name, i, k, p)
			}
		}
		if err := model.ValidateResources(fmt.Sprintf("nodes[%d].allocatable", i), n.Allocatable); err != nil {
			return nil, fmt.Errorf("trace %s: %w", name, err)
		}
		if err := checkDomains(fmt.Sprintf("nodes[%d].domains", i), n.Domains); err != nil {
			return nil, fmt.Errorf("trace %s: %w", name, err)
		}
		count := max(n.Count, 1)
		if count > MaxTraceNodes-len(tr.Nodes) {
			return nil, fmt.Errorf("trace %s: nodes[%d].count: the trace would have more than %d nodes", name, i, MaxTraceNodes)
		}
		for k := range count {
			nd := model.Node{Name: n.Name, MilliCPU: n.MilliCPU, MemoryMiB: n.MemoryMiB, Labels: n.Labels, Allocatable: n.Allocatable}
			if len(n.MIGProfiles) > 0 {
				nd.MIG = &model.NodeMIG{Profiles: n.MIGProfiles}
			}
			if count > 1 {
				nd.Name = fmt.Sprintf("%s-%d", n.Name, k)
			}
			nd.Domains = make(map[string]string, len(n.Domains)+1)
			for k, v := range n.Domains {
				nd.Domains[k] = v
			}
			nd.Domains[hostnameLabel] = nd.Name
			for g := range n.GPUs {
				nd.GPUs = append(nd.GPUs, model.GPU{Index: g, Model: n.GPUModel, MemoryMiB: n.GPUMemoryMiB, MIGSlices: n.MIGSlices, NUMANode: g * 2 / max(n.GPUs, 1),
					ClaimOnly: n.DRA})
			}
			if n.NVLink && n.GPUs > 1 {
				nd.Topology = gpu.NewTopology(n.GPUs)
				for a := range n.GPUs {
					for b := a + 1; b < n.GPUs; b++ {
						nd.Topology.Set(a, b, gpu.Link{NVLinks: 12})
					}
				}
			}
			tr.Nodes = append(tr.Nodes, nd)
		}
	}
	for i, p := range y.Pods {
		if p.Name == "" {
			return nil, fmt.Errorf("trace %s: pods[%d].name: must not be empty", name, i)
		}
		if p.GPUMilli < 0 || p.GPUMilli >= model.MilliPerGPU && p.GPUs == 0 && p.GPUMilli != 0 {
			return nil, fmt.Errorf("trace %s: pods[%d].gpuMilli: must be in 1..999 (use gpus for whole GPUs), got %d", name, i, p.GPUMilli)
		}
		if p.Count < 0 || p.MinMember < 0 || p.MinMember > max(p.Count, 1) {
			return nil, fmt.Errorf("trace %s: pods[%d] (%s): need 0 <= minMember <= count", name, i, p.Name)
		}
		if p.MinRuntime < 0 || p.CheckpointEvery < 0 {
			return nil, fmt.Errorf("trace %s: pods[%d] (%s): minRuntime and checkpointEvery must be >= 0, got %d and %d", name, i, p.Name, p.MinRuntime, p.CheckpointEvery)
		}
		if err := model.ValidateResources(fmt.Sprintf("pods[%d].scalars", i), p.Scalars); err != nil {
			return nil, fmt.Errorf("trace %s: %w", name, err)
		}
		if err := model.ValidateHostPorts(fmt.Sprintf("pods[%d].hostPorts", i), p.HostPorts); err != nil {
			return nil, fmt.Errorf("trace %s: %w", name, err)
		}
		req := model.Request{MilliCPU: p.MilliCPU, MemoryMiB: p.MemoryMiB, GPUs: p.GPUs, GPUMilli: p.GPUMilli,
			GPUMemoryMiB: p.GPUMemoryMiB, MIGSlices: p.MIGSlices, MIGProfile: p.MIGProfile, GPUModels: p.GPUModels,
			Scalars: p.Scalars, HostPorts: p.HostPorts}
		if p.MIGProfile != "" {
			s := model.ProfileSlices(p.MIGProfile)
			if s == 0 || p.MIGSlices != 0 && p.MIGSlices != s {
				return nil, fmt.Errorf("trace %s: pods[%d].migProfile: %q is not a MIG profile such as 1g.10gb of %d slices", name, i, p.MIGProfile, p.MIGSlices)
			}
			req.MIGSlices = s
		}
		if p.ClaimGPUs < 0 || p.ClaimGPUs > MaxNodeGPUs {
			return nil, fmt.Errorf("trace %s: pods[%d].claimGPUs: must be in 0..%d, got %d", name, i, MaxNodeGPUs, p.ClaimGPUs)
		}
		if p.ClaimGPUs > 0 {
			if req.UsesGPU() {
				return nil, fmt.Errorf("trace %s: pods[%d] (%s): claimGPUs asks for GPUs through a claim: drop gpus, gpuMilli, gpuMemoryMiB and migSlices", name, i, p.Name)
			}
			req.GPUs, req.DeviceSet = p.ClaimGPUs, claimSet(p.ClaimModels)
			for k, m := range p.ClaimModels {
				if m == "" || strings.ContainsAny(m, ",|*") {
					return nil, fmt.Errorf("trace %s: pods[%d].claimModels[%d]: %q: a model name must not be empty or contain ',', '|' or '*'", name, i, k, m)
				}
			}
		} else if len(p.ClaimModels) > 0 {
			return nil, fmt.Errorf("trace %s: pods[%d].claimModels: needs claimGPUs", name, i)
		}
		if req.GPUs > 0 {
			req.GPUMilli = 0
		}
		req.Namespace, req.Labels, req.Affinity, req.Spread = p.Namespace, p.Labels, ownNamespace(p.PodAffinity, p.Namespace), p.Spread
		if err := req.CheckConstraints(); err != nil {
			return nil, fmt.Errorf("trace %s: pods[%d] (%s): %w", name, i, p.Name, err)
		}
		count := max(p.Count, 1)
		if count > MaxTracePods-len(tr.Pods) {
			return nil, fmt.Errorf("trace %s: pods[%d].count: the trace would have more than %d pods", name, i, MaxTracePods)
		}
		if err := checkPodTopology(fmt.Sprintf("pods[%d]", i), p); err != nil {
			return nil, fmt.Errorf("trace %s: %w", name, err)
		}
		for k := range count {
			tp := TracePod{Name: p.Name, Request: req, CreatedAt: p.CreatedAt, Duration: p.Duration, Queue: p.Queue, Priority: p.Priority, Topology: p.Topology,
				MinRuntime: p.MinRuntime, CheckpointEvery: p.CheckpointEvery, Movable: p.Movable}
			if count > 1 {
				tp.Name = fmt.Sprintf("%s-%d", p.Name, k)
			}
			if p.MinMember > 0 {
				tp.Group, tp.MinMember = p.Name, p.MinMember
			}
			if p.SlicePods > 0 {
				tp.Slice = fmt.Sprintf("s%d", k/p.SlicePods)
			}
			tr.Pods = append(tr.Pods, tp)
		}
	}
	sortByCreation(tr.Pods)
	addDeviceSets(tr)
	return tr, nil
}

// checkPodTopology reports what of p's topology means nothing: a
// topology that fails model.GangTopology.Check, one on pods that are no
// gang, or slicePods without a topology that places slices by sub-group.
func checkPodTopology(field string, p YAMLPod) error {
	switch t := p.Topology; {
	case t == nil:
		if p.SlicePods != 0 {
			return fmt.Errorf("%s.slicePods: needs a topology with sliceRequired", field)
		}
		return nil
	case p.MinMember == 0:
		return fmt.Errorf("%s.topology: places a gang: set minMember", field)
	case p.SlicePods < 0:
		return fmt.Errorf("%s.slicePods: must be at least 0, got %d", field, p.SlicePods)
	case p.SlicePods > 0 && (t.SliceRequired == "" || t.SliceSize != 0):
		return fmt.Errorf("%s.slicePods: names sub-groups for a topology with sliceRequired and sliceSize 0", field)
	case p.SlicePods == 0 && t.SliceRequired != "" && t.SliceSize == 0:
		return fmt.Errorf("%s.topology.sliceRequired: set sliceSize or slicePods to say what a slice is", field)
	}
	for k, l := range p.Topology.Levels {
		if len(l) > maxDomainKey {
			return fmt.Errorf("%s.topology.levels[%d]: a label key of at most %d characters, got %d", field, k, maxDomainKey, len(l))
		}
	}
	return p.Topology.Check(field + ".topology")
}

// claimSet names the device set of a claim for GPUs of the given models
// (any model when none).
func claimSet(models []string) string {
	if len(models) == 0 {
		return "claims:*"
	}
	m := slices.Clone(models)
	slices.Sort(m)
	return "claims:" + strings.Join(slices.Compact(m), "|")
}

// addDeviceSets puts every GPU of a DRA node in the device sets of the
// trace's claims that select it: all GPUs for a claim of any model, the
// GPUs of its models otherwise.
func addDeviceSets(tr *Trace) {
	sets := map[string][]string{}
	for _, p := range tr.Pods {
		if s := p.Request.DeviceSet; s != "" {
			models := strings.Split(strings.TrimPrefix(s, "claims:"), "|")
			if models[0] == "*" {
				models = nil
			}
			sets[s] = models
		}
	}
	if len(sets) == 0 {
		return
	}
	names := slices.Sorted(maps.Keys(sets))
	for i := range tr.Nodes {
		gpus := tr.Nodes[i].GPUs
		for g := range gpus {
			if !gpus[g].ClaimOnly {
				continue
			}
			var in []string
			for _, s := range names {
				if len(sets[s]) == 0 || slices.Contains(sets[s], gpus[g].Model) {
					in = append(in, s)
				}
			}
			gpus[g].DeviceSets = strings.Join(in, ",")
		}
	}
}

// ownNamespace is a, with ns as the namespace of each term that lists none
// and does not select all (Kubernetes' default); a itself when no term
// needs it.
func ownNamespace(a *model.PodAffinity, ns string) *model.PodAffinity {
	if a == nil {
		return nil
	}
	out := *a
	for _, l := range []*[]model.PodAffinityTerm{&out.Required, &out.RequiredAnti, &out.Preferred, &out.PreferredAnti} {
		terms := slices.Clone(*l)
		for i := range terms {
			if len(terms[i].Namespaces) == 0 && !terms[i].AllNamespaces {
				terms[i].Namespaces = []string{ns}
			}
		}
		*l = terms
	}
	return &out
}
