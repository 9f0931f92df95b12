// Package scheduler_test runs gpuplane-scheduler in-process against a real
// etcd, kube-apiserver, kube-controller-manager and kwok GPU nodes: gangs,
// queues, preemption with PodDisruptionBudgets, predicates, leader failover
// and restarts in the middle of a gang.
package scheduler_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	"github.com/gpuplane/gpuplane/api/scheduling/v1alpha1"
	"github.com/gpuplane/gpuplane/internal/adapter"
	"github.com/gpuplane/gpuplane/internal/localcluster"
	"github.com/gpuplane/gpuplane/internal/testutil/build"
	"github.com/gpuplane/gpuplane/test/integration/framework"
)

var (
	env *framework.Env
	dyn dynamic.Interface
)

func TestMain(m *testing.M) {
	os.Exit(framework.Main(m, localcluster.DefaultConfig(), &env))
}

// setup installs the CRDs from deploy/crds (once per package run) and
// returns a dynamic client.
func setup(t *testing.T) dynamic.Interface {
	t.Helper()
	if dyn == nil {
		dyn = env.InstallCRDs(t, filepath.Join(framework.RepoRoot(), "deploy", "crds"))
	}
	return dyn
}

var nodeSeq atomic.Int64

// gpuNodes returns n builders of 8-GPU kwok nodes with names unique in the
// package run.
func gpuNodes(n int, prefix string) []*framework.NodeBuilder {
	out := make([]*framework.NodeBuilder, n)
	for i := range out {
		out[i] = framework.GPUNode(fmt.Sprintf("%s-%d", prefix, nodeSeq.Add(1))).GPUs(8)
	}
	return out
}

// cluster is one test's slice of the shared control plane: its namespace,
// its nodes (labelled with the namespace) and its scheduler name, so that
// tests never see each other's pods.
type cluster struct {
	t         *testing.T
	ns        string
	scheduler string
	dyn       dynamic.Interface
	// invariants are checked at every event of their watch; the waits
	// fail as soon as one is broken.
	invariants []*invariant
}

func newCluster(t *testing.T, nodes ...*framework.NodeBuilder) *cluster {
	t.Helper()
	d := setup(t)
	ns := env.CreateNamespace(t)
	c := &cluster{t: t, ns: ns, scheduler: "gpuplane-" + ns, dyn: d}
	var objs []*corev1.Node
	for _, b := range nodes {
		objs = append(objs, b.Label("test-ns", ns).Obj())
	}
	if err := env.CreateNodes(t.Context(), objs, 10); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := env.DeleteNodes(context.Background(), "test-ns="+ns); err != nil {
			t.Error(err)
		}
	})
	env.WaitNodesReady(t, "test-ns="+ns, len(objs), 60*time.Second)
	// The controller-manager taints new nodes not-ready until it has seen
	// them Ready; pods that do not tolerate that wait, as they should.
	env.WaitNodesUntainted(t, "test-ns="+ns, 60*time.Second)
	return c
}

// run starts the scheduler in-process with cfg's zero fields defaulted for
// tests, and stops it when the returned function is called or the test
// ends.
func (c *cluster) run(cfg adapter.Config) (stop func()) {
	c.t.Helper()
	if cfg.RESTConfig == nil {
		cfg.RESTConfig = env.Config
	}
	if cfg.SchedulerName == "" {
		cfg.SchedulerName = c.scheduler
	}
	if cfg.CycleInterval == 0 {
		cfg.CycleInterval = 200 * time.Millisecond
	}
	if cfg.PartialGangGrace == 0 {
		cfg.PartialGangGrace = 2 * time.Second
	}
	return framework.RunScheduler(c.t, cfg)
}

// pod returns a builder for a pod of this test's scheduler.
func (c *cluster) pod(name string) *framework.PodBuilder {
	return framework.Pod(c.ns, name).SchedulerName(c.scheduler)
}

func (c *cluster) create(pods ...*framework.PodBuilder) {
	c.t.Helper()
	for _, b := range pods {
		c.createPod(b.Obj())
	}
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

func (c *cluster) podGroup(name string, minMember int32, queue string) {
	c.t.Helper()
	c.createObj(v1alpha1.PodGroupsResource, c.ns, build.PodGroup(c.ns, name, minMember).Queue(queue).Obj())
}

func (c *cluster) getPodGroup(ctx context.Context, name string) (*v1alpha1.PodGroup, error) {
	u, err := c.dyn.Resource(v1alpha1.PodGroupsResource).Namespace(c.ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	var pg v1alpha1.PodGroup
	if err := kruntime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &pg); err != nil {
		return nil, err
	}
	return &pg, nil
}

func (c *cluster) updatePodGroupStatus(pg *v1alpha1.PodGroup) {
	c.t.Helper()
	pg.APIVersion, pg.Kind = v1alpha1.SchemeGroupVersion.String(), "PodGroup"
	u, err := kruntime.DefaultUnstructuredConverter.ToUnstructured(pg)
	if err != nil {
		c.t.Fatal(err)
	}
	if _, err := c.dyn.Resource(v1alpha1.PodGroupsResource).Namespace(c.ns).UpdateStatus(c.t.Context(), &unstructured.Unstructured{Object: u}, metav1.UpdateOptions{}); err != nil {
		c.t.Fatalf("updating PodGroup %s status: %v", pg.Name, err)
	}
}

// pods lists the test's pods by name.
func (c *cluster) pods(ctx context.Context, selector string) (map[string]*corev1.Pod, error) {
	list, err := env.Client.CoreV1().Pods(c.ns).List(ctx, metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		return nil, err
	}
	out := map[string]*corev1.Pod{}
	for i := range list.Items {
		out[list.Items[i].Name] = &list.Items[i]
	}
	return out, nil
}

// bound counts the pods matching selector that have a node.
func (c *cluster) bound(ctx context.Context, selector string) (bound, total int, err error) {
	ps, err := c.pods(ctx, selector)
	if err != nil {
		return 0, 0, err
	}
	return countBound(ps), len(ps), nil
}

// countBound counts the pods of ps that have a node and are not being
// deleted.
func countBound(ps map[string]*corev1.Pod) (n int) {
	for _, p := range ps {
		if p.Spec.NodeName != "" && p.DeletionTimestamp == nil {
			n++
		}
	}
	return n
}

// waitBound waits until exactly want pods matching selector are bound.
func (c *cluster) waitBound(selector string, want int, timeout time.Duration) {
	c.t.Helper()
	framework.Eventually(c.t, timeout, fmt.Sprintf("%d bound pods matching %q", want, selector), func(ctx context.Context) (bool, error) {
		c.failIfBroken()
		ps, err := c.pods(ctx, selector)
		if err != nil {
			return false, err
		}
		n := countBound(ps)
		return n == want, fmt.Errorf("%d of %d bound%s", n, len(ps), whyWaiting(ps))
	})
}

// whyWaiting is what the scheduler last said of each waiting pod of ps,
// for a timeout to show.
func whyWaiting(ps map[string]*corev1.Pod) string {
	var b strings.Builder
	for _, name := range slices.Sorted(maps.Keys(ps)) {
		if p := ps[name]; p.Spec.NodeName == "" {
			if says := framework.SchedulerSays(p); says != "" {
				fmt.Fprintf(&b, "; %s: %s", p.Name, says)
			}
		}
	}
	return b.String()
}

// waitCondition waits until the pod says PodScheduled=False with a reason
// and a message containing want, and returns the message.
func (c *cluster) waitCondition(pod, reason, want string, timeout time.Duration) string {
	c.t.Helper()
	var msg string
	framework.Eventually(c.t, timeout, fmt.Sprintf("pod %s: PodScheduled=False %s %q", pod, reason, want), func(ctx context.Context) (bool, error) {
		c.failIfBroken()
		p, err := env.Client.CoreV1().Pods(c.ns).Get(ctx, pod, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		for _, cd := range p.Status.Conditions {
			if cd.Type == corev1.PodScheduled {
				msg = cd.Message
				if cd.Status == corev1.ConditionFalse && cd.Reason == reason && strings.Contains(cd.Message, want) {
					return true, nil
				}
				return false, fmt.Errorf("condition is %s %s %q", cd.Status, cd.Reason, cd.Message)
			}
		}
		return false, errors.New("no PodScheduled condition")
	})
	return msg
}

func deleteNow() metav1.DeleteOptions {
	var zero int64
	return metav1.DeleteOptions{GracePeriodSeconds: &zero}
}

func listBy(selector string) metav1.ListOptions { return metav1.ListOptions{LabelSelector: selector} }
