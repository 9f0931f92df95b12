package agent

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/tools/cache"
)

// watchNodeKeys follows one Node until ctx ends, calling on with it, as
// added and on every update, with only the named labels and annotations
// kept: each part of the agent that reads the Node keeps nothing else of
// it. It returns whether the watch has synced.
func watchNodeKeys(ctx context.Context, c *nodeClient, node string, labels, annotations []string, on func(*corev1.Node)) (synced func() bool) {
	lw := cache.NewListWatchFromClient(c.rest, "nodes", metav1.NamespaceAll, fields.OneTermEqualSelector("metadata.name", node))
	handle := func(obj any) {
		if n, ok := obj.(*corev1.Node); ok {
			on(n)
		}
	}
	keep := func(from map[string]string, keys []string) map[string]string {
		var out map[string]string
		for _, k := range keys {
			if v, ok := from[k]; ok {
				if out == nil {
					out = make(map[string]string, len(keys))
				}
				out[k] = v
			}
		}
		return out
	}
	_, ctrl := cache.NewInformerWithOptions(cache.InformerOptions{
		ListerWatcher: lw, ObjectType: &corev1.Node{},
		Transform: func(obj any) (any, error) {
			n, ok := obj.(*corev1.Node)
			if !ok {
				return obj, nil
			}
			return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n.Name, ResourceVersion: n.ResourceVersion,
				Labels: keep(n.Labels, labels), Annotations: keep(n.Annotations, annotations)}}, nil
		},
		Handler: cache.ResourceEventHandlerFuncs{AddFunc: handle, UpdateFunc: func(_, obj any) { handle(obj) }},
	})
	go ctrl.RunWithContext(ctx)
	return ctrl.HasSynced
}
