package schedulerscale_test

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpuplane/gpuplane/api/scheduling/v1alpha1"
	"github.com/gpuplane/gpuplane/test/integration/framework"
)

// TestStartWithBacklogBesideBoundPods restarts gpuplane-scheduler on
// nodes that pods it bound before already almost fill, with more pods
// waiting than the room left: its first cycles must count every bound pod,
// so that it fills the room and leaves the rest pending, every node within
// its allocatable. (Without waiting for its cache to be handed the
// informers' initial lists, it put up to 6 CPUs on nodes of 4 here.)
func TestStartWithBacklogBesideBoundPods(t *testing.T) {
	// 40 nodes of 4 CPUs hold 1,600 pods of 100m: 1,560 bound leave room
	// for 40 of the 200 waiting, however the first run packed them.
	const nodes, perNode, waitingPods = 40, 39, 200
	bench := "startup"
	objs := make([]*corev1.Node, nodes)
	for i := range objs {
		objs[i] = perfNode(fmt.Sprintf("%s-%05d", bench, i), bench)
	}
	if err := env.CreateNodes(t.Context(), objs, 64); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := env.DeleteNodes(context.Background(), "bench="+bench); err != nil {
			t.Logf("cleaning up: %v", err)
		}
	})
	env.WaitNodesReady(t, "bench="+bench, nodes, 5*time.Minute)
	waitUntainted(t, "bench="+bench)
	h := &perfHarness{nodes: nodes, bench: bench}
	buildScheduler(t)
	env.InstallCRDs(t, filepath.Join(framework.RepoRoot(), "deploy", "crds"))
	ns := perfNamespaces{init: h.namespace(t, "startup-bound-"), measure: h.namespace(t, "startup-waiting-")}
	defer h.cleanup(t, ns)

	bw := watch(t, ns.init)
	var bound []*corev1.Pod
	for n := range nodes {
		for i := range perNode {
			p := pausePod(roleInit)
			p.Namespace, p.Name = ns.init, fmt.Sprintf("bound-%02d-%02d", n, i)
			p.Spec.SchedulerName = v1alpha1.SchedulerName
			bound = append(bound, p)
		}
	}
	createPods(t, bw, bound)
	_, stopFirst := startScheduler(t, round{scheduler: "gpuplane-scheduler"})
	err := waitBound(t, bw, ns.init, len(bound), "gpuplane-scheduler")
	stopFirst()
	if err != nil {
		t.Fatal(err)
	}
	ww := watch(t, ns.measure)
	var waiting []*corev1.Pod
	for i := range waitingPods {
		p := pausePod(roleMeasure)
		p.Namespace, p.Name, p.Spec.SchedulerName = ns.measure, fmt.Sprintf("waiting-%03d", i), v1alpha1.SchedulerName
		waiting = append(waiting, p)
	}
	createPods(t, ww, waiting)
	_, stop := startScheduler(t, round{scheduler: "gpuplane-scheduler"})
	defer stop()
	// Every waiting pod bound or said to wait: the scheduler has decided
	// them all.
	framework.Eventually(t, 2*time.Minute, "every waiting pod bound or reported pending", func(ctx context.Context) (bool, error) {
		list, err := env.Client.CoreV1().Pods(ns.measure).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		undecided := 0
		for i := range list.Items {
			if p := &list.Items[i]; p.Spec.NodeName == "" && framework.SchedulerSays(p) == "" {
				undecided++
			}
		}
		return undecided == 0, fmt.Errorf("%d pods neither bound nor reported pending", undecided)
	})
	o, err := h.outcome(t.Context(), ns)
	if err != nil {
		t.Fatal(err)
	}
	if err := o.fit(); err != nil {
		t.Fatal(err)
	}
	if got := ww.boundCount(); got != nodes {
		t.Errorf("%d waiting pods bound, want the %d there is room for", got, nodes)
	}
}
