// Package karpenter_test runs gpuplane-scheduler beside a real Karpenter
// (sigs.k8s.io/karpenter with its kwok cloud provider, built into
// bin/operators by `make operator-bins`) on a real control plane: the
// NodePools and instance types gpuplane publishes (internal/nodeoffer)
// decide what Karpenter buys, kwok runs the nodes it buys, and the tests
// check what it buys for gangs, for work that quota holds back, and what it
// takes away again.
package karpenter_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	configv1 "github.com/gpuplane/gpuplane/api/config/v1"
	"github.com/gpuplane/gpuplane/api/scheduling/v1alpha1"
	"github.com/gpuplane/gpuplane/internal/adapter"
	"github.com/gpuplane/gpuplane/internal/localcluster"
	"github.com/gpuplane/gpuplane/internal/nodeoffer"
	"github.com/gpuplane/gpuplane/internal/testutil/build"
	"github.com/gpuplane/gpuplane/test/integration/framework"
)

var (
	env       *framework.Env
	crdClient dynamic.Interface
)

func TestMain(m *testing.M) {
	os.Exit(framework.Main(m, localcluster.DefaultConfig(), &env))
}

// Karpenter's resources the tests read and write.
var (
	nodePools   = schema.GroupVersionResource{Group: nodeoffer.KarpenterGroup, Version: "v1", Resource: "nodepools"}
	nodeClaims  = schema.GroupVersionResource{Group: nodeoffer.KarpenterGroup, Version: "v1", Resource: "nodeclaims"}
	nodeClasses = schema.GroupVersionResource{Group: nodeoffer.KWOKGroup, Version: "v1alpha1", Resource: "kwoknodeclasses"}
)

// options are what one test's Karpenter and pools are set up with.
type options struct {
	// idle is the pools' consolidateAfter.
	idle time.Duration
	// registration is how long a bought node takes to register.
	registration time.Duration
	// gpuLimit is the pool's spec.limits of nvidia.com/gpu; 0 sets none.
	gpuLimit int64
	// timeSliced, when > 1, time-slices the pool's GPUs that many ways
	// under nvidia.com/gpu itself (the agent's sharing.timeSlicing).
	timeSliced int
	// secondPoolLimit, when > 0, adds a second pool of the same nodes
	// under another instance type name (secondType), with this
	// nvidia.com/gpu limit.
	secondPoolLimit int64
}

// secondType names the second pool's instance type (options.secondPoolLimit).
const secondType = "h100x8-b"

// cluster is one test's namespace, scheduler, Karpenter and GPU pool.
type cluster struct {
	t         testing.TB
	ns        string
	scheduler string
	dyn       dynamic.Interface
	// gpusPerNode is what one node of the pool offers.
	gpusPerNode int
}

// h100 is the instance type the tests buy: a DGX H100 as gpuplane's agent
// would offer it with its default config, or with its GPUs time-sliced
// timeSliced ways (when > 1) under nvidia.com/gpu.
func h100(t testing.TB, timeSliced int) nodeoffer.InstanceType {
	t.Helper()
	var cfg *configv1.Config
	if timeSliced > 1 {
		var err error
		cfg, err = configv1.Load(strings.NewReader(fmt.Sprintf("version: v1\nsharing:\n  timeSlicing:\n    resources:\n    - name: nvidia.com/gpu\n      replicas: %d\n", timeSliced)), configv1.Options{})
		if err != nil {
			t.Fatal(err)
		}
	}
	o, err := nodeoffer.Compute(context.Background(), "dgxh100", cfg)
	if err != nil {
		t.Fatal(err)
	}
	return nodeoffer.InstanceType{Name: "h100x8", Offer: o, CPU: "224", Memory: "2Ti", Price: 98.32}
}

// newCluster starts, for the test, gpuplane-scheduler and Karpenter with
// one NodePool of h100 nodes and no node yet. When the test ends, the pool
// is deleted and every node Karpenter bought is awaited gone before
// Karpenter stops.
func newCluster(t testing.TB, o options) *cluster {
	t.Helper()
	if crdClient == nil {
		crdClient = env.InstallCRDs(t, filepath.Join(framework.RepoRoot(), "deploy", "crds"))
	}
	ns := env.CreateNamespace(t)
	c := &cluster{t: t, ns: ns, scheduler: "gpuplane-" + ns, dyn: crdClient}
	// Each test starts from an empty pool: counts of what Karpenter buys
	// must not see an earlier test's nodes.
	if err := framework.Poll(t.Context(), time.Minute, "no node of an earlier test", c.noNodes); err != nil {
		t.Fatal(err)
	}
	it := h100(t, o.timeSliced)
	c.gpusPerNode = int(it.Offer.Resources["nvidia.com/gpu"])
	its := []nodeoffer.InstanceType{it}
	if o.secondPoolLimit > 0 {
		second := it
		second.Name = secondType
		its = append(its, second)
	}
	types, err := nodeoffer.KWOKInstanceTypes(its, "zone-a")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	typesFile := filepath.Join(dir, "instance-types.json")
	if err := os.WriteFile(typesFile, types, 0o600); err != nil {
		t.Fatal(err)
	}
	// Karpenter is started by the framework like any operator, its CRDs
	// (NodePool, NodeClaim, KWOKNodeClass) from its own module.
	env.StartOperator(t, localcluster.OperatorKarpenter, "--instance-types-file-path="+typesFile, "--batch-idle-duration=500ms")
	c.apply(nodeoffer.KWOKNodeClass(ns, o.registration), nodeClasses)
	var pools []string
	for i, it := range its {
		limit := o.gpuLimit
		if i > 0 {
			limit = o.secondPoolLimit
		}
		pool, err := nodeoffer.NodePool(it, nodeoffer.PoolOptions{NodeClass: ns, ConsolidateAfter: o.idle, GPULimit: limit})
		if err != nil {
			t.Fatal(err)
		}
		c.apply(pool, nodePools)
		pools = append(pools, pool.GetName())
	}
	t.Cleanup(func() {
		// The pods go first: Karpenter drains a node before it deletes
		// it, and a pod bound with karpenter.sh/do-not-disrupt would keep
		// it. Then the pool's NodeClaims, and the pool.
		ctx := context.Background()
		if err := env.Client.CoreV1().Pods(ns).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: new(int64)}, metav1.ListOptions{}); err != nil {
			t.Error(err)
		}
		if err := framework.Poll(ctx, time.Minute, "the test's pods gone", func(ctx context.Context) (bool, error) {
			pods, err := env.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
			if err != nil {
				return false, err
			}
			return len(pods.Items) == 0, fmt.Errorf("%d pods left", len(pods.Items))
		}); err != nil {
			t.Error(err)
		}
		if err := c.dyn.Resource(nodeClaims).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: c.poolSelector()}); err != nil {
			t.Error(err)
		}
		if err := framework.Poll(ctx, 2*time.Minute, "the pool's nodes gone", c.noNodes); err != nil {
			t.Error(err)
		}
		for _, name := range pools {
			_ = c.dyn.Resource(nodePools).Delete(ctx, name, metav1.DeleteOptions{})
		}
		_ = c.dyn.Resource(nodeClasses).Delete(ctx, ns, metav1.DeleteOptions{})
	})
	// Karpenter adds nodes: gangs larger than the cluster wait for room.
	framework.RunScheduler(t, adapter.Config{RESTConfig: env.Config, SchedulerName: c.scheduler, CycleInterval: 200 * time.Millisecond, PartialGangGrace: 2 * time.Second, NodeAutoscaler: true})
	return c
}

// apply creates a cluster-scoped object of gvr.
func (c *cluster) apply(u *unstructured.Unstructured, gvr schema.GroupVersionResource) {
	c.t.Helper()
	if _, err := c.dyn.Resource(gvr).Create(c.t.Context(), u, metav1.CreateOptions{}); err != nil {
		c.t.Fatalf("creating %s %s: %v", u.GetKind(), u.GetName(), err)
	}
}

// poolSelector selects the objects of the test's pools.
func (c *cluster) poolSelector() string {
	return fmt.Sprintf("%s in (%sh100x8, %s%s)", nodeoffer.LabelNodePool, nodeoffer.PoolPrefix, nodeoffer.PoolPrefix, secondType)
}

// claims lists the NodeClaims of the test's pool.
func (c *cluster) claims(ctx context.Context) ([]unstructured.Unstructured, error) {
	list, err := c.dyn.Resource(nodeClaims).List(ctx, metav1.ListOptions{LabelSelector: c.poolSelector()})
	if err != nil {
		return nil, err
	}
	return list.Items, nil
}

// nodes lists the nodes Karpenter bought in the test's pool, deleted ones
// included until they are gone.
func (c *cluster) nodes(ctx context.Context) ([]corev1.Node, error) {
	list, err := env.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: c.poolSelector()})
	if err != nil {
		return nil, err
	}
	return list.Items, nil
}

// noNodes is a Condition: the pool has no node and no NodeClaim left.
func (c *cluster) noNodes(ctx context.Context) (bool, error) {
	nodes, err := c.nodes(ctx)
	if err != nil {
		return false, err
	}
	claims, err := c.claims(ctx)
	if err != nil && !apierrors.IsNotFound(err) {
		return false, err
	}
	if len(nodes)+len(claims) > 0 {
		return false, fmt.Errorf("%d nodes and %d NodeClaims left", len(nodes), len(claims))
	}
	return true, nil
}

// pod returns a builder for a pod of this test's scheduler.
func (c *cluster) pod(name string) *framework.PodBuilder {
	return framework.Pod(c.ns, name).SchedulerName(c.scheduler)
}

func (c *cluster) createPod(p *corev1.Pod) {
	c.t.Helper()
	if _, err := env.Client.CoreV1().Pods(c.ns).Create(c.t.Context(), p, metav1.CreateOptions{}); err != nil {
		c.t.Fatalf("creating pod %s: %v", p.Name, err)
	}
}

func (c *cluster) createObj(gvr schema.GroupVersionResource, namespace string, obj kruntime.Object) {
	c.t.Helper()
	u, err := kruntime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		c.t.Fatal(err)
	}
	if _, err := c.dyn.Resource(gvr).Namespace(namespace).Create(c.t.Context(), &unstructured.Unstructured{Object: u}, metav1.CreateOptions{}); err != nil {
		c.t.Fatalf("creating %s: %v", gvr.Resource, err)
	}
}

// gang creates a PodGroup of minMember in queue (none when "") and pods of
// it, each asking for gpus GPUs, labelled gang=name.
func (c *cluster) gang(name string, minMember int32, pods, gpus int, queue string) {
	c.t.Helper()
	c.createObj(v1alpha1.PodGroupsResource, c.ns, build.PodGroup(c.ns, name, minMember).Queue(queue).Obj())
	for i := range pods {
		c.createPod(c.pod(fmt.Sprintf("%s-%d", name, i)).GPUs(gpus).Label(v1alpha1.PodGroupLabel, name).Label("gang", name).Obj())
	}
}

// podGroup is a PodGroup of minMember as the dynamic client wants it.
func podGroup(ns, name string, minMember int32) *v1alpha1.PodGroup {
	return build.PodGroup(ns, name, minMember).Obj()
}

// queue creates a root Queue with a GPU limit, deleted when the test ends.
func (c *cluster) queue(name string, limit string) {
	c.t.Helper()
	q := build.Queue(name).GPUs("", limit).Obj()
	q.APIVersion, q.Kind = v1alpha1.SchemeGroupVersion.String(), "Queue"
	c.createObj(v1alpha1.QueuesResource, "", q)
	c.t.Cleanup(func() {
		_ = c.dyn.Resource(v1alpha1.QueuesResource).Delete(context.Background(), name, metav1.DeleteOptions{})
	})
}

// pods lists the test's pods matching selector.
func (c *cluster) pods(ctx context.Context, selector string) ([]corev1.Pod, error) {
	list, err := env.Client.CoreV1().Pods(c.ns).List(ctx, metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		return nil, err
	}
	return list.Items, nil
}

// allRunning is a Condition: want pods match selector, each bound and
// Running.
func (c *cluster) allRunning(selector string, want int) framework.Condition {
	return func(ctx context.Context) (bool, error) {
		pods, err := c.pods(ctx, selector)
		if err != nil {
			return false, err
		}
		running := 0
		why := ""
		for i := range pods {
			p := &pods[i]
			if p.Spec.NodeName != "" && p.Status.Phase == corev1.PodRunning {
				running++
			} else if why == "" {
				why = fmt.Sprintf("; %s: node %q, %s %s", p.Name, p.Spec.NodeName, p.Status.Phase, framework.SchedulerSays(p))
			}
		}
		if running == want && len(pods) == want {
			return true, nil
		}
		return false, fmt.Errorf("%d of %d pods running, want %d%s", running, len(pods), want, why)
	}
}

// deletePods deletes the test's pods matching selector at once.
func (c *cluster) deletePods(selector string) {
	c.t.Helper()
	if err := env.Client.CoreV1().Pods(c.ns).DeleteCollection(c.t.Context(), metav1.DeleteOptions{GracePeriodSeconds: new(int64)}, metav1.ListOptions{LabelSelector: selector}); err != nil {
		c.t.Fatal(err)
	}
}

// nominated returns the pods Karpenter has said it bought or found room
// for (its Nominated events), by name.
func (c *cluster) nominated(ctx context.Context) ([]string, error) {
	evs, err := env.Client.CoreV1().Events(c.ns).List(ctx, metav1.ListOptions{FieldSelector: "reason=Nominated"})
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range evs.Items {
		if e.InvolvedObject.Kind == "Pod" && !slices.Contains(out, e.InvolvedObject.Name) {
			out = append(out, e.InvolvedObject.Name)
		}
	}
	slices.Sort(out)
	return out, nil
}
