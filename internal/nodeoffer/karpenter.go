package nodeoffer

import (
	"cmp"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/gpuplane/gpuplane/api/gpunode"
)

// Karpenter's names that the published objects use.
const (
	KarpenterGroup    = "karpenter.sh"
	KWOKGroup         = "karpenter.kwok.sh"
	KindNodePool      = "NodePool"
	KindKWOKClass     = "KWOKNodeClass"
	LabelNodePool     = "karpenter.sh/nodepool"
	LabelInstanceType = "node.kubernetes.io/instance-type"
	// PoolPrefix starts the name of every NodePool gpuplane publishes.
	PoolPrefix = "gpu-"
)

// InstanceType is one GPU machine a node autoscaler may buy, with what its
// node offers once gpuplane's agent runs on it.
type InstanceType struct {
	// Name is the instance type's name (node.kubernetes.io/instance-type).
	Name string `json:"name"`
	// Offer is what the node's GPUs offer (Compute).
	Offer *Offer `json:"offer"`
	// CPU, Memory and Pods are the machine's, as quantities ("224",
	// "2Ti", "110").
	CPU    string `json:"cpu"`
	Memory string `json:"memory"`
	Pods   string `json:"pods,omitempty"`
	// Price is what one node costs an hour; the autoscaler buys the
	// cheapest type that fits.
	Price float64 `json:"price"`
}

// Validate checks the instance type and names the field that is wrong.
func (it InstanceType) Validate() error {
	if errs := validation.IsValidLabelValue(it.Name); it.Name == "" || len(errs) > 0 {
		return fmt.Errorf("instance type %q: name: must be a label value (%v)", it.Name, errs)
	}
	if errs := validation.IsDNS1123Subdomain(PoolPrefix + it.Name); len(errs) > 0 {
		return fmt.Errorf("instance type %q: name: %s%s must be a DNS subdomain to name its NodePool (%v)", it.Name, PoolPrefix, it.Name, errs)
	}
	if it.Offer == nil || len(it.Offer.Resources) == 0 {
		return fmt.Errorf("instance type %q: offer: must list the node's GPU resources", it.Name)
	}
	for field, q := range map[string]string{"cpu": it.CPU, "memory": it.Memory, "pods": cmp.Or(it.Pods, "110")} {
		v, err := resource.ParseQuantity(q)
		if err != nil || v.Sign() <= 0 {
			return fmt.Errorf("instance type %q: %s: must be a positive quantity, got %q", it.Name, field, q)
		}
	}
	if it.Price <= 0 {
		return fmt.Errorf("instance type %q: price: must be > 0, got %v", it.Name, it.Price)
	}
	return nil
}

// PoolOptions are what the published NodePools share.
type PoolOptions struct {
	// NodeClass is the KWOKNodeClass the pools' nodes are made from.
	NodeClass string
	// ConsolidateAfter is how long a node stays empty or underused before
	// Karpenter removes or replaces it: the idle time after which a GPU
	// pool scales back to zero.
	ConsolidateAfter time.Duration
	// GPULimit caps the nvidia.com/gpu of each pool's nodes together; 0
	// sets no limit.
	GPULimit int64
}

// NodePool is the Karpenter NodePool of one GPU instance type: its nodes
// are made with the offer's labels and annotations from the start, so that
// Karpenter's simulation and gpuplane-scheduler see the GPU features pods
// select on before the agent runs; they are consolidated when empty or
// underused after o.ConsolidateAfter, every empty node at once. Pods that must not lose their node
// carry gpupod.DoNotDisruptAnnotation (gpuplane-scheduler binds gangs and
// pods on part of a GPU with it).
func NodePool(it InstanceType, o PoolOptions) (*unstructured.Unstructured, error) {
	if err := it.Validate(); err != nil {
		return nil, err
	}
	if o.NodeClass == "" {
		return nil, fmt.Errorf("node pool %s%s: nodeClass: must name a KWOKNodeClass", PoolPrefix, it.Name)
	}
	if o.ConsolidateAfter < 0 {
		return nil, fmt.Errorf("node pool %s%s: consolidateAfter: must be >= 0, got %v", PoolPrefix, it.Name, o.ConsolidateAfter)
	}
	// The offer's resources go on every node too (gpunode.OfferAnnotation):
	// until the node registers them, gpuplane-scheduler counts it as
	// coming with them, and its pods wait for it.
	annotations := maps.Clone(it.Offer.Annotations)
	if annotations == nil {
		annotations = map[string]string{}
	}
	annotations[gpunode.OfferAnnotation] = gpunode.FormatOffer(it.Offer.Resources)
	meta := map[string]any{"labels": toAny(it.Offer.Labels), "annotations": toAny(annotations)}
	spec := map[string]any{
		"template": map[string]any{
			"metadata": meta,
			"spec": map[string]any{
				"nodeClassRef": map[string]any{"group": KWOKGroup, "kind": KindKWOKClass, "name": o.NodeClass},
				"requirements": []any{
					map[string]any{"key": LabelInstanceType, "operator": "In", "values": []any{it.Name}},
					map[string]any{"key": "kubernetes.io/os", "operator": "In", "values": []any{"linux"}},
				},
				"expireAfter": "Never",
			},
		},
		"disruption": map[string]any{
			"consolidationPolicy": "WhenEmptyOrUnderutilized",
			"consolidateAfter":    formatDuration(o.ConsolidateAfter),
			// Empty GPU nodes hold no work: all of them may go at once,
			// so the pool reaches zero one idle time after its work
			// ends (Karpenter's default, 10% of the nodes at a time,
			// takes a round per node on a small pool). Nodes that still
			// run pods are moved 10% at a time.
			"budgets": []any{
				map[string]any{"nodes": "100%", "reasons": []any{"Empty"}},
				map[string]any{"nodes": "10%", "reasons": []any{"Underutilized", "Drifted"}},
			},
		},
	}
	if o.GPULimit > 0 {
		spec["limits"] = map[string]any{"nvidia.com/gpu": strconv.FormatInt(o.GPULimit, 10)}
	}
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": KarpenterGroup + "/v1",
		"kind":       KindNodePool,
		"metadata":   map[string]any{"name": PoolPrefix + it.Name},
		"spec":       spec,
	}}
	return u, nil
}

// KWOKNodeClass is the node class of Karpenter's kwok provider: its nodes
// register registrationDelay after Karpenter launches them, as a cloud's
// machines take time to boot.
func KWOKNodeClass(name string, registrationDelay time.Duration) *unstructured.Unstructured {
	spec := map[string]any{}
	if registrationDelay > 0 {
		spec["nodeRegistrationDelay"] = formatDuration(registrationDelay)
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": KWOKGroup + "/v1alpha1",
		"kind":       KindKWOKClass,
		"metadata":   map[string]any{"name": name},
		"spec":       spec,
	}}
}

// KWOKInstanceTypes is the instance-types file of Karpenter's kwok provider
// (--instance-types-file-path) for its, sorted by name: each an on-demand
// linux/amd64 machine in zone whose resources are its CPU, memory and pods
// and its offer's GPU resources, so that the kwok nodes carry the GPU
// capacity the agent would advertise.
func KWOKInstanceTypes(its []InstanceType, zone string) ([]byte, error) {
	type requirement struct {
		Key      string   `json:"key"`
		Operator string   `json:"operator"`
		Values   []string `json:"values"`
	}
	type offering struct {
		Price        float64       `json:"Price"`
		Available    bool          `json:"Available"`
		Requirements []requirement `json:"Requirements"`
	}
	type instanceType struct {
		Name             string            `json:"name"`
		Offerings        []offering        `json:"offerings"`
		Architecture     string            `json:"architecture"`
		OperatingSystems []string          `json:"operatingSystems"`
		Resources        map[string]string `json:"resources"`
	}
	if zone == "" {
		return nil, fmt.Errorf("kwok instance types: zone: must not be empty")
	}
	out := make([]instanceType, 0, len(its))
	seen := map[string]bool{}
	for _, it := range its {
		if err := it.Validate(); err != nil {
			return nil, err
		}
		if seen[it.Name] {
			return nil, fmt.Errorf("instance type %q: name: given twice", it.Name)
		}
		seen[it.Name] = true
		res := map[string]string{"cpu": it.CPU, "memory": it.Memory, "pods": cmp.Or(it.Pods, "110")}
		for name, n := range it.Offer.Resources {
			res[name] = strconv.FormatInt(n, 10)
		}
		out = append(out, instanceType{
			Name: it.Name,
			Offerings: []offering{{Price: it.Price, Available: true, Requirements: []requirement{
				{Key: "karpenter.sh/capacity-type", Operator: "In", Values: []string{"on-demand"}},
				{Key: "topology.kubernetes.io/zone", Operator: "In", Values: []string{zone}},
			}}},
			Architecture: "amd64", OperatingSystems: []string{"linux"}, Resources: res,
		})
	}
	slices.SortFunc(out, func(a, b instanceType) int { return cmp.Compare(a.Name, b.Name) })
	return json.MarshalIndent(out, "", "  ")
}

// formatDuration writes d as Karpenter's duration pattern wants it: whole
// hours, minutes and seconds ("1h30s"), "0s" for zero.
func formatDuration(d time.Duration) string {
	d = d.Round(time.Second)
	if d == 0 {
		return "0s"
	}
	s := ""
	if h := d / time.Hour; h > 0 {
		s += fmt.Sprintf("%dh", h)
		d -= h * time.Hour
	}
	if m := d / time.Minute; m > 0 {
		s += fmt.Sprintf("%dm", m)
		d -= m * time.Minute
	}
	if d > 0 {
		s += fmt.Sprintf("%ds", d/time.Second)
	}
	return s
}

func toAny(m map[string]string) map[string]any {
	out := make(map[string]any, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

func sortedKeys[V any](m map[string]V) []string { return slices.Sorted(maps.Keys(m)) }
