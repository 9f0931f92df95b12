package adapter

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/gpuplane/gpuplane/api/gpunode"
	"github.com/gpuplane/gpuplane/internal/scheduler/model"
)

// Node pool limits. Karpenter buys a node for each pod it finds
// unschedulable until its NodePool's spec.limits would be exceeded, and
// then stops: for a gang larger than the limits allow, it buys nodes for
// some members, which never start. gpuplane-scheduler reads the GPU node
// pools' limits and tells the core the most GPUs the cluster's nodes may
// have, pool by pool (model.Snapshot.NodePools): the labels each pool's
// future nodes will carry and the GPUs of the whole nodes it may still add
// within its limit. The core counts, for a gang, the pools whose future
// nodes its pods' node selector and required node affinity admit, and the
// nodes they admit; a gang above that waits for the limits instead
// (ExceedsNodePoolLimits), and no node is bought for it. The limits, not
// what a pool uses now, bound it: a pool's status.resources lags behind
// its nodes, and the two read at different times would count a node
// twice or not at all.

// NodePoolsResource is Karpenter's NodePool.
var NodePoolsResource = schema.GroupVersionResource{Group: "karpenter.sh", Version: "v1", Resource: "nodepools"}

// poolRoom is what one GPU node pool may have.
type poolRoom struct {
	// labels are those its nodes will carry: its template's labels, its
	// requirements of operator In with one value, and LabelNodePool.
	labels map[string]string
	// open are the labels its requirements leave to the instance the
	// autoscaler picks: the values each may take (In with several), or
	// nil for any (NotIn, Exists, DoesNotExist, Gt, Lt).
	open map[string][]string
	// unreadable: something in the pool does not parse; it is counted
	// as unlimited and admitting every pod.
	unreadable bool
	// unlimited: the pool sets no nvidia.com/gpu limit.
	unlimited bool
	// gpuMilli is the physical GPUs, in thousandths, of the whole nodes
	// the pool may have within its limit.
	gpuMilli int64
}

// readNodePool reads the most GPUs a NodePool's nodes may have; ok is false
// for a pool of no GPU nodes (its template has no nvidia.com/gpu.count
// label and its limits name no nvidia.com/gpu). A value that does not
// parse is an error naming the field.
func readNodePool(u *unstructured.Unstructured) (room poolRoom, ok bool, err error) {
	labels, open, err := poolLabels(u)
	if err != nil {
		return poolRoom{}, false, err
	}
	annotations, _, err := unstructured.NestedStringMap(u.Object, "spec", "template", "metadata", "annotations")
	if err != nil {
		return poolRoom{}, false, fmt.Errorf("spec.template.metadata.annotations: must map strings to strings")
	}
	limit, hasLimit, err := poolQuantity(u, "spec", "limits")
	if err != nil {
		return poolRoom{}, false, err
	}
	count := 0
	if s, has := labels[LabelGPUCount]; has {
		if count, err = gpunode.ParseGPUCount(s); err != nil {
			return poolRoom{}, false, fmt.Errorf("spec.template.metadata.labels: %w", err)
		}
	}
	if count == 0 && !hasLimit {
		return poolRoom{}, false, nil
	}
	if !hasLimit {
		return poolRoom{labels: labels, open: open, unlimited: true}, true, nil
	}
	headroom := limit
	if count == 0 {
		// No node size known: each unit of the limit a GPU.
		return poolRoom{labels: labels, open: open, gpuMilli: headroom * model.MilliPerGPU}, true, nil
	}
	// A node advertises its GPUs' replicas as nvidia.com/gpu when it
	// time-slices them under that name: that is the unit of the limit.
	perNode := int64(count)
	if s, has := annotations[gpunode.OfferAnnotation]; has {
		o, err := gpunode.ParseOffer(s)
		if err != nil {
			return poolRoom{}, false, fmt.Errorf("spec.template.metadata.annotations: %w", err)
		}
		if v := o[string(ResourceGPU)]; v > 0 {
			perNode = v
		}
	} else if s, has := labels[LabelGPUReplicas]; has {
		r, err := gpunode.ParseReplicas(s)
		if err != nil {
			return poolRoom{}, false, fmt.Errorf("spec.template.metadata.labels: %w", err)
		}
		perNode *= int64(r)
	}
	return poolRoom{labels: labels, open: open, gpuMilli: headroom / perNode * int64(count) * model.MilliPerGPU}, true, nil
}

// The most labels and requirements read from one pool: Karpenter's own
// schema allows 100 requirements; a template's labels are a node's.
const (
	maxPoolLabels       = 256
	maxPoolRequirements = 100
)

// poolLabels reads the labels a NodePool's nodes will carry: its
// template's metadata.labels, each requirement of operator In with exactly
// one value (every node of the pool has that value), and LabelNodePool
// with the pool's name; and open, the labels its other requirements leave
// to the instance the autoscaler picks (the values of an In with several,
// nil for any value under another operator). Keys and values must be
// valid label keys and values; an error names the field.
func poolLabels(u *unstructured.Unstructured) (map[string]string, map[string][]string, error) {
	const labelsField = "spec.template.metadata.labels"
	labels, _, err := unstructured.NestedStringMap(u.Object, "spec", "template", "metadata", "labels")
	if err != nil {
		return nil, nil, fmt.Errorf("%s: must map strings to strings", labelsField)
	}
	if len(labels) > maxPoolLabels {
		return nil, nil, fmt.Errorf("%s: at most %d labels, got %d", labelsField, maxPoolLabels, len(labels))
	}
	for k, v := range labels {
		if err := checkLabel(k, v); err != nil {
			return nil, nil, fmt.Errorf("%s: %w", labelsField, err)
		}
	}
	const reqField = "spec.template.spec.requirements"
	reqs, _, err := unstructured.NestedSlice(u.Object, "spec", "template", "spec", "requirements")
	if err != nil {
		return nil, nil, fmt.Errorf("%s: must be a list", reqField)
	}
	if len(reqs) > maxPoolRequirements {
		return nil, nil, fmt.Errorf("%s: at most %d requirements, got %d", reqField, maxPoolRequirements, len(reqs))
	}
	out := make(map[string]string, len(labels)+len(reqs)+1)
	var open map[string][]string
	maps.Copy(out, labels)
	for i, r := range reqs {
		field := fmt.Sprintf("%s[%d]", reqField, i)
		m, ok := r.(map[string]any)
		if !ok {
			return nil, nil, fmt.Errorf("%s: must be an object", field)
		}
		key, _, err1 := unstructured.NestedString(m, "key")
		op, _, err2 := unstructured.NestedString(m, "operator")
		values, _, err3 := unstructured.NestedStringSlice(m, "values")
		switch {
		case err1 != nil || key == "":
			return nil, nil, fmt.Errorf("%s.key: must be a label key", field)
		case err2 != nil:
			return nil, nil, fmt.Errorf("%s.operator: must be a string", field)
		case err3 != nil:
			return nil, nil, fmt.Errorf("%s.values: must be a list of strings", field)
		case len(values) > maxPoolLabels:
			return nil, nil, fmt.Errorf("%s.values: at most %d values, got %d", field, maxPoolLabels, len(values))
		}
		if op != "In" || len(values) != 1 {
			if errs := validation.IsQualifiedName(key); len(errs) > 0 {
				return nil, nil, fmt.Errorf("%s.key: label key %q: %s", field, truncate(key), errs[0])
			}
			if open == nil {
				open = map[string][]string{}
			}
			if op == "In" && len(values) > 0 {
				open[key] = values
			} else {
				open[key] = nil
			}
			continue
		}
		if err := checkLabel(key, values[0]); err != nil {
			return nil, nil, fmt.Errorf("%s: %w", field, err)
		}
		if v, has := out[key]; has && v != values[0] {
			return nil, nil, fmt.Errorf("%s: requires %s=%s, but the pool's nodes are labelled %s=%s", field, key, truncate(values[0]), key, truncate(v))
		}
		out[key] = values[0]
	}
	out[LabelNodePool] = u.GetName()
	for k := range open {
		if _, fixed := out[k]; fixed {
			delete(open, k) // a fixed label settles it
		}
	}
	return out, open, nil
}

// checkLabel checks a label key and value.
func checkLabel(k, v string) error {
	if errs := validation.IsQualifiedName(k); len(errs) > 0 {
		return fmt.Errorf("label key %q: %s", truncate(k), errs[0])
	}
	if errs := validation.IsValidLabelValue(v); len(errs) > 0 {
		return fmt.Errorf("label %s value %q: %s", k, truncate(v), errs[0])
	}
	return nil
}

// poolQuantity reads nvidia.com/gpu from the resource list at path of u:
// whole, 0 to gpunode.MaxGPUs x gpunode.MaxReplicas x 100,000 (a pool of
// that many nodes); has is false when the list does not name it.
func poolQuantity(u *unstructured.Unstructured, path ...string) (v int64, has bool, err error) {
	m, _, _ := unstructured.NestedStringMap(u.Object, path...)
	s, has := m[string(ResourceGPU)]
	if !has {
		return 0, false, nil
	}
	q, err := resource.ParseQuantity(s)
	const most = gpunode.MaxGPUs * gpunode.MaxReplicas * 100_000
	if err != nil || q.Sign() < 0 || q.Cmp(*resource.NewQuantity(most, resource.DecimalSI)) > 0 {
		return 0, false, fmt.Errorf("%s.%s: must be a whole number from 0 to %d, got %q", path[0], path[1], most, truncate(s))
	}
	return q.Value(), true, nil
}

func (c *clusterCache) upsertNodePool(u *unstructured.Unstructured) {
	room, ok, err := readNodePool(u)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.pools == nil {
		c.pools = map[string]poolRoom{}
	}
	if err != nil {
		// A pool that says something unreadable limits nothing we know,
		// and may admit any pod.
		room, ok = poolRoom{unreadable: true, unlimited: true}, true
		c.poolProblems[u.GetName()] = err.Error()
	} else {
		delete(c.poolProblems, u.GetName())
	}
	if !ok {
		delete(c.pools, u.GetName())
	} else {
		c.pools[u.GetName()] = room
	}
	// Pod classes count the pools' future nodes (builder.class).
	c.nodesVersion++
	c.poke()
}

func (c *clusterCache) deleteNodePool(u *unstructured.Unstructured) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.pools, u.GetName())
	delete(c.poolProblems, u.GetName())
	c.nodesVersion++
	c.poke()
}

// nodePoolProblems returns what is unreadable in each node pool, by name.
func (c *clusterCache) nodePoolProblems() map[string]string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.poolProblems)
}

// nodePools are the GPU node pools with what each may still add
// (model.Snapshot.NodePools): nil when none is known (no Karpenter, or
// Cluster Autoscaler, whose limits gpuplane does not read) or one is
// unreadable, which may admit any pod and sets no limit. classLabels adds
// to a pool's labels those of the pod classes its future nodes admit
// (builder.poolClassLabels), as a node carries them.
func (c *clusterCache) nodePools(classLabels func(poolRoom) map[string]string) []model.NodePool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.pools) == 0 {
		return nil
	}
	has := make(map[string]int64, len(c.pools))
	for name, r := range c.pools {
		if r.unreadable {
			return nil
		}
		has[name] = 0
	}
	for _, ni := range c.nodes {
		if pool := ni.node.Labels[LabelNodePool]; pool != "" {
			if sum, limited := has[pool]; limited {
				has[pool] = sum + int64(len(ni.m.GPUs))*model.MilliPerGPU
			}
		}
	}
	out := make([]model.NodePool, 0, len(c.pools))
	for name, r := range c.pools {
		out = append(out, model.NodePool{Name: name, Labels: classLabels(r), Unlimited: r.unlimited, AddGPUMilli: max(r.gpuMilli-has[name], 0)})
	}
	slices.SortFunc(out, func(a, b model.NodePool) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// LabelNodePool names, on a node Karpenter made, its NodePool.
const LabelNodePool = "karpenter.sh/nodepool"
