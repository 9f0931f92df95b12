// Package schedulerscale_test measures gpuplane-scheduler against
// kube-scheduler on the same API server in the same run: many kwok GPU
// nodes, thousands of single-GPU pods created at once, throughput and
// creation-to-binding latency for each, and each scheduler's resident
// memory once every pod is bound. Both run as processes of their own (the
// benchmark builds cmd/gpuplane-scheduler) with the same client budget
// (500 QPS, burst 1000).
//
//	GPUPLANE_CONTROLPLANE_BIN=$PWD/bin go test -run '^$' -bench BenchmarkSchedulerAtScale -benchtime 1x -timeout 60m ./test/integration/schedulerscale/
//
// GPUPLANE_BENCH_NODES sets the node count (default 1000; pods are 8 per
// node).
package schedulerscale_test

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"

	"github.com/gpuplane/gpuplane/api/scheduling/v1alpha1"
	"github.com/gpuplane/gpuplane/internal/controlplane"
	"github.com/gpuplane/gpuplane/internal/scheduler/adapter"
	"github.com/gpuplane/gpuplane/test/integration/framework"
)

// The client budget of both schedulers.
const (
	qps   = 500
	burst = 1000
)

var (
	env          *framework.Env
	schedulerBin string
)

func TestMain(m *testing.M) {
	flag.Parse()
	if f := flag.Lookup("test.bench"); f == nil || f.Value.String() == "" {
		// Only benchmarks here: without -bench there is nothing to start
		// a control plane for.
		fmt.Println("skipping: this package holds only benchmarks (run with -bench)")
		os.Exit(0)
	}
	cfg := controlplane.DefaultConfig()
	cfg.Scheduler = true
	cfg.ComponentQPS, cfg.ComponentBurst = qps, burst
	os.Exit(framework.Main(m, cfg, &env))
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// BenchmarkSchedulerAtScale creates the nodes once, then for each scheduler
// creates nodes x 8 single-GPU pods at once (nodes x 4 in gangs of 8 for
// the gang round) and waits until every one is
// bound. Metrics: pods/s from the first create to the last bind, and the
// p50 and p99 of each pod's creation-to-binding time as a watcher sees it.
// gang=8 runs gpuplane with the pods in PodGroups of 8 (kube-scheduler has
// no gangs) and reports mid-bind-gangs, the most gangs a 100 ms sampler saw
// with some but not all pods bound (a gang's binds are separate API calls
// sent together, so a sample can land inside that window), and
// partial-gangs-at-end, gangs left partly bound (must be 0).
func BenchmarkSchedulerAtScale(b *testing.B) {
	nodes := envInt("GPUPLANE_BENCH_NODES", 1000)
	label := fmt.Sprintf("scale-%d", nodes)
	objs := make([]*corev1.Node, nodes)
	for i := range objs {
		objs[i] = framework.GPUNode(fmt.Sprintf("%s-%05d", label, i)).GPUs(8).Label("bench", label).Obj()
	}
	if err := env.CreateNodes(b.Context(), objs, 64); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		if err := env.DeleteNodes(context.Background(), "bench="+label); err != nil {
			b.Error(err)
		}
	})
	env.WaitNodesReady(b, "bench="+label, nodes, 10*time.Minute)
	waitUntainted(b, "bench="+label)
	_, file, _, _ := runtime.Caller(0)
	root := filepath.Join(filepath.Dir(file), "..", "..", "..")
	dyn := env.InstallCRDs(b, filepath.Join(root, "deploy", "crds"))
	var err error
	if schedulerBin, err = framework.BuildCommand(b.Context(), b.TempDir(), "gpuplane-scheduler"); err != nil {
		b.Fatal(err)
	}
	for _, tc := range []struct {
		scheduler string
		pods      int
		gang      int
	}{
		{"gpuplane-scheduler", nodes * 8, 1},
		{"kube-scheduler", nodes * 8, 1},
		// 500 gangs of 8 on 1,000 nodes: half the GPUs.
		{"gpuplane-scheduler", nodes * 4, 8},
	} {
		b.Run(fmt.Sprintf("nodes=%d/pods=%d/gang=%d/scheduler=%s", nodes, tc.pods, tc.gang, tc.scheduler), func(b *testing.B) {
			for b.Loop() {
				round(b, dyn, tc.scheduler, tc.pods, tc.gang)
			}
		})
	}
}

func waitUntainted(b *testing.B, selector string) {
	framework.Eventually(b, 5*time.Minute, "nodes without not-ready taints", func(ctx context.Context) (bool, error) {
		list, err := env.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: selector, ResourceVersion: "0"})
		if err != nil {
			return false, err
		}
		for _, n := range list.Items {
			if len(n.Spec.Taints) > 0 {
				return false, fmt.Errorf("node %s has taint %s", n.Name, n.Spec.Taints[0].Key)
			}
		}
		return true, nil
	})
}

type podTimes struct {
	mu      sync.Mutex
	created map[string]time.Time
	bound   map[string]time.Time
	groups  map[string]int // bound pods per gang
}

func round(b *testing.B, dyn dynamic.Interface, scheduler string, pods, gang int) {
	b.StopTimer()
	defer b.StartTimer() // runs last, after the clean-up
	nsObj, err := env.Client.CoreV1().Namespaces().Create(b.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "scale-"}}, metav1.CreateOptions{})
	if err != nil {
		b.Fatal(err)
	}
	ns := nsObj.Name
	defer func() {
		if err := env.Client.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{}); err != nil {
			b.Error(err)
		}
	}()
	env.WaitServiceAccount(b, ns, "default", time.Minute)
	schedName := corev1.DefaultSchedulerName
	pid := env.ControlPlane.Pids()["kube-scheduler"]
	if scheduler == "gpuplane-scheduler" {
		// A process of its own, like kube-scheduler, with the same budget.
		schedName = v1alpha1.SchedulerName
		ctx, cancel := context.WithCancel(context.Background())
		cmd := exec.CommandContext(ctx, schedulerBin, "--kubeconfig", env.ControlPlane.Kubeconfig(), "--leader-elect=false",
			"--kube-api-qps", strconv.Itoa(qps), "--kube-api-burst", strconv.Itoa(burst), "--serve-address", "", "--log-level", "warn")
		cmd.Stderr = os.Stderr
		cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
		if err := cmd.Start(); err != nil {
			b.Fatal(err)
		}
		pid = cmd.Process.Pid
		defer func() {
			cancel()
			if err := cmd.Wait(); err != nil && ctx.Err() == nil {
				b.Errorf("gpuplane-scheduler: %v", err)
			}
		}()
	}
	if gang > 1 {
		for g := 0; g < pods/gang; g++ {
			pg := &v1alpha1.PodGroup{TypeMeta: metav1.TypeMeta{APIVersion: v1alpha1.SchemeGroupVersion.String(), Kind: "PodGroup"},
				ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("g%05d", g)}, Spec: v1alpha1.PodGroupSpec{MinMember: int32(gang)}}
			u, err := kruntime.DefaultUnstructuredConverter.ToUnstructured(pg)
			if err != nil {
				b.Fatal(err)
			}
			if _, err := dyn.Resource(adapter.PodGroupsResource).Namespace(ns).Create(b.Context(), &unstructured.Unstructured{Object: u}, metav1.CreateOptions{}); err != nil {
				b.Fatal(err)
			}
		}
	}
	pt := &podTimes{created: map[string]time.Time{}, bound: map[string]time.Time{}, groups: map[string]int{}}
	factory := informers.NewSharedInformerFactoryWithOptions(env.Client, 0, informers.WithNamespace(ns))
	inf := factory.Core().V1().Pods().Informer()
	seen := func(obj any) {
		p, ok := obj.(*corev1.Pod)
		if !ok || p.Spec.NodeName == "" {
			return
		}
		now := time.Now()
		pt.mu.Lock()
		if _, ok := pt.bound[p.Name]; !ok {
			pt.bound[p.Name] = now
			pt.groups[p.Labels[v1alpha1.PodGroupLabel]]++
		}
		pt.mu.Unlock()
	}
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: seen, UpdateFunc: func(_, o any) { seen(o) }}); err != nil {
		b.Fatal(err)
	}
	stop := make(chan struct{})
	factory.Start(stop)
	defer factory.Shutdown()
	defer close(stop)
	factory.WaitForCacheSync(stop)

	// Sample partial gangs while the pods are placed.
	maxPartial := 0
	sampleDone := make(chan struct{})
	sampling := make(chan struct{})
	go func() {
		defer close(sampleDone)
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-sampling:
				return
			case <-t.C:
			}
			pt.mu.Lock()
			partial := 0
			for g, n := range pt.groups {
				if g != "" && n < gang {
					partial++
				}
			}
			pt.mu.Unlock()
			maxPartial = max(maxPartial, partial)
		}
	}()

	b.StartTimer()
	start := time.Now()
	var wg sync.WaitGroup
	sem := make(chan struct{}, 64)
	errs := make(chan error, 1)
	for i := range pods {
		p := framework.Pod(ns, fmt.Sprintf("p%05d", i)).GPUs(1).SchedulerName(schedName).Obj()
		if gang > 1 {
			p.Labels[v1alpha1.PodGroupLabel] = fmt.Sprintf("g%05d", i/gang)
		}
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			t := time.Now()
			if _, err := env.Client.CoreV1().Pods(ns).Create(context.Background(), p, metav1.CreateOptions{}); err != nil {
				select {
				case errs <- err:
				default:
				}
				return
			}
			pt.mu.Lock()
			pt.created[p.Name] = t
			pt.mu.Unlock()
		})
	}
	wg.Wait()
	select {
	case err := <-errs:
		b.Fatalf("creating pods: %v", err)
	default:
	}
	created := time.Since(start)
	framework.Eventually(b, 15*time.Minute, fmt.Sprintf("%d pods bound by %s", pods, scheduler), func(context.Context) (bool, error) {
		pt.mu.Lock()
		defer pt.mu.Unlock()
		return len(pt.bound) == pods, fmt.Errorf("%d of %d bound", len(pt.bound), pods)
	})
	b.StopTimer()
	close(sampling)
	<-sampleDone

	var last time.Time
	lat := make([]float64, 0, pods)
	pt.mu.Lock()
	for name, t := range pt.bound {
		if t.After(last) {
			last = t
		}
		if c, ok := pt.created[name]; ok {
			lat = append(lat, t.Sub(c).Seconds()*1000)
		}
	}
	pt.mu.Unlock()
	slices.Sort(lat)
	b.Logf("%s: %d pods, created in %.1fs, last bound at %.1fs: %.0f pods/s, p50 %.0f ms, p99 %.0f ms",
		scheduler, pods, created.Seconds(), last.Sub(start).Seconds(), float64(pods)/last.Sub(start).Seconds(), lat[len(lat)/2], lat[len(lat)*99/100])
	b.ReportMetric(float64(pods)/last.Sub(start).Seconds(), "pods/s")
	if rss, err := framework.ProcStatusKiB(pid, "VmRSS"); err == nil {
		b.ReportMetric(float64(rss)/1024, "sched-rss-MiB")
	} else {
		b.Logf("reading the scheduler's memory: %v", err)
	}
	b.ReportMetric(lat[len(lat)/2], "p50-ms")
	b.ReportMetric(lat[len(lat)*99/100], "p99-ms")
	b.ReportMetric(created.Seconds(), "create-s")
	b.ReportMetric(last.Sub(start).Seconds(), "last-bind-s")
	// What the scheduler still had to do once every pod existed: creation
	// speed varies with the machine's load, this does much less.
	b.ReportMetric(last.Sub(start).Seconds()-created.Seconds(), "drain-s")
	if gang > 1 {
		b.ReportMetric(float64(maxPartial), "mid-bind-gangs")
		partial := 0
		pt.mu.Lock()
		for _, n := range pt.groups {
			if n%gang != 0 {
				partial++
			}
		}
		pt.mu.Unlock()
		b.ReportMetric(float64(partial), "partial-gangs-at-end")
	}

	// Free the nodes for the next round: one delete per pod, in parallel
	// (a single DeleteCollection of thousands of pods outlives the API
	// server's request timeout).
	var zero int64
	var delErr error
	var delMu sync.Mutex
	for name := range pt.bound {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			err := env.Client.CoreV1().Pods(ns).Delete(context.Background(), name, metav1.DeleteOptions{GracePeriodSeconds: &zero})
			if err != nil && !apierrors.IsNotFound(err) {
				delMu.Lock()
				delErr = err
				delMu.Unlock()
			}
		})
	}
	wg.Wait()
	if delErr != nil {
		b.Fatalf("deleting the round's pods: %v", delErr)
	}
	framework.Eventually(b, 10*time.Minute, "benchmark pods gone", func(ctx context.Context) (bool, error) {
		list, err := env.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{ResourceVersion: "0"})
		if err != nil {
			return false, err
		}
		return len(list.Items) == 0, fmt.Errorf("%d pods left", len(list.Items))
	})
}
