package ui

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/gpuplane/gpuplane/api/gpunode"
	"github.com/gpuplane/gpuplane/api/scheduling/v1alpha1"
	"github.com/gpuplane/gpuplane/internal/adapter"
)

// nodeExtra is what the page shows of a node that the scheduler's cache
// does not keep (its transform drops node conditions): readiness, the
// agent's quarantine, the pool and the labels that name its place.
type nodeExtra struct {
	// rv is the resourceVersion the extras were read from.
	rv          string
	ready       bool
	quarantine  string
	quarantined map[int]string
	pool        string
	product     string
	labels      map[string]string
	nvlink      string
}

// podExtra is what the page shows of a running pod that the scheduler's
// cache does not keep: when it started and how long it may run.
type podExtra struct {
	rv       string
	started  time.Time
	deadline time.Duration
	phase    corev1.PodPhase
}

// cluster is the objects the page is built from: the core's live view
// (adapter.Live, exactly what gpuplane-scheduler's cache keeps), stores
// of the nodes, pods, Queues and PodGroups, and what the page needs of
// nodes and pods beyond the scheduler's cache. Its handlers are an
// informer's, or are called directly (the benchmarks feed it).
type cluster struct {
	schedulerName string
	live          *adapter.Live
	poolLabels    []string

	mu         sync.Mutex
	nodeExtras map[string]*nodeExtra
	podExtras  map[string]*podExtra

	nodes, pods, queues, groups cache.Store

	// changed receives a token when anything the page shows changed.
	changed chan struct{}
	// unreadable lists the kinds the user's RBAC does not let it list.
	unreadable []string
}

func newCluster(schedulerName string, poolLabels []string) *cluster {
	return &cluster{schedulerName: schedulerName, live: adapter.NewLive(schedulerName), poolLabels: poolLabels,
		nodeExtras: map[string]*nodeExtra{}, podExtras: map[string]*podExtra{},
		nodes: cache.NewStore(cache.MetaNamespaceKeyFunc), pods: cache.NewStore(cache.MetaNamespaceKeyFunc),
		queues: cache.NewStore(cache.MetaNamespaceKeyFunc), groups: cache.NewStore(cache.MetaNamespaceKeyFunc),
		changed: make(chan struct{}, 1)}
}

func (c *cluster) poke() {
	select {
	case c.changed <- struct{}{}:
	default:
	}
}

// transform is the informers' transform: it records the node's and
// pod's extras, then trims the object as gpuplane-scheduler's informers
// do (adapter.ForCache).
func (c *cluster) transform(obj any) (any, error) {
	// An informer may transform one object twice (client-go's streaming
	// list transforms it into the reflector's store, then again in its
	// queue), the second time already trimmed: extras read from an
	// object are kept until a newer resourceVersion comes.
	switch o := obj.(type) {
	case *corev1.Node:
		c.mu.Lock()
		old := c.nodeExtras[o.Name]
		c.mu.Unlock()
		if old != nil && old.rv == o.ResourceVersion && o.ResourceVersion != "" {
			break
		}
		x := c.extraOf(o)
		c.mu.Lock()
		c.nodeExtras[o.Name] = x
		c.mu.Unlock()
	case *corev1.Pod:
		key := o.Namespace + "/" + o.Name
		c.mu.Lock()
		old := c.podExtras[key]
		c.mu.Unlock()
		if old != nil && old.rv == o.ResourceVersion && o.ResourceVersion != "" {
			break
		}
		x := &podExtra{rv: o.ResourceVersion, phase: o.Status.Phase}
		if o.Status.StartTime != nil {
			x.started = o.Status.StartTime.Time
		}
		if d := o.Spec.ActiveDeadlineSeconds; d != nil && *d > 0 && *d < 10*365*24*3600 {
			x.deadline = time.Duration(*d) * time.Second
		}
		c.mu.Lock()
		c.podExtras[key] = x
		c.mu.Unlock()
	}
	return adapter.ForCache(obj)
}

// topologyLabel says whether a node label names where the node sits.
func topologyLabel(k string) bool {
	return strings.HasPrefix(k, "topology.kubernetes.io/") || k == gpunode.LabelGPUClique ||
		strings.Contains(k, "rack") || strings.Contains(k, "block") || strings.Contains(k, "spine") || strings.Contains(k, "superpod")
}

func (c *cluster) extraOf(n *corev1.Node) *nodeExtra {
	x := &nodeExtra{rv: n.ResourceVersion, product: n.Labels[gpunode.LabelGPUProduct], labels: map[string]string{}}
	for _, k := range c.poolLabels {
		if v := n.Labels[k]; v != "" {
			x.pool = v
			break
		}
	}
	for k, v := range n.Labels {
		if topologyLabel(k) {
			x.labels[k] = v
		}
	}
	for _, cond := range n.Status.Conditions {
		switch cond.Type {
		case corev1.NodeReady:
			x.ready = cond.Status == corev1.ConditionTrue
		case gpunode.ConditionGPUQuarantine:
			if cond.Status == corev1.ConditionTrue {
				x.quarantine = cond.Message
			}
		}
	}
	if s := n.Annotations[gpunode.QuarantineAnnotation]; s != "" {
		if r, err := gpunode.ParseQuarantine(s); err == nil {
			x.quarantined = map[int]string{}
			for _, g := range r.GPUs {
				if g.State == gpunode.QuarantineReturned {
					continue
				}
				x.quarantined[g.Index] = fmt.Sprintf("XID %d, %s", g.XID, g.State)
			}
		} else {
			x.quarantine = strings.TrimSpace(x.quarantine + " (unreadable record: " + err.Error() + ")")
		}
	}
	if s := n.Annotations[gpunode.TopologyAnnotation]; s != "" {
		if t, err := gpunode.ParseTopology(s); err == nil {
			var parts []string
			for _, g := range t.Groups {
				if len(g.GPUs) < 2 {
					continue
				}
				parts = append(parts, fmt.Sprintf("GPUs %s x%d links", ranges(g.GPUs), g.NVLinks))
			}
			x.nvlink = strings.Join(parts, "; ")
		} else {
			x.nvlink = "unreadable: " + err.Error()
		}
	}
	return x
}

// ranges writes sorted GPU indexes compactly: 0-3,6.
func ranges(xs []int) string {
	var b strings.Builder
	for i := 0; i < len(xs); {
		j := i
		for j+1 < len(xs) && xs[j+1] == xs[j]+1 {
			j++
		}
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(xs[i]))
		if j > i {
			b.WriteString("-" + strconv.Itoa(xs[j]))
		}
		i = j + 1
	}
	return b.String()
}

// upsert and remove are the handlers: each object goes to the core's
// view and, for the kinds the page lists, to its store.
func (c *cluster) upsert(obj any) {
	o, ok := obj.(runtime.Object)
	if !ok {
		return
	}
	if u, ok := o.(*unstructured.Unstructured); ok {
		typed, err := adapter.DecodeScheduling(u)
		if err != nil {
			return
		}
		o = typed
	}
	if err := c.live.Upsert(o); err != nil {
		return
	}
	if s := c.storeOf(o); s != nil {
		_ = s.Update(o)
	}
	c.poke()
}

func (c *cluster) remove(obj any) {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	o, ok := obj.(runtime.Object)
	if !ok {
		return
	}
	if u, ok := o.(*unstructured.Unstructured); ok {
		typed, err := adapter.DecodeScheduling(u)
		if err != nil {
			return
		}
		o = typed
	}
	_ = c.live.Delete(o)
	if s := c.storeOf(o); s != nil {
		_ = s.Delete(o)
	}
	c.mu.Lock()
	switch o := o.(type) {
	case *corev1.Node:
		delete(c.nodeExtras, o.Name)
	case *corev1.Pod:
		delete(c.podExtras, o.Namespace+"/"+o.Name)
	}
	c.mu.Unlock()
	c.poke()
}

func (c *cluster) storeOf(o runtime.Object) cache.Store {
	switch o.(type) {
	case *corev1.Node:
		return c.nodes
	case *corev1.Pod:
		return c.pods
	case *v1alpha1.Queue:
		return c.queues
	case *v1alpha1.PodGroup:
		return c.groups
	}
	return nil
}

// watch starts informers over what the page and the core's view read,
// with the user's own credentials, and returns once they have listed
// everything. Nodes and pods are required; a kind the user may not list
// (RBAC) or the cluster does not serve is left out and named in
// c.unreadable, so that the page can say what it does not see.
func (c *cluster) watch(ctx context.Context, client kubernetes.Interface, dyn dynamic.Interface) error {
	factory := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithTransform(c.transform))
	dfactory := dynamicinformer.NewDynamicSharedInformerFactory(dyn, 0)
	h := cache.ResourceEventHandlerFuncs{AddFunc: c.upsert, UpdateFunc: func(_, o any) { c.upsert(o) }, DeleteFunc: c.remove}
	var infs []cache.SharedIndexInformer
	for _, k := range adapter.Kinds() {
		what := k.Resource.GroupResource().String()
		if _, err := dyn.Resource(k.Resource).List(ctx, metav1.ListOptions{Limit: 1}); err != nil {
			switch {
			case k.Resource.Resource == "nodes" || k.Resource.Resource == "pods":
				return fmt.Errorf("listing %s (gpuplane ui reads them with your kubeconfig's credentials): %w", what, err)
			case apierrors.IsForbidden(err) || apierrors.IsNotFound(err) || apierrors.IsMethodNotSupported(err):
				c.unreadable = append(c.unreadable, what)
				continue
			default:
				return fmt.Errorf("listing %s: %w", what, err)
			}
		}
		inf := k.Informer(factory, dfactory)
		_ = inf.SetTransform(c.transform)
		infs = append(infs, inf)
	}
	for _, inf := range infs {
		if _, err := inf.AddEventHandler(h); err != nil {
			return fmt.Errorf("registering an informer handler: %w", err)
		}
	}
	factory.Start(ctx.Done())
	dfactory.Start(ctx.Done())
	synced := make([]cache.InformerSynced, len(infs))
	for i, inf := range infs {
		synced[i] = inf.HasSynced
	}
	if !cache.WaitForCacheSync(ctx.Done(), synced...) {
		if err := context.Cause(ctx); err != nil && !errors.Is(err, context.Canceled) {
			return fmt.Errorf("reading the cluster: %w", err)
		}
		return context.Cause(ctx)
	}
	return nil
}
