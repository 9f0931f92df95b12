package agent

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/gpuplane/gpuplane/api/gpupod"
	"github.com/gpuplane/gpuplane/internal/steer"
)

// nodePods is the pods bound to a node, which the steer package reads to
// give pods the GPUs gpuplane-scheduler chose: as a watch keeps them, and
// as the API server lists them now.
type nodePods struct {
	store  cache.Store
	lw     *cache.ListWatch
	client rest.Interface

	mu sync.Mutex
	// arrived numbers the pods in the order the watch showed them bound
	// to the node: the order the kubelet's own watch sees them, and so
	// the order it admits them in.
	arrived map[types.UID]uint64
	seq     uint64
}

func (w *nodePods) arrive(obj any) {
	if p, ok := obj.(*corev1.Pod); ok {
		w.mu.Lock()
		if _, seen := w.arrived[p.UID]; !seen {
			w.seq++
			w.arrived[p.UID] = w.seq
		}
		w.mu.Unlock()
	}
}

func (w *nodePods) leave(obj any) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	if p, ok := obj.(*corev1.Pod); ok {
		w.mu.Lock()
		delete(w.arrived, p.UID)
		w.mu.Unlock()
	}
}

// inArrivalOrder sorts pods in the order the watch showed them bound; pods
// it has not shown yet come last, oldest first.
func (w *nodePods) inArrivalOrder(pods []*corev1.Pod) {
	w.mu.Lock()
	defer w.mu.Unlock()
	order := func(p *corev1.Pod) uint64 {
		if n, ok := w.arrived[p.UID]; ok {
			return n
		}
		return math.MaxUint64
	}
	slices.SortStableFunc(pods, func(a, b *corev1.Pod) int {
		return cmp.Or(cmp.Compare(order(a), order(b)), a.CreationTimestamp.Compare(b.CreationTimestamp.Time))
	})
}

// patchHeld writes (or removes, for "") the node's record of the GPUs a
// pod holds (steer.Patcher).
func (w *nodePods) patchHeld(ctx context.Context, namespace, name string, uid types.UID, value string) error {
	body, err := steer.HeldPatch(uid, value)
	if err != nil {
		return err
	}
	return w.client.Patch(types.MergePatchType).Namespace(namespace).Resource("pods").Name(name).Body(body).Do(ctx).Error()
}

// cached returns the pods as the watch last showed them, in the order it
// showed them bound; none until the first list returns.
func (w *nodePods) cached() []*corev1.Pod {
	objs := w.store.List()
	out := make([]*corev1.Pod, 0, len(objs))
	for _, o := range objs {
		if p, ok := o.(*corev1.Pod); ok {
			out = append(out, p)
		}
	}
	w.inArrivalOrder(out)
	return out
}

// byKey returns a pod bound to the node by namespace and name.
func (w *nodePods) byKey(namespace, name string) (*corev1.Pod, bool) {
	obj, ok, err := w.store.GetByKey(namespace + "/" + name)
	if err != nil || !ok {
		return nil, false
	}
	p, ok := obj.(*corev1.Pod)
	return p, ok
}

// byUID returns a pod bound to the node by UID.
func (w *nodePods) byUID(uid types.UID) (*corev1.Pod, bool) {
	for _, o := range w.store.List() {
		if p, ok := o.(*corev1.Pod); ok && p.UID == uid {
			return p, true
		}
	}
	return nil, false
}

// uidOf is the UID of a pod bound to the node (metrics.Options.PodUID).
func (w *nodePods) uidOf(namespace, name string) (string, bool) {
	p, ok := w.byKey(namespace, name)
	if !ok {
		return "", false
	}
	return string(p.UID), true
}

// queueOf is the Queue gpuplane-scheduler recorded on a pod bound to the
// node (metrics.Options.QueueOf). The annotation is read as untrusted: a
// value that is not a Queue's name is left out.
func (w *nodePods) queueOf(namespace, name string) (string, bool) {
	p, ok := w.byKey(namespace, name)
	if !ok {
		return "", false
	}
	q := p.Annotations[gpupod.QueueAnnotation]
	if q == "" || len(validation.IsDNS1123Subdomain(q)) > 0 {
		return "", false
	}
	return q, true
}

// chargedShare is the part of GPU gpu that gpuplane-scheduler gave a pod
// bound to the node which asked for part of a GPU: the share its choice
// (gpupod.GPUsAnnotation, which the node honours) names on that GPU. ok is
// false for a pod that asked for replicas, not a part, or whose choice
// names no share of the GPU.
func (w *nodePods) chargedShare(namespace, name string, gpu int) (float64, bool) {
	p, ok := w.byKey(namespace, name)
	if !ok {
		return 0, false
	}
	if _, asked, err := gpupod.ReadFraction(p.Annotations, podLimits(p)); err != nil || !asked {
		return 0, false
	}
	choice, err := gpupod.ParseGPUs(p.Annotations[gpupod.GPUsAnnotation], maxNodeGPUs)
	if err != nil {
		return 0, false
	}
	for _, c := range choice {
		if c.Index == gpu && c.MIGSlices == 0 && c.Milli > 0 && c.Milli < gpupod.MilliPerGPU {
			return float64(c.Milli) / gpupod.MilliPerGPU, true
		}
	}
	return 0, false
}

// maxNodeGPUs bounds the GPU indexes read from a pod's annotations.
const maxNodeGPUs = 1024

// podLimits sums the limits of a pod's containers.
func podLimits(p *corev1.Pod) corev1.ResourceList {
	limits := corev1.ResourceList{}
	for _, c := range p.Spec.Containers {
		for name, q := range c.Resources.Limits {
			sum := limits[name]
			sum.Add(q)
			limits[name] = sum
		}
	}
	return limits
}

// memoryLimitOf is the GPU memory, in MiB, a pod bound to the node asked
// for when it asked for part of a GPU (metrics.Options.MemoryLimitOf).
func (w *nodePods) memoryLimitOf(namespace, name string) (int64, bool) {
	p, ok := w.byKey(namespace, name)
	if !ok {
		return 0, false
	}
	f, asked, err := gpupod.ReadFraction(p.Annotations, podLimits(p))
	if err != nil || !asked || f.MemoryMiB == 0 {
		return 0, false
	}
	return f.MemoryMiB, true
}

// list reads the node's pods from the API server, a consistent read that
// holds every pod bound so far.
func (w *nodePods) list() ([]*corev1.Pod, error) {
	ctx, cancel := context.WithTimeout(context.Background(), listTimeout)
	defer cancel()
	obj, err := w.lw.ListWithContext(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	l, ok := obj.(*corev1.PodList)
	if !ok {
		return nil, fmt.Errorf("listing pods: got %T", obj)
	}
	out := make([]*corev1.Pod, 0, len(l.Items))
	for i := range l.Items {
		p, _ := slimPod(&l.Items[i])
		out = append(out, p.(*corev1.Pod))
	}
	w.inArrivalOrder(out)
	return out, nil
}

// listTimeout bounds a fresh list of the node's pods during an admission.
const listTimeout = time.Second

// watchNodePods lists and watches the pods bound to node, keeping of each
// only what the steerer reads, until ctx ends.
func watchNodePods(ctx context.Context, cfg *rest.Config, node string, log *slog.Logger) (*nodePods, error) {
	c, err := newNodeClient(cfg)
	if err != nil {
		return nil, err
	}
	w := &nodePods{client: c.rest, arrived: map[types.UID]uint64{}}
	w.lw = cache.NewListWatchFromClient(c.rest, "pods", metav1.NamespaceAll, fields.OneTermEqualSelector("spec.nodeName", node))
	store, ctrl := cache.NewInformerWithOptions(cache.InformerOptions{
		ListerWatcher: w.lw, ObjectType: &corev1.Pod{}, Transform: slimPod,
		Handler: cache.ResourceEventHandlerFuncs{AddFunc: w.arrive, DeleteFunc: w.leave},
	})
	w.store = store
	go ctrl.RunWithContext(ctx)
	go func() {
		// Say once whether the watch works: without it pods get the
		// devices their resource prefers, not the scheduler's choice.
		wait, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		switch {
		case cache.WaitForCacheSync(wait.Done(), ctrl.HasSynced):
			log.Info("watching the node's pods: containers get the GPUs gpuplane-scheduler chose", "node", node)
		case ctx.Err() == nil:
			log.Warn("the node's pods are not listed yet (RBAC: list and watch pods): containers get the GPUs their resource prefers until they are", "node", node)
		}
	}()
	return w, nil
}

// slimPod keeps of a pod what the steerer and the recorder read:
// identity, age, deletion, the scheduler's GPU choice, the node's record
// and the part of a GPU asked for, its containers' resources and the
// phase.
func slimPod(obj any) (any, error) {
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return obj, nil
	}
	out := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{
		Name: p.Name, Namespace: p.Namespace, UID: p.UID, ResourceVersion: p.ResourceVersion,
		CreationTimestamp: p.CreationTimestamp, DeletionTimestamp: p.DeletionTimestamp,
	}}
	for _, k := range []string{gpupod.GPUsAnnotation, gpupod.HeldAnnotation, gpupod.FractionAnnotation, gpupod.MemoryAnnotation, gpupod.KAIFraction, gpupod.KAIMemory, gpupod.QueueAnnotation} {
		if v, ok := p.Annotations[k]; ok && len(v) <= 1024 {
			if out.Annotations == nil {
				out.Annotations = map[string]string{}
			}
			out.Annotations[k] = v
		}
	}
	out.Spec.NodeName = p.Spec.NodeName
	out.Spec.InitContainers = slimContainers(p.Spec.InitContainers)
	out.Spec.Containers = slimContainers(p.Spec.Containers)
	out.Status.Phase = p.Status.Phase
	return out, nil
}

// slimContainers keeps of each container its resources, which tell the
// steerer how many devices each asks for.
func slimContainers(cs []corev1.Container) []corev1.Container {
	if len(cs) == 0 {
		return nil
	}
	out := make([]corev1.Container, len(cs))
	for i := range cs {
		out[i] = corev1.Container{Name: cs[i].Name, Resources: corev1.ResourceRequirements{Limits: cs[i].Resources.Limits, Requests: cs[i].Resources.Requests}}
	}
	return out
}
