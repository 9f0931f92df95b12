package schedulerscale_test

import (
	"context"
	"fmt"
	"path/filepath"
	"sort"
	"sync"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"

	"github.com/gpuplane/gpuplane/test/integration/framework"
)

// BenchmarkJobGangs measures what a distributed training job submitted as
// it is (an Indexed Job of 8 workers x 8 GPUs, parallelism = completions,
// no PodGroup written) costs to start, under gpuplane-scheduler (which
// derives its gang from the Job) and under kube-scheduler (which places its
// pods one by one), on GPUPLANE_BENCH_JOB_NODES kwok nodes (default 100) of
// 8 GPUs:
//
//   - jobs=1: one job on the empty cluster; ms-to-all-bound is the time
//     from the Job's creation to its eighth worker bound (the Job
//     controller creating the pods included);
//   - jobs=2/free-nodes=12: two such jobs at once when only 12 nodes are
//     free (the rest cordoned): they cannot both run. bound-a and bound-b
//     are each job's workers bound once the cluster has settled (10 s
//     without a bind); deadlocked is 1 when both jobs have workers bound
//     and neither has all 8: GPUs held by jobs that cannot start.
//
// Each round starts its scheduler and waits until it has bound (and the
// round deleted) a probe pod that asks for nothing, so what is timed is the
// job, not the scheduler's start.
//
// Run with:
//
//	GPUPLANE_CONTROLPLANE_BIN=$PWD/bin go test -run '^$' -bench BenchmarkJobGangs -benchtime 1x -timeout 30m ./test/integration/schedulerscale/
func BenchmarkJobGangs(b *testing.B) {
	nodes := envInt("GPUPLANE_BENCH_JOB_NODES", 100)
	label := fmt.Sprintf("jobs-%d", nodes)
	gangNodes(b, label, nodes)
	runGangRounds(b, label, nodes, submitIndexedJob)
}

// gangNodes creates nodes kwok nodes of 8 GPUs labelled bench=label for
// the benchmark, installs gpuplane's CRDs and builds gpuplane-scheduler.
func gangNodes(b *testing.B, label string, nodes int) {
	objs := make([]*corev1.Node, nodes)
	for i := range objs {
		objs[i] = framework.GPUNode(fmt.Sprintf("%s-%04d", label, i)).GPUs(8).Label("bench", label).Obj()
	}
	if err := env.CreateNodes(b.Context(), objs, 32); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		if err := env.DeleteNodes(context.Background(), "bench="+label); err != nil {
			b.Logf("cleaning up: %v", err)
		}
	})
	env.WaitNodesReady(b, "bench="+label, nodes, 5*time.Minute)
	waitUntainted(b, "bench="+label)
	env.InstallCRDs(b, filepath.Join(framework.RepoRoot(), "deploy", "crds"))
	var err error
	if schedulerBin, err = framework.BuildCommand(b.Context(), b.TempDir(), "gpuplane-scheduler"); err != nil {
		b.Fatal(err)
	}
}

// runGangRounds runs the four rounds, one job and two jobs under each
// scheduler, with submit making the workloads.
func runGangRounds(b *testing.B, label string, nodes int, submit submitFunc) {
	for _, free := range []int{0, 12} {
		for _, sched := range []string{"gpuplane-scheduler", "kube-scheduler"} {
			name := fmt.Sprintf("nodes=%d/jobs=1/scheduler=%s", nodes, sched)
			if free > 0 {
				name = fmt.Sprintf("nodes=%d/jobs=2/free-nodes=%d/scheduler=%s", nodes, free, sched)
			}
			b.Run(name, func(b *testing.B) {
				for b.Loop() {
					gangRound(b, label, sched, free, submit)
				}
			})
		}
	}
}

// gangLabel is the pod label that says which of a round's workloads a pod
// belongs to.
const gangLabel = "bench-gang"

// gangPods and gangGPUs are the shape of every round's workload: 8 pods
// of 8 GPUs.
const (
	gangPods = 8
	gangGPUs = 8
)

// A submitFunc creates a workload named name in ns whose pods (gangPods of
// them, gangGPUs GPUs each) are for scheduler schedName, on the nodes
// labelled bench=label, with the pod label gangLabel=name.
type submitFunc func(ctx context.Context, ns, name, schedName, label string) error

// gangPodSpec is the pod spec of a workload's every pod.
func gangPodSpec(schedName, label, container string) corev1.PodSpec {
	return corev1.PodSpec{SchedulerName: schedName, RestartPolicy: corev1.RestartPolicyNever,
		NodeSelector: map[string]string{"bench": label},
		Tolerations:  framework.Pod("", "x").Obj().Spec.Tolerations,
		Containers: []corev1.Container{{Name: container, Image: "trainer",
			Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{framework.ResourceGPU: *resource.NewQuantity(gangGPUs, resource.DecimalSI)}}}}}
}

// submitIndexedJob creates an Indexed Job of gangPods workers,
// parallelism = completions.
func submitIndexedJob(ctx context.Context, ns, name, schedName, label string) error {
	workers := int32(gangPods)
	mode := batchv1.IndexedCompletion
	j := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: batchv1.JobSpec{Parallelism: &workers, Completions: &workers, CompletionMode: &mode,
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{gangLabel: name}},
				Spec: gangPodSpec(schedName, label, "worker")}}}
	_, err := env.Client.BatchV1().Jobs(ns).Create(ctx, j, metav1.CreateOptions{})
	return err
}

// cordon marks all but the first free nodes of the label unschedulable
// (free 0: none), or undoes it.
func cordon(b *testing.B, label string, free int, on bool) {
	list, err := env.Client.CoreV1().Nodes().List(b.Context(), metav1.ListOptions{LabelSelector: "bench=" + label})
	if err != nil {
		b.Fatal(err)
	}
	sort.Slice(list.Items, func(i, j int) bool { return list.Items[i].Name < list.Items[j].Name })
	for i, n := range list.Items {
		want := on && free > 0 && i >= free
		if n.Spec.Unschedulable == want {
			continue
		}
		patch := fmt.Sprintf(`{"spec":{"unschedulable":%t}}`, want)
		if _, err := env.Client.CoreV1().Nodes().Patch(b.Context(), n.Name, "application/merge-patch+json", []byte(patch), metav1.PatchOptions{}); err != nil {
			b.Fatal(err)
		}
	}
}

// gangRound runs one round: one workload on the free cluster (free 0), or
// two at once with only free nodes schedulable, under scheduler sched.
func gangRound(b *testing.B, label, sched string, free int, submit submitFunc) {
	b.StopTimer()
	defer b.StartTimer() // runs last, after the clean-up
	ns, err := env.Client.CoreV1().Namespaces().Create(b.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "gangs-"}}, metav1.CreateOptions{})
	if err != nil {
		b.Fatal(err)
	}
	defer func() {
		cordon(b, label, free, false)
		if err := env.Client.CoreV1().Namespaces().Delete(context.Background(), ns.Name, metav1.DeleteOptions{}); err != nil {
			b.Logf("deleting namespace %s: %v", ns.Name, err)
		}
		framework.Eventually(b, 5*time.Minute, "round's pods gone", func(ctx context.Context) (bool, error) {
			list, err := env.Client.CoreV1().Pods(ns.Name).List(ctx, metav1.ListOptions{})
			if err != nil {
				return false, err
			}
			for _, p := range list.Items {
				_ = env.Client.CoreV1().Pods(ns.Name).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: new(int64(0))})
			}
			return len(list.Items) == 0, fmt.Errorf("%d pods left", len(list.Items))
		})
	}()
	cordon(b, label, free, true)

	var mu sync.Mutex
	bound := map[string]map[string]time.Time{} // workload, pod
	last := time.Now()
	factory := informers.NewSharedInformerFactoryWithOptions(env.Client, 0, informers.WithNamespace(ns.Name))
	inf := factory.Core().V1().Pods().Informer()
	seen := func(obj any) {
		p, ok := obj.(*corev1.Pod)
		if !ok || p.Spec.NodeName == "" || p.Labels[gangLabel] == "" {
			return
		}
		w := p.Labels[gangLabel]
		mu.Lock()
		defer mu.Unlock()
		if bound[w] == nil {
			bound[w] = map[string]time.Time{}
		}
		if _, ok := bound[w][p.Name]; !ok {
			bound[w][p.Name] = time.Now()
			last = time.Now()
		}
	}
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: seen, UpdateFunc: func(_, o any) { seen(o) }}); err != nil {
		b.Fatal(err)
	}
	stop := make(chan struct{})
	defer close(stop)
	factory.Start(stop)
	factory.WaitForCacheSync(stop)

	_, stopSched := startScheduler(b, round{scheduler: sched})
	defer stopSched()
	schedName := "default-scheduler"
	if sched == "gpuplane-scheduler" {
		schedName = "gpuplane-scheduler"
	}
	// What is timed is the workload, not the scheduler's start: a pod
	// that asks for nothing, bound and gone, says it is serving.
	waitSchedulerServing(b, ns.Name, schedName, label)
	jobs := []string{"a"}
	if free > 0 {
		jobs = []string{"a", "b"}
	}
	created := map[string]time.Time{}
	b.StartTimer()
	for _, name := range jobs {
		created[name] = time.Now()
		if err := submit(b.Context(), ns.Name, name, schedName, label); err != nil {
			b.Fatalf("creating workload %s: %v", name, err)
		}
	}
	// Settled: every workload whole, or 10 s without a bind.
	settled := func() bool {
		mu.Lock()
		defer mu.Unlock()
		whole := 0
		for _, j := range jobs {
			if len(bound[j]) == gangPods {
				whole++
			}
		}
		return whole == len(jobs) || time.Since(last) > 10*time.Second
	}
	deadline := time.Now().Add(3 * time.Minute)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for !settled() && time.Now().Before(deadline) {
		<-tick.C
	}
	b.StopTimer()
	mu.Lock()
	defer mu.Unlock()
	if free == 0 {
		if len(bound["a"]) != gangPods {
			b.Fatalf("%d of %d pods bound", len(bound["a"]), gangPods)
		}
		var end time.Time
		for _, t := range bound["a"] {
			if t.After(end) {
				end = t
			}
		}
		b.ReportMetric(float64(end.Sub(created["a"]).Milliseconds()), "ms-to-all-bound")
		return
	}
	na, nb := len(bound["a"]), len(bound["b"])
	dead := 0
	if na > 0 && nb > 0 && na < gangPods && nb < gangPods {
		dead = 1
	}
	b.ReportMetric(float64(na), "bound-a")
	b.ReportMetric(float64(nb), "bound-b")
	b.ReportMetric(float64(dead), "deadlocked")
	b.Logf("%s: a %d/%d bound, b %d/%d bound (%s)", sched, na, gangPods, nb, gangPods, map[bool]string{true: "deadlocked", false: "no deadlock"}[dead == 1])
}

// waitSchedulerServing creates a pod for schedName that asks for no GPU,
// waits until it is bound, deletes it and waits until it is gone.
func waitSchedulerServing(b *testing.B, ns, schedName, label string) {
	p := framework.Pod(ns, "scheduler-probe").SchedulerName(schedName).NodeSelector("bench", label).Obj()
	if _, err := env.Client.CoreV1().Pods(ns).Create(b.Context(), p, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	framework.Eventually(b, 60*time.Second, schedName+" binding a probe pod", func(ctx context.Context) (bool, error) {
		got, err := env.Client.CoreV1().Pods(ns).Get(ctx, p.Name, metav1.GetOptions{})
		return err == nil && got.Spec.NodeName != "", err
	})
	if err := env.Client.CoreV1().Pods(ns).Delete(b.Context(), p.Name, metav1.DeleteOptions{GracePeriodSeconds: new(int64(0))}); err != nil {
		b.Fatal(err)
	}
	framework.Eventually(b, 60*time.Second, "the probe pod gone", func(ctx context.Context) (bool, error) {
		_, err := env.Client.CoreV1().Pods(ns).Get(ctx, p.Name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), err
	})
}
