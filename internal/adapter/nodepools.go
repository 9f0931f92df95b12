package adapter

import (
	"fmt"
	"maps"

	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/gpuplane/gpuplane/api/gpunode"
	"github.com/gpuplane/gpuplane/internal/scheduler/model"
)

// Node pool limits. Karpenter buys a node for each pod it finds
// unschedulable until its NodePool's spec.limits would be exceeded, and
// then stops: for a gang larger than the limits allow, it buys nodes for
// some members, which never start. gpuplane-scheduler reads the GPU node
// pools' limits and tells the core the most GPUs the cluster's nodes may
// have together (model.Snapshot.NodeLimit): the GPUs of the whole nodes
// each limited pool may have, or of those it has where more, and those of
// every other node. Such a gang waits for the limits instead
// (ExceedsNodePoolLimits), and no node is bought for it. The limits, not
// what a pool uses now, bound it: a pool's status.resources lags behind
// its nodes, and the two read at different times would count a node
// twice or not at all.

// NodePoolsResource is Karpenter's NodePool.
var NodePoolsResource = schema.GroupVersionResource{Group: "karpenter.sh", Version: "v1", Resource: "nodepools"}

// poolRoom is what one GPU node pool may have.
type poolRoom struct {
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
	labels, _, _ := unstructured.NestedStringMap(u.Object, "spec", "template", "metadata", "labels")
	annotations, _, _ := unstructured.NestedStringMap(u.Object, "spec", "template", "metadata", "annotations")
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
		return poolRoom{unlimited: true}, true, nil
	}
	headroom := limit
	if count == 0 {
		// No node size known: each unit of the limit a GPU.
		return poolRoom{gpuMilli: headroom * model.MilliPerGPU}, true, nil
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
	return poolRoom{gpuMilli: headroom / perNode * int64(count) * model.MilliPerGPU}, true, nil
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
		// A pool that says something unreadable limits nothing we know.
		room, ok = poolRoom{unlimited: true}, true
		c.poolProblems[u.GetName()] = err.Error()
	} else {
		delete(c.poolProblems, u.GetName())
	}
	if !ok {
		delete(c.pools, u.GetName())
	} else {
		c.pools[u.GetName()] = room
	}
	c.poke()
}

func (c *clusterCache) deleteNodePool(u *unstructured.Unstructured) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.pools, u.GetName())
	delete(c.poolProblems, u.GetName())
	c.poke()
}

// nodePoolProblems returns what is unreadable in each node pool, by name.
func (c *clusterCache) nodePoolProblems() map[string]string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.poolProblems)
}

// nodeLimit is the most GPUs all nodes may have together
// (model.Snapshot.NodeLimit): nil when a GPU node pool sets no limit, or
// none is known (no Karpenter, or Cluster Autoscaler, whose limits
// gpuplane does not read).
func (c *clusterCache) nodeLimit() *model.Resources {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.pools) == 0 {
		return nil
	}
	inPools := make(map[string]int64, len(c.pools))
	var out model.Resources
	for name, r := range c.pools {
		if r.unlimited {
			return nil
		}
		inPools[name] = 0
	}
	for _, ni := range c.nodes {
		gpus := int64(len(ni.m.GPUs)) * model.MilliPerGPU
		if pool := ni.node.Labels[LabelNodePool]; pool != "" {
			if sum, limited := inPools[pool]; limited {
				inPools[pool] = sum + gpus
				continue
			}
		}
		out.GPUMilli += gpus
	}
	for name, sum := range inPools {
		out.GPUMilli += max(sum, c.pools[name].gpuMilli)
	}
	return &out
}

// LabelNodePool names, on a node Karpenter made, its NodePool.
const LabelNodePool = "karpenter.sh/nodepool"
