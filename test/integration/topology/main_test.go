// Package topology_test runs gpuplane-scheduler in-process against a real
// etcd, kube-apiserver, kube-controller-manager and kwok GPU nodes laid out
// in blocks and racks, with Topology objects of gpuplane's, Kueue's and
// KAI's and gangs that state their topology in each dialect: gpuplane's
// PodGroup spec.topology and annotations, Kueue's and KAI's annotations,
// Volcano's networkTopology and the Workload API's topology constraint.
// Indexed Jobs, JobSets, PyTorchJobs and LeaderWorkerSets are made by
// their real operators (bin/operators, from `make operator-bins`).
package topology_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	"github.com/gpuplane/gpuplane/internal/adapter"
	"github.com/gpuplane/gpuplane/internal/localcluster"
	"github.com/gpuplane/gpuplane/test/integration/framework"
)

var (
	env *framework.Env
	dyn dynamic.Interface
)

func TestMain(m *testing.M) {
	cfg := localcluster.DefaultConfig()
	// The Workload API's PodGroup (scheduling.k8s.io/v1alpha2) and its
	// topology constraint (KEP-5732) are alpha in Kubernetes 1.36.
	cfg.ExtraAPIServerArgs = append(cfg.ExtraAPIServerArgs,
		"--feature-gates=GenericWorkload=true,TopologyAwareWorkloadScheduling=true", "--runtime-config=scheduling.k8s.io/v1alpha2=true")
	// A Job's pods complete after the delay their annotations give (a
	// second or so unless they say), not at once, so that a Job can keep
	// its pods running while one is deleted and made again.
	for _, s := range localcluster.DefaultKwokStages() {
		if s == "pod/fast/pod-complete.yaml" {
			s = "pod/general/pod-complete.yaml"
		}
		cfg.KwokStages = append(cfg.KwokStages, s)
	}
	os.Exit(framework.Main(m, cfg, &env))
}

var (
	kueueTopologies   = schema.GroupVersionResource{Group: "kueue.x-k8s.io", Version: "v1beta2", Resource: "topologies"}
	kaiTopologies     = adapter.KAITopologies
	volcanoPodGroups  = schema.GroupVersionResource{Group: "scheduling.volcano.sh", Version: "v1beta1", Resource: "podgroups"}
	workloadPodGroups = schema.GroupVersionResource{Group: "scheduling.k8s.io", Version: "v1alpha2", Resource: "podgroups"}
	jobs              = schema.GroupVersionResource{Group: "batch", Version: "v1", Resource: "jobs"}
	volcanoJobs       = schema.GroupVersionResource{Group: "batch.volcano.sh", Version: "v1alpha1", Resource: "jobs"}
)

// setup installs, once per package run, gpuplane's CRDs, Kueue's Topology
// and Volcano's PodGroup and Job (bin/crds, from `make third-party-crds`)
// and KAI's Topology, and returns a dynamic client.
func setup(t *testing.T) dynamic.Interface {
	t.Helper()
	if dyn != nil {
		return dyn
	}
	d := env.InstallCRDs(t, filepath.Join(framework.RepoRoot(), "deploy", "crds"))
	for _, sub := range []string{"kueue", "volcano-apis"} {
		dir := filepath.Join(env.ControlPlane.BinDir(), "crds", sub)
		if _, err := os.Stat(dir); err != nil {
			t.Fatalf("no CRDs at %s (run make third-party-crds): %v", dir, err)
		}
		env.InstallCRDs(t, dir)
	}
	installKAITopologyCRD(t, d)
	dyn = d
	return d
}

// installKAITopologyCRD installs KAI's Topology CRD and waits until it is
// served. KAI's Go module is not served by this network's module proxy, so
// the CRD is written here with the fields gpuplane reads, as KAI defines
// them: kai.scheduler/v1alpha1, cluster-scoped, spec.levels[].nodeLabel.
func installKAITopologyCRD(t *testing.T, d dynamic.Interface) {
	t.Helper()
	if err := createKAITopologyCRD(t.Context(), d); err != nil {
		t.Fatal(err)
	}
}

// createKAITopologyCRD creates KAI's Topology CRD (kept if it exists) and
// waits until the API server serves it.
func createKAITopologyCRD(ctx context.Context, d dynamic.Interface) error {
	str := apiextensionsv1.JSONSchemaProps{Type: "string", MinLength: new(int64(1))}
	crd := &apiextensionsv1.CustomResourceDefinition{
		TypeMeta:   metav1.TypeMeta{APIVersion: "apiextensions.k8s.io/v1", Kind: "CustomResourceDefinition"},
		ObjectMeta: metav1.ObjectMeta{Name: "topologies.kai.scheduler"},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: "kai.scheduler", Scope: apiextensionsv1.ClusterScoped,
			Names: apiextensionsv1.CustomResourceDefinitionNames{Plural: "topologies", Singular: "topology", Kind: "Topology", ListKind: "TopologyList"},
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{Name: "v1alpha1", Served: true, Storage: true,
				Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{Type: "object",
					Properties: map[string]apiextensionsv1.JSONSchemaProps{"spec": {Type: "object", Required: []string{"levels"},
						Properties: map[string]apiextensionsv1.JSONSchemaProps{"levels": {Type: "array", Items: &apiextensionsv1.JSONSchemaPropsOrArray{
							Schema: &apiextensionsv1.JSONSchemaProps{Type: "object", Required: []string{"nodeLabel"},
								Properties: map[string]apiextensionsv1.JSONSchemaProps{"nodeLabel": str}}}}}}}}}}},
		},
	}
	u, err := kruntime.DefaultUnstructuredConverter.ToUnstructured(crd)
	if err != nil {
		return err
	}
	if _, err := d.Resource(crdsResource).Create(ctx, &unstructured.Unstructured{Object: u}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating KAI's Topology CRD: %w", err)
	}
	return framework.Poll(ctx, 30*time.Second, "KAI's Topology served", func(ctx context.Context) (bool, error) {
		_, err := d.Resource(kaiTopologies).List(ctx, metav1.ListOptions{})
		return err == nil, err
	})
}

// crdsResource is the API of CustomResourceDefinitions.
var crdsResource = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

var seq atomic.Int64

// Node label keys of the test clusters' levels.
const (
	blockKey  = "gpuplane.io/topology-block"
	rackKey   = "gpuplane.io/topology-rack"
	cliqueKey = "nvidia.com/gpu.clique"
	hostKey   = "kubernetes.io/hostname"
)

// cluster is one test's namespace, kwok nodes and scheduler name.
type cluster struct {
	t         *testing.T
	ns        string
	scheduler string
	dyn       dynamic.Interface
	// rackOf is each node's rack, blockOf its block.
	rackOf, blockOf map[string]string
}

// newCluster makes racks of nodesPerRack 8-GPU nodes, racksPerBlock racks
// to a block: node, rack, block and NVLink-clique (one per rack) labels,
// with values unique to the test.
func newCluster(t *testing.T, blocks, racksPerBlock, nodesPerRack int) *cluster {
	t.Helper()
	d := setup(t)
	ns := env.CreateNamespace(t)
	c := &cluster{t: t, ns: ns, scheduler: "gpuplane-" + ns, dyn: d, rackOf: map[string]string{}, blockOf: map[string]string{}}
	id := seq.Add(1)
	var nodes []*corev1.Node
	for b := range blocks {
		block := fmt.Sprintf("b%d-%d", id, b)
		for r := range racksPerBlock {
			rack := fmt.Sprintf("%s-r%d", block, r)
			for n := range nodesPerRack {
				name := fmt.Sprintf("%s-n%d", rack, n)
				nodes = append(nodes, framework.GPUNode(name).GPUs(8).Label("test-ns", ns).
					Labels(map[string]string{blockKey: block, rackKey: rack, cliqueKey: "fabric." + rack}).Obj())
				c.rackOf[name], c.blockOf[name] = rack, block
			}
		}
	}
	if err := env.CreateNodes(t.Context(), nodes, 8); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := env.DeleteNodes(context.Background(), "test-ns="+ns); err != nil {
			t.Error(err)
		}
	})
	env.WaitNodesReady(t, "test-ns="+ns, len(nodes), 60*time.Second)
	env.WaitNodesUntainted(t, "test-ns="+ns, 60*time.Second)
	return c
}

// run starts the scheduler in-process until the test ends.
func (c *cluster) run() {
	c.t.Helper()
	framework.RunScheduler(c.t, adapter.Config{RESTConfig: env.Config, SchedulerName: c.scheduler, CycleInterval: 200 * time.Millisecond, PartialGangGrace: 2 * time.Second})
}

// create creates an object of gvr in namespace ns ("" for cluster-scoped);
// cluster-scoped objects are deleted when the test ends.
func (c *cluster) create(gvr schema.GroupVersionResource, ns string, obj map[string]any) {
	c.t.Helper()
	u := &unstructured.Unstructured{Object: obj}
	if _, err := c.dyn.Resource(gvr).Namespace(ns).Create(c.t.Context(), u, metav1.CreateOptions{}); err != nil {
		c.t.Fatalf("creating %s %s: %v", gvr.Resource, u.GetName(), err)
	}
	if ns == "" {
		c.t.Cleanup(func() {
			if err := c.dyn.Resource(gvr).Delete(context.Background(), u.GetName(), metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
				c.t.Error(err)
			}
		})
	}
}

// createTyped creates a typed object through the dynamic client.
func (c *cluster) createTyped(gvr schema.GroupVersionResource, ns string, obj kruntime.Object) {
	c.t.Helper()
	u, err := kruntime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		c.t.Fatal(err)
	}
	c.create(gvr, ns, u)
}

// levels is spec.levels of a Topology of any of the three shapes.
func levels(keys ...string) []any {
	out := make([]any, len(keys))
	for i, k := range keys {
		out[i] = map[string]any{"nodeLabel": k}
	}
	return out
}

// pod returns a builder for a pod of this test's scheduler, kept on its
// nodes.
func (c *cluster) pod(name string) *framework.PodBuilder {
	return framework.Pod(c.ns, name).SchedulerName(c.scheduler).NodeSelector("test-ns", c.ns)
}

func (c *cluster) createPod(p *corev1.Pod) {
	c.t.Helper()
	if _, err := env.Client.CoreV1().Pods(c.ns).Create(c.t.Context(), p, metav1.CreateOptions{}); err != nil {
		c.t.Fatalf("creating pod %s: %v", p.Name, err)
	}
}

// pods lists the test's pods matching selector.
func (c *cluster) pods(ctx context.Context, selector string) ([]corev1.Pod, error) {
	list, err := env.Client.CoreV1().Pods(c.ns).List(ctx, metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		return nil, err
	}
	return list.Items, nil
}

// waitBound waits until want pods matching selector are bound.
func (c *cluster) waitBound(selector string, want int) []corev1.Pod {
	c.t.Helper()
	var out []corev1.Pod
	framework.Eventually(c.t, 90*time.Second, fmt.Sprintf("%d pods %q bound", want, selector), func(ctx context.Context) (bool, error) {
		ps, err := c.pods(ctx, selector)
		if err != nil {
			return false, err
		}
		n, why := 0, ""
		for _, p := range ps {
			if p.Spec.NodeName != "" {
				n++
			} else if says := framework.SchedulerSays(&p); says != "" && why == "" {
				why = "; " + p.Name + ": " + says
			}
		}
		out = ps
		return n == want && len(ps) == want, fmt.Errorf("%d of %d bound%s", n, len(ps), why)
	})
	return out
}
