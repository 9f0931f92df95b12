package agent

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
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

// cached returns the pods as the watch last showed them; none until the
// first list returns.
func (w *nodePods) cached() []*corev1.Pod {
	objs := w.store.List()
	out := make([]*corev1.Pod, 0, len(objs))
	for _, o := range objs {
		if p, ok := o.(*corev1.Pod); ok {
			out = append(out, p)
		}
	}
	return out
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
	return out, nil
}

// listTimeout bounds a fresh list of the node's pods during an admission.
const listTimeout = 2 * time.Second

// watchNodePods lists and watches the pods bound to node, keeping of each
// only what the steerer reads, until ctx ends.
func watchNodePods(ctx context.Context, cfg *rest.Config, node string, log *slog.Logger) (*nodePods, error) {
	c, err := newNodeClient(cfg)
	if err != nil {
		return nil, err
	}
	lw := cache.NewListWatchFromClient(c.rest, "pods", metav1.NamespaceAll, fields.OneTermEqualSelector("spec.nodeName", node))
	store, ctrl := cache.NewInformerWithOptions(cache.InformerOptions{
		ListerWatcher: lw, ObjectType: &corev1.Pod{}, Handler: cache.ResourceEventHandlerFuncs{}, Transform: slimPod,
	})
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
	return &nodePods{store: store, lw: lw, client: c.rest}, nil
}

// slimPod keeps of a pod what the steerer and the recorder read:
// identity, age, deletion, the scheduler's GPU choice and the node's
// record, its containers' resources and the phase.
func slimPod(obj any) (any, error) {
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return obj, nil
	}
	out := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{
		Name: p.Name, Namespace: p.Namespace, UID: p.UID, ResourceVersion: p.ResourceVersion,
		CreationTimestamp: p.CreationTimestamp, DeletionTimestamp: p.DeletionTimestamp,
	}}
	for _, k := range []string{gpupod.GPUsAnnotation, gpupod.HeldAnnotation} {
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
