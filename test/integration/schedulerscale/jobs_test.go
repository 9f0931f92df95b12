package schedulerscale_test

import (
	"context"
	"fmt"
	"path/filepath"
	"runtime"
	"sort"
	"sync"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
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
// Run with:
//
//	GPUPLANE_CONTROLPLANE_BIN=$PWD/bin go test -run '^$' -bench BenchmarkJobGangs -benchtime 1x -timeout 30m ./test/integration/schedulerscale/
func BenchmarkJobGangs(b *testing.B) {
	nodes := envInt("GPUPLANE_BENCH_JOB_NODES", 100)
	label := fmt.Sprintf("jobs-%d", nodes)
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
	_, file, _, _ := runtime.Caller(0)
	env.InstallCRDs(b, filepath.Join(filepath.Dir(file), "..", "..", "..", "deploy", "crds"))
	var err error
	if schedulerBin, err = framework.BuildCommand(b.Context(), b.TempDir(), "gpuplane-scheduler"); err != nil {
		b.Fatal(err)
	}
	for _, free := range []int{0, 12} {
		for _, sched := range []string{"gpuplane-scheduler", "kube-scheduler"} {
			name := fmt.Sprintf("nodes=%d/jobs=1/scheduler=%s", nodes, sched)
			if free > 0 {
				name = fmt.Sprintf("nodes=%d/jobs=2/free-nodes=%d/scheduler=%s", nodes, free, sched)
			}
			b.Run(name, func(b *testing.B) {
				for b.Loop() {
					jobRound(b, label, sched, nodes, free)
				}
			})
		}
	}
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

func jobRound(b *testing.B, label, sched string, nodes, free int) {
	b.StopTimer()
	defer b.StartTimer() // runs last, after the clean-up
	ns, err := env.Client.CoreV1().Namespaces().Create(b.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "jobs-"}}, metav1.CreateOptions{})
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
	bound := map[string]map[string]time.Time{} // job, pod
	last := time.Now()
	factory := informers.NewSharedInformerFactoryWithOptions(env.Client, 0, informers.WithNamespace(ns.Name))
	inf := factory.Core().V1().Pods().Informer()
	seen := func(obj any) {
		p, ok := obj.(*corev1.Pod)
		if !ok || p.Spec.NodeName == "" {
			return
		}
		job := p.Labels["job-name"]
		mu.Lock()
		defer mu.Unlock()
		if bound[job] == nil {
			bound[job] = map[string]time.Time{}
		}
		if _, ok := bound[job][p.Name]; !ok {
			bound[job][p.Name] = time.Now()
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
	// Both schedulers have their caches synced well within this: what is
	// timed is the job, not the scheduler's start.
	time.Sleep(3 * time.Second)
	schedName := "default-scheduler"
	if sched == "gpuplane-scheduler" {
		schedName = "gpuplane-scheduler"
	}
	jobs := []string{"a"}
	if free > 0 {
		jobs = []string{"a", "b"}
	}
	workers := int32(8)
	created := map[string]time.Time{}
	b.StartTimer()
	for _, name := range jobs {
		mode := batchv1.IndexedCompletion
		j := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: batchv1.JobSpec{Parallelism: &workers, Completions: &workers, CompletionMode: &mode,
				Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{SchedulerName: schedName, RestartPolicy: corev1.RestartPolicyNever,
					NodeSelector: map[string]string{"bench": label},
					Tolerations:  framework.Pod("", "x").Obj().Spec.Tolerations,
					Containers: []corev1.Container{{Name: "worker", Image: "trainer",
						Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{framework.ResourceGPU: resource.MustParse("8")}}}}}}}}
		created[name] = time.Now()
		if _, err := env.Client.BatchV1().Jobs(ns.Name).Create(b.Context(), j, metav1.CreateOptions{}); err != nil {
			b.Fatal(err)
		}
	}
	// Settled: every job whole, or 10 s without a bind.
	deadline := time.Now().Add(3 * time.Minute)
	for time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
		mu.Lock()
		whole := 0
		for _, j := range jobs {
			if len(bound[j]) == int(workers) {
				whole++
			}
		}
		quiet := time.Since(last) > 10*time.Second
		mu.Unlock()
		if whole == len(jobs) || quiet {
			break
		}
	}
	b.StopTimer()
	mu.Lock()
	defer mu.Unlock()
	if free == 0 {
		if len(bound["a"]) != int(workers) {
			b.Fatalf("%d of %d workers bound", len(bound["a"]), workers)
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
	if na > 0 && nb > 0 && na < int(workers) && nb < int(workers) {
		dead = 1
	}
	b.ReportMetric(float64(na), "bound-a")
	b.ReportMetric(float64(nb), "bound-b")
	b.ReportMetric(float64(dead), "deadlocked")
	b.Logf("%s: job a %d/8 bound, job b %d/8 bound (%s)", sched, na, nb, map[bool]string{true: "deadlocked", false: "no deadlock"}[dead == 1])
}
