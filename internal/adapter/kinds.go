package adapter

import (
	"fmt"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	resourceapi "k8s.io/api/resource/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"

	"github.com/gpuplane/gpuplane/api/scheduling/v1alpha1"
)

// Kind is one kind of object gpuplane-scheduler reads from the cluster.
type Kind struct {
	// Resource names the kind as the API serves it.
	Resource schema.GroupVersionResource
	// DRA marks the kinds read only where the cluster serves dynamic
	// resource allocation.
	DRA      bool
	informer func(informers.SharedInformerFactory, dynamicinformer.DynamicSharedInformerFactory) cache.SharedIndexInformer
}

// Informer returns the kind's informer from the factories: the typed one
// for Kubernetes' own kinds, the dynamic one for gpuplane's.
func (k Kind) Informer(f informers.SharedInformerFactory, df dynamicinformer.DynamicSharedInformerFactory) cache.SharedIndexInformer {
	return k.informer(f, df)
}

// kinds is every kind the scheduler's cache is fed from, nodes and pods
// first. Kueue's and KAI's Topologies (read where served, found by a
// re-check) and GroupingRules (read by the grouper) are watched apart.
var kinds = []Kind{
	{Resource: corev1.SchemeGroupVersion.WithResource("nodes"),
		informer: func(f informers.SharedInformerFactory, _ dynamicinformer.DynamicSharedInformerFactory) cache.SharedIndexInformer {
			return f.Core().V1().Nodes().Informer()
		}},
	{Resource: corev1.SchemeGroupVersion.WithResource("pods"),
		informer: func(f informers.SharedInformerFactory, _ dynamicinformer.DynamicSharedInformerFactory) cache.SharedIndexInformer {
			return f.Core().V1().Pods().Informer()
		}},
	{Resource: corev1.SchemeGroupVersion.WithResource("namespaces"),
		informer: func(f informers.SharedInformerFactory, _ dynamicinformer.DynamicSharedInformerFactory) cache.SharedIndexInformer {
			return f.Core().V1().Namespaces().Informer()
		}},
	{Resource: schedulingv1.SchemeGroupVersion.WithResource("priorityclasses"),
		informer: func(f informers.SharedInformerFactory, _ dynamicinformer.DynamicSharedInformerFactory) cache.SharedIndexInformer {
			return f.Scheduling().V1().PriorityClasses().Informer()
		}},
	{Resource: policyv1.SchemeGroupVersion.WithResource("poddisruptionbudgets"),
		informer: func(f informers.SharedInformerFactory, _ dynamicinformer.DynamicSharedInformerFactory) cache.SharedIndexInformer {
			return f.Policy().V1().PodDisruptionBudgets().Informer()
		}},
	// Volumes: what VolumeBinding, VolumeZone, VolumeRestrictions and
	// NodeVolumeLimits read (volumes.go).
	{Resource: corev1.SchemeGroupVersion.WithResource("persistentvolumes"),
		informer: func(f informers.SharedInformerFactory, _ dynamicinformer.DynamicSharedInformerFactory) cache.SharedIndexInformer {
			return f.Core().V1().PersistentVolumes().Informer()
		}},
	{Resource: corev1.SchemeGroupVersion.WithResource("persistentvolumeclaims"),
		informer: func(f informers.SharedInformerFactory, _ dynamicinformer.DynamicSharedInformerFactory) cache.SharedIndexInformer {
			return f.Core().V1().PersistentVolumeClaims().Informer()
		}},
	{Resource: storagev1.SchemeGroupVersion.WithResource("storageclasses"),
		informer: func(f informers.SharedInformerFactory, _ dynamicinformer.DynamicSharedInformerFactory) cache.SharedIndexInformer {
			return f.Storage().V1().StorageClasses().Informer()
		}},
	{Resource: storagev1.SchemeGroupVersion.WithResource("csinodes"),
		informer: func(f informers.SharedInformerFactory, _ dynamicinformer.DynamicSharedInformerFactory) cache.SharedIndexInformer {
			return f.Storage().V1().CSINodes().Informer()
		}},
	{Resource: storagev1.SchemeGroupVersion.WithResource("volumeattachments"),
		informer: func(f informers.SharedInformerFactory, _ dynamicinformer.DynamicSharedInformerFactory) cache.SharedIndexInformer {
			return f.Storage().V1().VolumeAttachments().Informer()
		}},
	{Resource: v1alpha1.QueuesResource,
		informer: func(_ informers.SharedInformerFactory, df dynamicinformer.DynamicSharedInformerFactory) cache.SharedIndexInformer {
			return df.ForResource(v1alpha1.QueuesResource).Informer()
		}},
	{Resource: v1alpha1.PodGroupsResource,
		informer: func(_ informers.SharedInformerFactory, df dynamicinformer.DynamicSharedInformerFactory) cache.SharedIndexInformer {
			return df.ForResource(v1alpha1.PodGroupsResource).Informer()
		}},
	{Resource: v1alpha1.TopologiesResource,
		informer: func(_ informers.SharedInformerFactory, df dynamicinformer.DynamicSharedInformerFactory) cache.SharedIndexInformer {
			return df.ForResource(v1alpha1.TopologiesResource).Informer()
		}},
	// DRA: the devices gpuplane's driver publishes, the classes claims
	// select through, and the claims of the pods it schedules.
	{Resource: resourceapi.SchemeGroupVersion.WithResource("resourceslices"), DRA: true,
		informer: func(f informers.SharedInformerFactory, _ dynamicinformer.DynamicSharedInformerFactory) cache.SharedIndexInformer {
			return f.Resource().V1().ResourceSlices().Informer()
		}},
	{Resource: resourceapi.SchemeGroupVersion.WithResource("deviceclasses"), DRA: true,
		informer: func(f informers.SharedInformerFactory, _ dynamicinformer.DynamicSharedInformerFactory) cache.SharedIndexInformer {
			return f.Resource().V1().DeviceClasses().Informer()
		}},
	{Resource: resourceapi.SchemeGroupVersion.WithResource("resourceclaims"), DRA: true,
		informer: func(f informers.SharedInformerFactory, _ dynamicinformer.DynamicSharedInformerFactory) cache.SharedIndexInformer {
			return f.Resource().V1().ResourceClaims().Informer()
		}},
}

// Kinds returns the kinds gpuplane-scheduler's cache is fed from, nodes
// and pods first, so that a process keeping a Live view watches exactly
// what the scheduler watches.
func Kinds() []Kind { return append([]Kind(nil), kinds...) }

// DecodeScheduling turns an unstructured gpuplane scheduling object (a
// dynamic informer's) into its type, as the scheduler's cache holds it. Any other object, Kueue's and KAI's
// Topologies included, is returned as it is.
func DecodeScheduling(u *unstructured.Unstructured) (runtime.Object, error) {
	if u.GroupVersionKind().Group != v1alpha1.GroupName {
		return u, nil
	}
	var obj runtime.Object
	switch u.GetKind() {
	case "Queue":
		obj = &v1alpha1.Queue{}
	case "PodGroup":
		obj = &v1alpha1.PodGroup{}
	case "Topology":
		obj = &v1alpha1.Topology{}
	default:
		return u, nil
	}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, obj); err != nil {
		return nil, fmt.Errorf("decoding %s %s: %w", u.GetKind(), u.GetName(), err)
	}
	return obj, nil
}

// apply hands one object, already through the informers' transform, to
// the handler of its kind.
func (c *clusterCache) apply(o runtime.Object, upsert bool) error {
	switch o := o.(type) {
	case *corev1.Node:
		if upsert {
			c.upsertNode(o)
		} else {
			c.deleteNode(o)
		}
	case *corev1.Pod:
		if upsert {
			c.upsertPod(o)
		} else {
			c.deletePod(o)
		}
	case *corev1.Namespace:
		if upsert {
			c.upsertNamespace(o)
		} else {
			c.deleteNamespace(o)
		}
	case *schedulingv1.PriorityClass:
		if upsert {
			c.upsertPriorityClass(o)
		} else {
			c.deletePriorityClass(o)
		}
	case *policyv1.PodDisruptionBudget:
		if upsert {
			c.upsertPDB(o)
		} else {
			c.deletePDB(o)
		}
	case *corev1.PersistentVolume:
		if upsert {
			c.upsertPV(o)
		} else {
			c.deletePV(o)
		}
	case *corev1.PersistentVolumeClaim:
		if upsert {
			c.upsertPVC(o)
		} else {
			c.deletePVC(o)
		}
	case *storagev1.StorageClass:
		if upsert {
			c.upsertStorageClass(o)
		} else {
			c.deleteStorageClass(o)
		}
	case *storagev1.CSINode:
		if upsert {
			c.upsertCSINode(o)
		} else {
			c.deleteCSINode(o)
		}
	case *storagev1.VolumeAttachment:
		if upsert {
			c.upsertVolumeAttachment(o)
		} else {
			c.deleteVolumeAttachment(o)
		}
	case *resourceapi.ResourceSlice:
		if upsert {
			c.upsertSlice(o)
		} else {
			c.deleteSlice(o)
		}
	case *resourceapi.DeviceClass:
		if upsert {
			c.upsertClass(o)
		} else {
			c.deleteClass(o)
		}
	case *resourceapi.ResourceClaim:
		if upsert {
			c.upsertClaim(o)
		} else {
			c.deleteClaim(o)
		}
	case *v1alpha1.Queue:
		if upsert {
			c.upsertQueue(o)
		} else {
			c.deleteQueue(o)
		}
	case *v1alpha1.PodGroup:
		if upsert {
			c.upsertPodGroup(o)
		} else {
			c.deletePodGroup(o)
		}
	case *v1alpha1.Topology:
		if upsert {
			c.upsertTopology(o)
		} else {
			c.deleteTopology(o)
		}
	case *unstructured.Unstructured:
		typed, err := DecodeScheduling(o)
		if err != nil {
			return err
		}
		if typed != runtime.Object(o) {
			return c.apply(typed, upsert)
		}
		// Kueue's and KAI's Topologies, which the scheduler reads
		// through dynamic informers.
		src, ok := foreignTopologySource(o.GroupVersionKind().Group, o.GetKind())
		if !ok {
			return fmt.Errorf("gpuplane-scheduler does not read a %s", o.GroupVersionKind())
		}
		up, del := c.foreignTopology(src)
		if upsert {
			up(o)
		} else {
			del(o)
		}
	default:
		return fmt.Errorf("gpuplane-scheduler does not read a %T", o)
	}
	return nil
}

// kindHandler is the informers' handler for every kind in kinds: each
// object goes through apply; one that cannot be decoded is logged and
// left out until it is fixed.
func (c *clusterCache) kindHandler(log logr.Logger) cache.ResourceEventHandler {
	do := func(obj any, upsert bool) {
		if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = t.Obj
		}
		o, ok := obj.(runtime.Object)
		if !ok {
			return
		}
		if err := c.apply(o, upsert); err != nil {
			log.Error(err, "reading an object; it is ignored until fixed")
		}
	}
	return cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { do(obj, true) },
		UpdateFunc: func(_, obj any) { do(obj, true) },
		DeleteFunc: func(obj any) { do(obj, false) },
	}
}
