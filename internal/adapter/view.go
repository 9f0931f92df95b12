package adapter

import (
	"fmt"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	resourceapi "k8s.io/api/resource/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/gpuplane/gpuplane/api/scheduling/v1alpha1"
	"github.com/gpuplane/gpuplane/internal/scheduler/model"
)

// View is the core's view of a cluster as one cycle of gpuplane-scheduler
// builds it: the snapshot the core is handed, and what the adapter keeps
// from the core before it (pods held back by what they say, nodes left out
// for what they state).
type View struct {
	// Snapshot is what the core is given: the nodes (with the labels of
	// the pending pods' predicate classes), the running allocations by
	// node, the pending groups and the queues.
	Snapshot model.Snapshot
	// Held says, by namespace/name, why a pending pod of the scheduler's
	// is not offered to the core (its spec, its group or its claims).
	Held map[string]string
	// LeftOut says, by name, why a node is left out of scheduling.
	LeftOut map[string]string
}

// ViewOf builds the core's view of objs exactly as a cycle of
// gpuplane-scheduler named schedulerName builds it from its informers:
// each object through the informers' transform (forCache) into a cache of
// its own, by the same handler its informer calls, then the snapshot
// builder over that cache at time now. It needs no API server, so what
// the core is given for a set of objects can be looked at offline (the
// differential test in test/conformance compares the core's feasible
// nodes with kube-scheduler's on it). A running scheduler builds the same
// view incrementally; the cache's property test checks that the two
// agree. objs are not modified. A kind the scheduler does not read is an
// error naming it: leaving it out would describe a cluster the scheduler
// never sees.
func ViewOf(schedulerName string, objs []runtime.Object, now time.Time) (*View, error) {
	c := newClusterCache(schedulerName)
	for i, o := range objs {
		slim, err := forCache(o.DeepCopyObject())
		if err != nil {
			return nil, fmt.Errorf("objs[%d]: %w", i, err)
		}
		switch o := slim.(type) {
		case *corev1.Node:
			c.upsertNode(o)
		case *corev1.Pod:
			c.upsertPod(o)
		case *corev1.Namespace:
			c.upsertNamespace(o)
		case *schedulingv1.PriorityClass:
			c.upsertPriorityClass(o)
		case *policyv1.PodDisruptionBudget:
			c.upsertPDB(o)
		case *resourceapi.ResourceSlice:
			c.upsertSlice(o)
		case *resourceapi.DeviceClass:
			c.upsertClass(o)
		case *resourceapi.ResourceClaim:
			c.upsertClaim(o)
		case *corev1.PersistentVolume:
			c.upsertPV(o)
		case *corev1.PersistentVolumeClaim:
			c.upsertPVC(o)
		case *storagev1.StorageClass:
			c.upsertStorageClass(o)
		case *storagev1.CSINode:
			c.upsertCSINode(o)
		case *storagev1.VolumeAttachment:
			c.upsertVolumeAttachment(o)
		case *v1alpha1.Queue:
			c.upsertQueue(o)
		case *v1alpha1.PodGroup:
			c.upsertPodGroup(o)
		case *v1alpha1.Topology:
			c.upsertTopology(o)
		case *unstructured.Unstructured:
			// Kueue's and KAI's Topologies, which the scheduler reads
			// through dynamic informers.
			src, ok := foreignTopologySource(o.GroupVersionKind().Group, o.GetKind())
			if !ok {
				return nil, fmt.Errorf("objs[%d]: gpuplane-scheduler does not read a %s", i, o.GroupVersionKind())
			}
			upsert, _ := c.foreignTopology(src)
			upsert(o)
		default:
			return nil, fmt.Errorf("objs[%d]: gpuplane-scheduler does not read a %T", i, o)
		}
	}
	in := c.snapshot(newBuilder(schedulerName, -1, logr.Discard()), newRefusals(), now)
	v := &View{Snapshot: in.snap, Held: map[string]string{}, LeftOut: map[string]string{}}
	for _, pi := range in.badPods {
		v.Held[pi.key] = pi.bad.Msg
	}
	for _, g := range in.groups {
		if g.held == nil {
			continue
		}
		for _, pi := range g.pending {
			v.Held[pi.key] = g.held.Msg
		}
	}
	for name, p := range c.badNodes {
		v.LeftOut[name] = p.msg
	}
	return v, nil
}
