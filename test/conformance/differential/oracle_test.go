package differential

import (
	"context"
	"fmt"
	"slices"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	resourceslicetracker "k8s.io/dynamic-resource-allocation/resourceslice/tracker"
	fwk "k8s.io/kube-scheduler/framework"
	kubefeatures "k8s.io/kubernetes/pkg/features"
	"k8s.io/kubernetes/pkg/scheduler/apis/config/latest"
	internalcache "k8s.io/kubernetes/pkg/scheduler/backend/cache"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	frameworkplugins "k8s.io/kubernetes/pkg/scheduler/framework/plugins"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/dynamicresources"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/nodevolumelimits"
	frameworkruntime "k8s.io/kubernetes/pkg/scheduler/framework/runtime"
	"k8s.io/kubernetes/pkg/scheduler/metrics"
	"k8s.io/kubernetes/pkg/scheduler/util/assumecache"
)

// oracle is kube-scheduler v1.36.3's filtering, built as kube-scheduler
// builds it: the in-tree plugin registry, the default profile of the
// default configuration (every Filter plugin it enables, with its default
// arguments and the default feature gates), the informer factory, DRA
// manager and CSI manager the plugins read, and a snapshot of NodeInfos
// that each case replaces.
type oracle struct {
	fw       framework.Framework
	snapshot *swappableSnapshot
}

// swappableSnapshot is the framework's shared lister: kube-scheduler
// updates one snapshot in place before each cycle; here each case brings
// a snapshot of its own.
type swappableSnapshot struct{ cur *internalcache.Snapshot }

func (s *swappableSnapshot) NodeInfos() fwk.NodeInfoLister       { return s.cur.NodeInfos() }
func (s *swappableSnapshot) StorageInfos() fwk.StorageInfoLister { return s.cur.StorageInfos() }
func (s *swappableSnapshot) PodGroupStates() fwk.PodGroupStateLister {
	return s.cur.PodGroupStates()
}

func newOracle(ctx context.Context) (*oracle, error) {
	cfg, err := latest.Default()
	if err != nil {
		return nil, fmt.Errorf("kube-scheduler's default configuration: %w", err)
	}
	if len(cfg.Profiles) != 1 {
		return nil, fmt.Errorf("kube-scheduler's default configuration has %d profiles, want 1", len(cfg.Profiles))
	}
	// The framework records plugin metrics, which kube-scheduler
	// registers before it builds its profiles.
	metrics.Register()
	client := fake.NewClientset(namespaceObjects()...)
	factory := informers.NewSharedInformerFactory(client, 0)
	logger := logr.Discard()
	var draManager fwk.SharedDRAManager
	if utilfeature.DefaultFeatureGate.Enabled(kubefeatures.DynamicResourceAllocation) {
		claims := assumecache.NewAssumeCache(logger, factory.Resource().V1().ResourceClaims().Informer(), "ResourceClaim", "", nil)
		opts := resourceslicetracker.Options{
			EnableDeviceTaintRules:   utilfeature.DefaultFeatureGate.Enabled(kubefeatures.DRADeviceTaintRules),
			EnableConsumableCapacity: utilfeature.DefaultFeatureGate.Enabled(kubefeatures.DRAConsumableCapacity),
			SliceInformer:            factory.Resource().V1().ResourceSlices(),
			KubeClient:               client,
		}
		if opts.EnableDeviceTaintRules {
			opts.TaintInformer = factory.Resource().V1beta2().DeviceTaintRules()
			opts.ClassInformer = factory.Resource().V1().DeviceClasses()
		}
		tracker, err := resourceslicetracker.StartTracker(ctx, opts)
		if err != nil {
			return nil, fmt.Errorf("starting the ResourceSlice tracker: %w", err)
		}
		draManager = dynamicresources.NewDRAManager(ctx, claims, tracker, factory)
	}
	snap := &swappableSnapshot{cur: internalcache.NewEmptySnapshot()}
	fw, err := frameworkruntime.NewFramework(ctx, frameworkplugins.NewInTreeRegistry(), &cfg.Profiles[0],
		frameworkruntime.WithClientSet(client),
		frameworkruntime.WithInformerFactory(factory),
		frameworkruntime.WithSharedDRAManager(draManager),
		frameworkruntime.WithSharedCSIManager(nodevolumelimits.NewCSIManager(factory.Storage().V1().CSINodes().Lister())),
		frameworkruntime.WithSnapshotSharedLister(snap),
		frameworkruntime.WithLogger(logger),
	)
	if err != nil {
		return nil, fmt.Errorf("building kube-scheduler's framework with the default profile: %w", err)
	}
	factory.Start(ctx.Done())
	for typ, ok := range factory.WaitForCacheSync(ctx.Done()) {
		if !ok {
			return nil, fmt.Errorf("syncing the %v informer", typ)
		}
	}
	return &oracle{fw: fw, snapshot: snap}, nil
}

// filterPlugins names the Filter plugins the oracle runs, in order.
func (o *oracle) filterPlugins() []string {
	var out []string
	for _, p := range o.fw.ListPlugins().Filter.Enabled {
		out = append(out, p.Name)
	}
	return out
}

// feasible returns, for each pending pod, the nodes kube-scheduler's
// Filter plugins accept for it in the cluster of nodes and running pods,
// and for each node refused the first refusal's plugin and reason, as
// kube-scheduler's findNodesThatFitPod finds them: PreFilter, whose
// rejection refuses every node and whose result may narrow the nodes;
// then Filter on each remaining node. Pods that have finished are left
// out of the snapshot, as kube-scheduler's pod informer lists only pods
// that have not (status.phase!=Succeeded,status.phase!=Failed). No pod is
// nominated, so Filter runs without nominated pods.
func (o *oracle) feasible(ctx context.Context, nodes []*corev1.Node, running, pending []*corev1.Pod) (map[string]verdicts, error) {
	var live []*corev1.Pod
	for _, p := range running {
		if p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed {
			live = append(live, p)
		}
	}
	o.snapshot.cur = internalcache.NewSnapshot(live, nodes)
	infos, err := o.snapshot.cur.NodeInfos().List()
	if err != nil {
		return nil, err
	}
	out := map[string]verdicts{}
	for _, pod := range pending {
		v := verdicts{}
		out[pod.Namespace+"/"+pod.Name] = v
		state := framework.NewCycleState()
		pre, status, _ := o.fw.RunPreFilterPlugins(ctx, state, pod)
		if !status.IsSuccess() {
			if !status.IsRejected() {
				return nil, fmt.Errorf("pod %s: PreFilter: %w", pod.Name, status.AsError())
			}
			for _, n := range nodes {
				v[n.Name] = fmt.Sprintf("PreFilter %s: %s", status.Plugin(), status.Message())
			}
			continue
		}
		for _, ni := range infos {
			name := ni.Node().Name
			if !pre.AllNodes() && !pre.NodeNames.Has(name) {
				v[name] = "PreFilter: node not in the PreFilter result"
				continue
			}
			st := o.fw.RunFilterPlugins(ctx, state, pod, ni)
			switch {
			case st.IsSuccess():
				v[name] = ""
			case st.IsRejected():
				v[name] = fmt.Sprintf("%s: %s", st.Plugin(), st.Message())
			default:
				return nil, fmt.Errorf("pod %s on node %s: Filter: %w", pod.Name, name, st.AsError())
			}
		}
	}
	return out, nil
}

// verdicts is, by node name, "" for a node that takes the pod or why not.
type verdicts map[string]string

// accepted lists the nodes that take the pod, sorted.
func (v verdicts) accepted() []string {
	var out []string
	for n, why := range v {
		if why == "" {
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return out
}
