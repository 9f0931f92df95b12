package schedulerscale_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpuplane/gpuplane/api/scheduling/v1alpha1"
	"github.com/gpuplane/gpuplane/test/integration/framework"
)

// BenchmarkDRAClaimsAtScale measures pods that ask for one GPU through a
// ResourceClaimTemplate, scheduled by gpuplane-scheduler and by
// kube-scheduler (its DynamicResources plugin) in the same run, on kwok
// nodes with no device-plugin GPUs whose 8 GPUs each the benchmark
// publishes in a ResourceSlice of gpuplane's driver, as gpuplane-agent
// would:
//
//	GPUPLANE_CONTROLPLANE_BIN=$PWD/bin go test -run '^$' -bench BenchmarkDRAClaimsAtScale -benchtime 1x -timeout 120m ./test/integration/schedulerscale/
//
// (make bench-dra-scale). Each round creates the pods first and waits
// until kube-controller-manager has made every pod's claim, then starts
// the scheduler: pods/s is pods / (last bind - scheduler start), the
// scheduler's own speed, claim writes included. Rounds alternate between
// the schedulers, GPUPLANE_BENCH_DRA_ROUNDS times each (default 3).
// GPUPLANE_BENCH_NODES sets the nodes (default 1000), GPUPLANE_BENCH_DRA_PODS
// the pods per round (default 4 per node: half the GPUs). After each round
// the claims are checked: every pod bound has its claim allocated on its
// node, and no device is allocated twice.
func BenchmarkDRAClaimsAtScale(b *testing.B) {
	nodes := envInt("GPUPLANE_BENCH_NODES", 1000)
	pods := envInt("GPUPLANE_BENCH_DRA_PODS", nodes*4)
	rounds := envInt("GPUPLANE_BENCH_DRA_ROUNDS", 3)
	label := fmt.Sprintf("dra-scale-%d", nodes)
	ctx := b.Context()
	objs := make([]*corev1.Node, nodes)
	for i := range objs {
		objs[i] = framework.GPUNode(fmt.Sprintf("%s-%05d", label, i)).GPUs(0).Label("bench", label).Obj()
	}
	if err := env.CreateNodes(ctx, objs, 64); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		if err := env.DeleteNodes(context.Background(), "bench="+label); err != nil {
			b.Logf("cleaning up: %v", err)
		}
	})
	rc := env.Client.ResourceV1()
	class := "bench-gpu"
	if _, err := rc.DeviceClasses().Create(ctx, framework.DRAGPUClass(class), metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		b.Fatal(err)
	}
	var wg sync.WaitGroup
	sem := make(chan struct{}, 64)
	var errOnce sync.Once
	var sliceErr error
	for _, n := range objs {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			if _, err := rc.ResourceSlices().Create(context.Background(), framework.DRAGPUSlice(n.Name, 8, "NVIDIA-H100-80GB-HBM3"), metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
				errOnce.Do(func() { sliceErr = err })
			}
		})
	}
	wg.Wait()
	if sliceErr != nil {
		b.Fatalf("publishing ResourceSlices: %v", sliceErr)
	}
	b.Cleanup(func() {
		_ = rc.ResourceSlices().DeleteCollection(context.Background(), metav1.DeleteOptions{}, metav1.ListOptions{FieldSelector: "spec.driver=gpu.gpuplane.io"})
	})
	env.WaitNodesReady(b, "bench="+label, nodes, max(10*time.Minute, time.Duration(nodes)*300*time.Millisecond))
	waitUntainted(b, "bench="+label)
	var err error
	if schedulerBin, err = framework.BuildCommand(ctx, b.TempDir(), "gpuplane-scheduler"); err != nil {
		b.Fatal(err)
	}
	for i := range rounds {
		for _, s := range []string{"gpuplane-scheduler", "kube-scheduler"} {
			b.Run(fmt.Sprintf("nodes=%d/pods=%d/round=%d/scheduler=%s", nodes, pods, i+1, s), func(b *testing.B) {
				for b.Loop() {
					runDRA(b, s, class, pods)
				}
			})
		}
	}
}

func runDRA(b *testing.B, scheduler, class string, n int) {
	b.StopTimer()
	defer b.StartTimer()
	ctx := b.Context()
	nsObj, err := env.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "dra-scale-"}}, metav1.CreateOptions{})
	if err != nil {
		b.Fatal(err)
	}
	ns := nsObj.Name
	env.WaitServiceAccount(b, ns, "default", time.Minute)
	tpl := &resourceapi.ResourceClaimTemplate{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "one-gpu"},
		Spec: resourceapi.ResourceClaimTemplateSpec{Spec: framework.DRAClaimSpec(class, 1)}}
	if _, err := env.Client.ResourceV1().ResourceClaimTemplates(ns).Create(ctx, tpl, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	schedName := corev1.DefaultSchedulerName
	if scheduler == "gpuplane-scheduler" {
		schedName = v1alpha1.SchedulerName
	}
	pods := make([]*corev1.Pod, n)
	for i := range pods {
		pods[i] = framework.Pod(ns, fmt.Sprintf("p%05d", i)).SchedulerName(schedName).ClaimTemplate("gpu", "one-gpu").Obj()
	}
	w := watch(b, ns)
	createPods(b, w, pods)
	// Every pod's claim made by kube-controller-manager before the
	// scheduler starts: what is measured is the scheduler.
	framework.Eventually(b, 20*time.Minute, "every pod's claim made", func(ctx context.Context) (bool, error) {
		list, err := env.Client.ResourceV1().ResourceClaims(ns).List(ctx, metav1.ListOptions{ResourceVersion: "0"})
		if err != nil {
			return false, err
		}
		return len(list.Items) == n, fmt.Errorf("%d of %d claims", len(list.Items), n)
	})
	framework.Eventually(b, 20*time.Minute, "every pod's claim named in its status", func(ctx context.Context) (bool, error) {
		list, err := env.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{ResourceVersion: "0"})
		if err != nil {
			return false, err
		}
		named := 0
		for _, p := range list.Items {
			if len(p.Status.ResourceClaimStatuses) == 1 {
				named++
			}
		}
		return named == n, fmt.Errorf("%d of %d pods name their claim", named, n)
	})
	b.StartTimer()
	start := time.Now()
	pid, stop := startScheduler(b, round{scheduler: scheduler})
	framework.Eventually(b, 30*time.Minute, fmt.Sprintf("%d pods bound by %s", n, scheduler), func(context.Context) (bool, error) {
		got := w.boundCount()
		return got == n, fmt.Errorf("%d of %d bound", got, n)
	})
	b.StopTimer()
	var first, last time.Time
	w.mu.Lock()
	for _, t := range w.bound {
		if first.IsZero() || t.Before(first) {
			first = t
		}
		if t.After(last) {
			last = t
		}
	}
	w.mu.Unlock()
	elapsed := last.Sub(start).Seconds()
	b.ReportMetric(float64(n)/elapsed, "pods/s")
	b.ReportMetric(elapsed, "last-bind-s")
	b.ReportMetric(first.Sub(start).Seconds(), "first-bind-s")
	if rss, err := framework.ProcStatusKiB(pid, "VmRSS"); err == nil {
		b.ReportMetric(float64(rss)/1024, "sched-rss-MiB")
	}
	b.Logf("%s: %d pods with one-GPU claims, first bound after %.1fs, last after %.1fs: %.0f pods/s", scheduler, n, first.Sub(start).Seconds(), elapsed, float64(n)/elapsed)
	stop()
	checkDRAClaims(b, ns, n)

	// The pods go at once (a namespace's deletion takes them gracefully,
	// for many minutes on a loaded machine), their claims after them, and
	// the next round waits until no claim holds a device.
	var zero int64
	var wg sync.WaitGroup
	sem := make(chan struct{}, 64)
	for _, p := range pods {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			err := env.Client.CoreV1().Pods(ns).Delete(context.Background(), p.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero})
			if err != nil && !apierrors.IsNotFound(err) {
				b.Errorf("deleting pod %s: %v", p.Name, err)
			}
		})
	}
	wg.Wait()
	framework.Eventually(b, 20*time.Minute, "the round's pods and claims gone", func(ctx context.Context) (bool, error) {
		pl, err := env.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{ResourceVersion: "0"})
		if err != nil {
			return false, err
		}
		cl, err := env.Client.ResourceV1().ResourceClaims(ns).List(ctx, metav1.ListOptions{ResourceVersion: "0"})
		if err != nil {
			return false, err
		}
		return len(pl.Items) == 0 && len(cl.Items) == 0, fmt.Errorf("%d pods and %d claims left", len(pl.Items), len(cl.Items))
	})
	if err := env.Client.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{}); err != nil {
		b.Fatal(err)
	}
}

// checkDRAClaims fails the round when a bound pod's claim is not
// allocated on its node or a device is allocated to two claims.
func checkDRAClaims(b *testing.B, ns string, n int) {
	ctx := b.Context()
	claims, err := env.Client.ResourceV1().ResourceClaims(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		b.Fatal(err)
	}
	pods, err := env.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		b.Fatal(err)
	}
	nodeOf := map[string]string{}
	for _, p := range pods.Items {
		if len(p.Status.ResourceClaimStatuses) == 1 && p.Status.ResourceClaimStatuses[0].ResourceClaimName != nil {
			nodeOf[*p.Status.ResourceClaimStatuses[0].ResourceClaimName] = p.Spec.NodeName
		}
	}
	owner := map[string]string{}
	allocated := 0
	for _, cl := range claims.Items {
		if cl.Status.Allocation == nil {
			continue
		}
		allocated++
		for _, r := range cl.Status.Allocation.Devices.Results {
			dev := r.Pool + "/" + r.Device
			if o, ok := owner[dev]; ok {
				b.Fatalf("device %s allocated to claims %s and %s", dev, o, cl.Name)
			}
			owner[dev] = cl.Name
			if node := nodeOf[cl.Name]; node != r.Pool {
				b.Fatalf("claim %s has device %s but its pod is on %q", cl.Name, dev, node)
			}
		}
	}
	if allocated != n {
		b.Fatalf("%d of %d claims allocated", allocated, n)
	}
}
