package differential

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/informers/core"
	"k8s.io/client-go/informers/internalinterfaces"
	"k8s.io/client-go/informers/resource"
	"k8s.io/client-go/informers/storage"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"
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

// newOracle builds kube-scheduler's framework over a fake API server that
// holds objs besides the namespaces: the volumes, storage classes, CSI
// nodes and DRA objects of a case, which its plugins read through
// informers (listers, and caches their event handlers fill). It returns
// once those informers have listed them and every event handler the
// plugins registered has seen the list, so that no plugin reads a cache
// still filling; stop ends the informers.
func newOracle(ctx context.Context, objs ...runtime.Object) (o *oracle, stop func(), err error) {
	cfg, err := latest.Default()
	if err != nil {
		return nil, nil, fmt.Errorf("kube-scheduler's default configuration: %w", err)
	}
	if len(cfg.Profiles) != 1 {
		return nil, nil, fmt.Errorf("kube-scheduler's default configuration has %d profiles, want 1", len(cfg.Profiles))
	}
	// The framework records plugin metrics, which kube-scheduler
	// registers before it builds its profiles.
	metricsOnce.Do(metrics.Register)
	ctx, cancel := context.WithCancel(ctx)
	defer func() {
		if err != nil {
			cancel()
		}
	}()
	client := fake.NewClientset(append(namespaceObjects(), objs...)...)
	factory := &recordingFactory{SharedInformerFactory: informers.NewSharedInformerFactory(client, 0)}
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
			return nil, nil, fmt.Errorf("starting the ResourceSlice tracker: %w", err)
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
		return nil, nil, fmt.Errorf("building kube-scheduler's framework with the default profile: %w", err)
	}
	factory.Start(ctx.Done())
	for typ, ok := range factory.WaitForCacheSync(ctx.Done()) {
		if !ok {
			return nil, nil, fmt.Errorf("syncing the %v informer", typ)
		}
	}
	if err := factory.waitHandlers(ctx); err != nil {
		return nil, nil, err
	}
	return &oracle{fw: fw, snapshot: snap}, cancel, nil
}

var metricsOnce sync.Once

// recordingFactory is the informer factory the framework and its plugins
// get: the factory of client-go, whose informers remember the event
// handlers added to them, so that waitHandlers can wait for each to have
// seen the informers' initial list (the plugins' assume caches fill from
// such handlers, after the informer's own store).
type recordingFactory struct {
	informers.SharedInformerFactory
	mu   sync.Mutex
	regs []cache.ResourceEventHandlerRegistration
}

// InformerFor is what the typed informers of Core, Storage and Resource
// call: it wraps the factory's informer.
func (f *recordingFactory) InformerFor(obj runtime.Object, newFunc internalinterfaces.NewInformerFunc) cache.SharedIndexInformer {
	return &recordingInformer{SharedIndexInformer: f.SharedInformerFactory.InformerFor(obj, newFunc), f: f}
}

func (f *recordingFactory) Core() core.Interface { return core.New(f, metav1.NamespaceAll, nil) }
func (f *recordingFactory) Storage() storage.Interface {
	return storage.New(f, metav1.NamespaceAll, nil)
}
func (f *recordingFactory) Resource() resource.Interface {
	return resource.New(f, metav1.NamespaceAll, nil)
}

func (f *recordingFactory) record(reg cache.ResourceEventHandlerRegistration, err error) (cache.ResourceEventHandlerRegistration, error) {
	if err == nil {
		f.mu.Lock()
		f.regs = append(f.regs, reg)
		f.mu.Unlock()
	}
	return reg, err
}

// waitHandlers waits, for at most ten seconds, until every recorded
// handler has seen its informer's initial list.
func (f *recordingFactory) waitHandlers(ctx context.Context) error {
	f.mu.Lock()
	regs := slices.Clone(f.regs)
	f.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for _, r := range regs {
		select {
		case <-r.HasSyncedChecker().Done():
		case <-ctx.Done():
			return fmt.Errorf("an informer's event handler did not see its initial list: %w", ctx.Err())
		}
	}
	return nil
}

type recordingInformer struct {
	cache.SharedIndexInformer
	f *recordingFactory
}

func (i *recordingInformer) AddEventHandler(h cache.ResourceEventHandler) (cache.ResourceEventHandlerRegistration, error) {
	return i.f.record(i.SharedIndexInformer.AddEventHandler(h))
}

func (i *recordingInformer) AddEventHandlerWithResyncPeriod(h cache.ResourceEventHandler, resync time.Duration) (cache.ResourceEventHandlerRegistration, error) {
	return i.f.record(i.SharedIndexInformer.AddEventHandlerWithResyncPeriod(h, resync))
}

func (i *recordingInformer) AddEventHandlerWithOptions(h cache.ResourceEventHandler, opts cache.HandlerOptions) (cache.ResourceEventHandlerRegistration, error) {
	return i.f.record(i.SharedIndexInformer.AddEventHandlerWithOptions(h, opts))
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
			// Rejected, or an error (a claim's class missing, say):
			// either way kube-scheduler places the pod nowhere this
			// cycle.
			for _, n := range nodes {
				v[n.Name] = fmt.Sprintf("PreFilter %s: %s", status.Plugin(), status.Message())
			}
			continue
		}
	nodes:
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
				// A Filter's error ends kube-scheduler's cycle for the
				// pod: it is placed nowhere.
				for _, n := range nodes {
					v[n.Name] = fmt.Sprintf("Filter error on node %s: %s: %s", name, st.Plugin(), st.Message())
				}
				break nodes
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
