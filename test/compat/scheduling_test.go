package compat_test

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/gpuplane/gpuplane/api/scheduling/v1alpha1"
	"github.com/gpuplane/gpuplane/internal/adapter"
	"github.com/gpuplane/gpuplane/internal/testutil/build"
	"github.com/gpuplane/gpuplane/test/integration/framework"
)

// world is one smoke test's namespace, kwok nodes and in-process
// gpuplane-scheduler.
type world struct {
	env       *framework.Env
	ns        string
	scheduler string
	nodes     []string
}

// newWorld makes n kwok nodes of gpus device-plugin GPUs each and runs
// gpuplane-scheduler, under a name of the test's own, on the CRDs of
// deploy/crds.
func newWorld(t *testing.T, env *framework.Env, n, gpus int) *world {
	t.Helper()
	env.InstallCRDs(t, filepath.Join(framework.RepoRoot(), "deploy", "crds"))
	w := &world{env: env, ns: env.CreateNamespace(t)}
	w.scheduler = "gpuplane-" + w.ns
	var nodes []*corev1.Node
	for i := range n {
		name := fmt.Sprintf("%s-%d", w.ns, i)
		w.nodes = append(w.nodes, name)
		nodes = append(nodes, framework.GPUNode(name).GPUs(gpus).Label("test-ns", w.ns).Obj())
	}
	if err := env.CreateNodes(t.Context(), nodes, n); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := env.DeleteNodes(context.Background(), "test-ns="+w.ns); err != nil {
			t.Error(err)
		}
	})
	env.WaitNodesReady(t, "test-ns="+w.ns, n, time.Minute)
	env.UntaintReadyNodes(t, "test-ns="+w.ns, time.Minute)
	framework.RunScheduler(t, adapter.Config{RESTConfig: env.Config, SchedulerName: w.scheduler,
		CycleInterval: 200 * time.Millisecond, PartialGangGrace: 2 * time.Second})
	return w
}

func (w *world) pod(name string) *framework.PodBuilder {
	return framework.Pod(w.ns, name).SchedulerName(w.scheduler)
}

func (w *world) create(t *testing.T, p *corev1.Pod) {
	t.Helper()
	if _, err := w.env.Client.CoreV1().Pods(w.ns).Create(t.Context(), p, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating pod %s: %v", p.Name, err)
	}
}

// waitBound waits until every named pod is bound and returns their nodes.
func (w *world) waitBound(t *testing.T, names ...string) map[string]string {
	t.Helper()
	nodes := map[string]string{}
	framework.Eventually(t, time.Minute, fmt.Sprintf("pods %v bound by %s", names, w.scheduler), func(ctx context.Context) (bool, error) {
		for _, n := range names {
			p, err := w.env.Client.CoreV1().Pods(w.ns).Get(ctx, n, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			if p.Spec.NodeName == "" {
				return false, fmt.Errorf("pod %s is not bound: %s", n, framework.SchedulerSays(p))
			}
			nodes[n] = p.Spec.NodeName
		}
		return true, nil
	})
	return nodes
}

// testScheduling: gpuplane-scheduler places a one-GPU pod, and a gang of
// three 4-GPU pods whole across two 8-GPU nodes, never more GPUs on a node
// than it has.
func testScheduling(t *testing.T, env *framework.Env) {
	w := newWorld(t, env, 2, 8)
	w.create(t, w.pod("one").GPUs(1).Obj())
	one := w.waitBound(t, "one")

	dyn, _ := clients(t, env)
	pg, err := kruntime.DefaultUnstructuredConverter.ToUnstructured(build.PodGroup(w.ns, "gang", 3).Obj())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := dyn.Resource(v1alpha1.PodGroupsResource).Namespace(w.ns).Create(t.Context(), &unstructured.Unstructured{Object: pg}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating the PodGroup: %v", err)
	}
	var members []string
	for i := range 3 {
		name := fmt.Sprintf("gang-%d", i)
		members = append(members, name)
		w.create(t, w.pod(name).GPUs(4).Label(v1alpha1.PodGroupLabel, "gang").Obj())
	}
	placed := w.waitBound(t, members...)
	gpus := map[string]int{one["one"]: 1}
	for _, n := range placed {
		gpus[n] += 4
	}
	for n, g := range gpus {
		if g > 8 {
			t.Errorf("node %s holds %d GPUs of pods, has 8", n, g)
		}
	}
	t.Logf("placed: one on %s, gang on %v", one["one"], placed)
}

// testDRA: a pod with a ResourceClaim for two GPUs of gpuplane's driver,
// published in a ResourceSlice as the agent does, is bound by
// gpuplane-scheduler with the claim allocated on its node and reserved
// for it.
func testDRA(t *testing.T, env *framework.Env) {
	w := newWorld(t, env, 1, 0)
	ctx := t.Context()
	rc := env.Client.ResourceV1()
	class := "gpu-" + w.ns
	if _, err := rc.DeviceClasses().Create(ctx, framework.DRAGPUClass(class), metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating the DeviceClass: %v", err)
	}
	t.Cleanup(func() { _ = rc.DeviceClasses().Delete(context.Background(), class, metav1.DeleteOptions{}) })
	slice := framework.DRAGPUSlice(w.nodes[0], 4, "NVIDIA-H100-80GB-HBM3")
	if _, err := rc.ResourceSlices().Create(ctx, slice, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating the ResourceSlice: %v", err)
	}
	t.Cleanup(func() { _ = rc.ResourceSlices().Delete(context.Background(), slice.Name, metav1.DeleteOptions{}) })
	claim := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: w.ns, Name: "two-gpus"}, Spec: framework.DRAClaimSpec(class, 2)}
	if _, err := rc.ResourceClaims(w.ns).Create(ctx, claim, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating the ResourceClaim: %v", err)
	}
	w.create(t, w.pod("trainer").Claim("gpus", "two-gpus").Obj())
	node := w.waitBound(t, "trainer")["trainer"]
	framework.Eventually(t, time.Minute, "the claim allocated and reserved for the pod", func(ctx context.Context) (bool, error) {
		cl, err := rc.ResourceClaims(w.ns).Get(ctx, "two-gpus", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		a := cl.Status.Allocation
		if a == nil || len(cl.Status.ReservedFor) != 1 || cl.Status.ReservedFor[0].Name != "trainer" {
			return false, fmt.Errorf("claim status: allocation %v, reserved for %v", a, cl.Status.ReservedFor)
		}
		if len(a.Devices.Results) != 2 {
			return false, fmt.Errorf("%d devices allocated, want 2", len(a.Devices.Results))
		}
		for _, r := range a.Devices.Results {
			if r.Pool != node {
				return false, fmt.Errorf("device %s/%s allocated for a pod bound to %s", r.Pool, r.Device, node)
			}
		}
		return true, nil
	})
}

// testWorkloadAPI: two pods name a Workload API PodGroup of gang minCount
// 2, served at apiVersion; gpuplane-scheduler reads the gang at the
// version the cluster serves and binds both.
func testWorkloadAPI(t *testing.T, env *framework.Env, apiVersion string) {
	w := newWorld(t, env, 2, 8)
	gv, err := schema.ParseGroupVersion(apiVersion)
	if err != nil {
		t.Fatal(err)
	}
	dyn, _ := clients(t, env)
	pg := &unstructured.Unstructured{Object: map[string]any{"apiVersion": apiVersion, "kind": "PodGroup",
		"metadata": map[string]any{"name": "workload", "namespace": w.ns},
		"spec":     map[string]any{"schedulingPolicy": map[string]any{"gang": map[string]any{"minCount": int64(2)}}}}}
	if _, err := dyn.Resource(gv.WithResource("podgroups")).Namespace(w.ns).Create(t.Context(), pg, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating the Workload API PodGroup: %v", err)
	}
	var names []string
	for i := range 2 {
		p := w.pod(fmt.Sprintf("workload-%d", i)).GPUs(8).Obj()
		group := "workload"
		p.Spec.SchedulingGroup = &corev1.PodSchedulingGroup{PodGroupName: &group}
		w.create(t, p)
		names = append(names, p.Name)
	}
	placed := w.waitBound(t, names...)
	if placed[names[0]] == placed[names[1]] {
		t.Errorf("both 8-GPU pods bound to %s", placed[names[0]])
	}
}
