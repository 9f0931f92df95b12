// Package schedulerscale_test measures gpuplane-scheduler against
// kube-scheduler on the same API server in the same run: many kwok GPU
// nodes, thousands of single-GPU pods, throughput and creation-to-binding
// latency for each, and each scheduler's resident memory once every pod is
// bound. Both run as processes of their own, started for each round (the
// benchmark builds cmd/gpuplane-scheduler and runs the control plane's
// kube-scheduler binary with a configuration of its own), with the same
// client budget (500 QPS, burst 1000).
//
//	GPUPLANE_CONTROLPLANE_BIN=$PWD/bin go test -run '^$' -bench BenchmarkSchedulerAtScale -benchtime 1x -timeout 180m ./test/integration/schedulerscale/
//
// GPUPLANE_BENCH_NODES sets the node count (default 1000; pods are 8 per
// node). GPUPLANE_BENCH_HEAP_DIR, when set, runs gpuplane-scheduler with
// --profiling and saves there, once every pod of a round is bound, its
// runtime memory statistics as they are (<round>.heap.memstats: heap in use,
// idle, released, the next GC's goal) and then its heap profile after a GC
// (<round>.heap, which go tool pprof reads), to see what the resident
// memory holds. Each round reports the scheduler's RSS then
// (sched-rss-MiB) and its peak over the round (sched-peak-rss-MiB).
//
// The package's other benchmarks compare the two schedulers on pods with
// ResourceClaims (dra_test.go), on training jobs as users submit them
// (jobs_test.go, pytorchjob_test.go) and on kube-scheduler's own
// scheduler_perf workloads (schedperf_test.go), whose harness
// TestSchedulerPerfSmoke runs at 10 nodes in the integration tier.
package schedulerscale_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
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
	"github.com/gpuplane/gpuplane/internal/localcluster"
	"github.com/gpuplane/gpuplane/internal/testutil/build"
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
	// The benchmarks and TestSchedulerPerfSmoke (the scheduler_perf
	// harness at a few nodes, run by the integration tier) share one
	// control plane.
	cfg := localcluster.DefaultConfig()
	// Each round starts the scheduler it measures; the control plane's
	// own kube-scheduler would be a third process competing for the API.
	cfg.Scheduler = false
	cfg.ComponentQPS, cfg.ComponentBurst = qps, burst
	// A Job's pods run until deleted, as training workers do: kwok's
	// pod-complete stage would finish them at once and free their GPUs
	// (BenchmarkJobGangs).
	cfg.KwokStages = slices.DeleteFunc(localcluster.DefaultKwokStages(), func(s string) bool { return strings.HasSuffix(s, "/pod-complete.yaml") })
	os.Exit(framework.Main(m, cfg, &env))
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// round is one measured run of one scheduler.
type round struct {
	scheduler string // gpuplane-scheduler or kube-scheduler
	pods      int
	gang      int // pods per PodGroup; 1 for lone pods
	// backlog creates every pod before the scheduler starts, so that
	// throughput is the scheduler's own and not the creation rate.
	backlog bool
	// gcPercent is gpuplane-scheduler's --gc-percent; 0 leaves its default.
	gcPercent int
	// build names the gpuplane-scheduler binary bin, when a run compares
	// builds (GPUPLANE_BENCH_GPUPLANE_BINS); empty: the one built from
	// this tree.
	build, bin string
}

func (r round) name(nodes int) string {
	start := "burst"
	if r.backlog {
		start = "backlog"
	}
	name := fmt.Sprintf("nodes=%d/pods=%d/gang=%d/start=%s/scheduler=%s", nodes, r.pods, r.gang, start, r.scheduler)
	if r.gcPercent > 0 {
		name += fmt.Sprintf("/gc=%d", r.gcPercent)
	}
	if r.build != "" {
		name += "/build=" + r.build
	}
	return name
}

// BenchmarkSchedulerAtScale creates the nodes once, then runs rounds:
//
//   - start=burst: the scheduler runs, then nodes x 8 single-GPU pods are
//     created at once by 64 concurrent creators. Latency (creation to a
//     watcher seeing the node) is measured here; throughput is bounded by
//     how fast the API server creates pods.
//   - start=backlog: the pods are created first and the scheduler started
//     afterwards: throughput is pods / (last bind - scheduler start), the
//     scheduler's own speed.
//   - gang=8: nodes x 4 pods in PodGroups of 8 (gpuplane only; kube-scheduler
//     has no gangs). A sampler lists the pods' bindings (from a watch) and
//     then the PodGroups (a quorum read, so never older than the pods) every
//     200 ms and classifies each gang with some but not all members bound:
//     mid-bind when its PodGroup records a whole placement that includes
//     every bound member (the binds of a committed gang in flight), partial
//     otherwise. partial-gangs-max must be 0.
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
		// The control plane is torn down after this; a delete of thousands
		// of nodes that times out loses no result, so it only logs.
		if err := env.DeleteNodes(context.Background(), "bench="+label); err != nil {
			b.Logf("cleaning up: %v", err)
		}
	})
	// kwok readies about ten nodes a second on a quiet machine; a loaded
	// one needs more than 10 minutes for 5,000.
	env.WaitNodesReady(b, "bench="+label, nodes, max(10*time.Minute, time.Duration(nodes)*300*time.Millisecond))
	waitUntainted(b, "bench="+label)
	_, file, _, _ := runtime.Caller(0)
	root := filepath.Join(filepath.Dir(file), "..", "..", "..")
	dyn := env.InstallCRDs(b, filepath.Join(root, "deploy", "crds"))
	builds, err := parseBuilds(os.Getenv("GPUPLANE_BENCH_GPUPLANE_BINS"))
	if err != nil {
		b.Fatal(err)
	}
	if len(builds) == 0 {
		if schedulerBin, err = framework.BuildCommand(b.Context(), b.TempDir(), "gpuplane-scheduler"); err != nil {
			b.Fatal(err)
		}
	}
	// GPUPLANE_BENCH_ROUNDS picks rounds by kind (burst, backlog, gang;
	// default all): a backlog-only run at 5,000 nodes compares the two
	// schedulers' memory with every pod bound in well under the two hours
	// of the full set.
	kinds := map[string]bool{"burst": true, "backlog": true, "gang": true}
	if v := os.Getenv("GPUPLANE_BENCH_ROUNDS"); v != "" {
		kinds = map[string]bool{}
		for _, k := range strings.Split(v, ",") {
			kinds[strings.TrimSpace(k)] = true
		}
	}
	rounds := []round{
		{scheduler: "gpuplane-scheduler", pods: nodes * 8, gang: 1},
		{scheduler: "kube-scheduler", pods: nodes * 8, gang: 1},
		{scheduler: "gpuplane-scheduler", pods: nodes * 8, gang: 1, backlog: true},
		{scheduler: "kube-scheduler", pods: nodes * 8, gang: 1, backlog: true},
		// 500 gangs of 8 on 1,000 nodes: half the GPUs.
		{scheduler: "gpuplane-scheduler", pods: nodes * 4, gang: 8},
	}
	// GPUPLANE_BENCH_GC_PERCENTS (e.g. "100,50") runs each
	// gpuplane-scheduler round once per --gc-percent, to weigh memory
	// against throughput in one run.
	if v := os.Getenv("GPUPLANE_BENCH_GC_PERCENTS"); v != "" {
		var expanded []round
		for _, r := range rounds {
			if r.scheduler != "gpuplane-scheduler" {
				expanded = append(expanded, r)
				continue
			}
			for _, f := range strings.Split(v, ",") {
				n, err := strconv.Atoi(strings.TrimSpace(f))
				if err != nil || n < 10 {
					b.Fatalf("GPUPLANE_BENCH_GC_PERCENTS: %q is not a --gc-percent", f)
				}
				r.gcPercent = n
				expanded = append(expanded, r)
			}
		}
		rounds = expanded
	}
	// GPUPLANE_BENCH_GPUPLANE_BINS ("name=path,name=path,...") compares
	// builds of gpuplane-scheduler, not the two schedulers: every
	// gpuplane-scheduler round runs once per entry in the order given
	// (repeat the entries to alternate them, so that load from elsewhere
	// falls on both), and kube-scheduler's rounds are left out.
	if len(builds) > 0 {
		var expanded []round
		for _, r := range rounds {
			if r.scheduler != "gpuplane-scheduler" {
				continue
			}
			for _, bd := range builds {
				r.build, r.bin = bd[0], bd[1]
				expanded = append(expanded, r)
			}
		}
		rounds = expanded
	}
	for _, r := range rounds {
		kind := "burst"
		switch {
		case r.gang > 1:
			kind = "gang"
		case r.backlog:
			kind = "backlog"
		}
		if !kinds[kind] {
			continue
		}
		b.Run(r.name(nodes), func(b *testing.B) {
			for b.Loop() {
				run(b, dyn, r)
			}
		})
	}
}

// parseBuilds reads GPUPLANE_BENCH_GPUPLANE_BINS: name=path pairs, comma
// separated, each path an executable.
func parseBuilds(v string) ([][2]string, error) {
	var out [][2]string
	for f := range strings.SplitSeq(v, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		name, path, ok := strings.Cut(f, "=")
		if !ok || name == "" || strings.ContainsAny(name, "/ ") {
			return nil, fmt.Errorf("GPUPLANE_BENCH_GPUPLANE_BINS: %q is not name=path (a name without / or spaces)", f)
		}
		if st, err := os.Stat(path); err != nil || st.IsDir() || st.Mode()&0o111 == 0 {
			return nil, fmt.Errorf("GPUPLANE_BENCH_GPUPLANE_BINS: %s: %q is not an executable file", name, path)
		}
		out = append(out, [2]string{name, path})
	}
	return out, nil
}

func waitUntainted(b testing.TB, selector string) {
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

// startScheduler starts the round's scheduler as a process and returns its
// pid and a stop function. kube-scheduler gets a configuration of its own:
// the admin kubeconfig, the shared client budget, no leader election, no
// serving port.
func startScheduler(b testing.TB, r round) (int, func()) {
	ctx, cancel := context.WithCancel(context.Background())
	var cmd *exec.Cmd
	switch r.scheduler {
	case "gpuplane-scheduler":
		serve := []string{"--serve-address", ""}
		if heapDir != "" || cpuProfileDir != "" {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				b.Fatal(err)
			}
			profileAddr = ln.Addr().String()
			_ = ln.Close()
			serve = []string{"--serve-address", profileAddr, "--profiling"}
		}
		if r.gcPercent > 0 {
			serve = append(serve, "--gc-percent", strconv.Itoa(r.gcPercent))
		}
		// GPUPLANE_BENCH_SCHEDULER_ARGS adds flags of its own to every
		// gpuplane-scheduler a benchmark starts (--bind-workers 256, say),
		// to weigh a setting in the same run's conditions.
		serve = append(serve, strings.Fields(os.Getenv("GPUPLANE_BENCH_SCHEDULER_ARGS"))...)
		bin := schedulerBin
		if r.bin != "" {
			bin = r.bin
		}
		cmd = exec.CommandContext(ctx, bin, append([]string{"--kubeconfig", env.ControlPlane.Kubeconfig(), "--leader-elect=false",
			"--kube-api-qps", strconv.Itoa(qps), "--kube-api-burst", strconv.Itoa(burst), "--log-level", "warn"}, serve...)...)
		cmd.Stderr = os.Stderr
	default:
		dir := b.TempDir()
		cfg := filepath.Join(dir, "kube-scheduler.yaml")
		body := fmt.Sprintf("apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n"+
			"clientConnection:\n  kubeconfig: %q\n  qps: %d\n  burst: %d\nleaderElection:\n  leaderElect: false\n",
			env.ControlPlane.Kubeconfig(), qps, burst)
		if err := os.WriteFile(cfg, []byte(body), 0o600); err != nil {
			b.Fatal(err)
		}
		logf, err := os.Create(filepath.Join(dir, "kube-scheduler.log"))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = logf.Close() })
		cmd = exec.CommandContext(ctx, filepath.Join(env.ControlPlane.BinDir(), localcluster.BinScheduler),
			"--config="+cfg, "--secure-port=0")
		cmd.Stdout, cmd.Stderr = logf, logf
	}
	cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
	// A benchmark killed mid-round must not leave its scheduler running.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	return cmd.Process.Pid, func() {
		cancel()
		if err := cmd.Wait(); err != nil && ctx.Err() == nil {
			b.Errorf("%s: %v", r.scheduler, err)
		}
	}
}

// heapDir is GPUPLANE_BENCH_HEAP_DIR, cpuProfileDir
// GPUPLANE_BENCH_CPU_PROFILE_DIR (BenchmarkSchedulerPerf); profileAddr
// where the running gpuplane-scheduler serves /debug/pprof/ when either is
// set.
var (
	heapDir       = os.Getenv("GPUPLANE_BENCH_HEAP_DIR")
	cpuProfileDir = os.Getenv("GPUPLANE_BENCH_CPU_PROFILE_DIR")
	profileAddr   string
)

// saveHeap writes gpuplane-scheduler's runtime memory statistics as they
// are (path + ".memstats", before any forced GC: what the resident memory is
// made of) and then its heap profile after a GC, to path.
func saveHeap(b testing.TB, path string) {
	save := func(query, to string) {
		ctx, cancel := context.WithTimeout(b.Context(), time.Minute)
		defer cancel()
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+profileAddr+"/debug/pprof/heap?"+query, nil)
		if err != nil {
			b.Fatal(err)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			b.Errorf("fetching the heap profile: %v", err)
			return
		}
		defer resp.Body.Close()
		f, err := os.Create(to)
		if err != nil {
			b.Fatal(err)
		}
		defer f.Close()
		if _, err := io.Copy(f, resp.Body); err != nil {
			b.Errorf("saving the heap profile: %v", err)
		}
	}
	save("debug=1", path+".memstats")
	save("gc=1", path)
	b.Logf("heap profile of gpuplane-scheduler in %s, its memory statistics in %s.memstats", path, path)
}

// watcher records when each pod of a namespace is first seen bound.
type watcher struct {
	mu      sync.Mutex
	created map[string]time.Time
	bound   map[string]time.Time
	members map[string][]string // bound pod names per PodGroup
}

func watch(b testing.TB, ns string) *watcher {
	w := &watcher{created: map[string]time.Time{}, bound: map[string]time.Time{}, members: map[string][]string{}}
	factory := informers.NewSharedInformerFactoryWithOptions(env.Client, 0, informers.WithNamespace(ns))
	inf := factory.Core().V1().Pods().Informer()
	seen := func(obj any) {
		p, ok := obj.(*corev1.Pod)
		if !ok || p.Spec.NodeName == "" || p.Labels["probe"] != "" {
			return
		}
		now := time.Now()
		w.mu.Lock()
		defer w.mu.Unlock()
		if _, ok := w.bound[p.Name]; !ok {
			w.bound[p.Name] = now
			if g := p.Labels[v1alpha1.PodGroupLabel]; g != "" {
				w.members[g] = append(w.members[g], p.Name)
			}
		}
	}
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: seen, UpdateFunc: func(_, o any) { seen(o) }}); err != nil {
		b.Fatal(err)
	}
	stop := make(chan struct{})
	factory.Start(stop)
	b.Cleanup(func() {
		close(stop)
		factory.Shutdown()
	})
	factory.WaitForCacheSync(stop)
	return w
}

func (w *watcher) boundCount() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.bound)
}

// createPods creates the pods with 64 concurrent creators, recording when
// each create call started.
func createPods(b testing.TB, w *watcher, pods []*corev1.Pod) {
	var wg sync.WaitGroup
	sem := make(chan struct{}, 64)
	errs := make(chan error, 1)
	for _, p := range pods {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			t := time.Now()
			if _, err := env.Client.CoreV1().Pods(p.Namespace).Create(context.Background(), p, metav1.CreateOptions{}); err != nil {
				select {
				case errs <- err:
				default:
				}
				return
			}
			w.mu.Lock()
			w.created[p.Name] = t
			w.mu.Unlock()
		})
	}
	wg.Wait()
	select {
	case err := <-errs:
		b.Fatalf("creating pods: %v", err)
	default:
	}
}

// gangSampler counts, every 200 ms, the gangs with some but not all members
// bound, split into mid-bind (a committed placement covers them) and
// partial (none does).
type gangSampler struct {
	maxMidBind, maxPartial, samples int
	stop, done                      chan struct{}
}

func sampleGangs(dyn dynamic.Interface, w *watcher, ns string, size int) *gangSampler {
	s := &gangSampler{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		t := time.NewTicker(200 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-s.stop:
				return
			case <-t.C:
			}
			w.mu.Lock()
			partly := map[string][]string{}
			for g, names := range w.members {
				if len(names) < size {
					partly[g] = slices.Clone(names)
				}
			}
			w.mu.Unlock()
			if len(partly) == 0 {
				s.samples++
				continue
			}
			list, err := dyn.Resource(v1alpha1.PodGroupsResource).Namespace(ns).List(context.Background(), metav1.ListOptions{})
			if err != nil {
				continue
			}
			records := map[string]map[string]bool{}
			for i := range list.Items {
				var pg v1alpha1.PodGroup
				if err := kruntime.DefaultUnstructuredConverter.FromUnstructured(list.Items[i].Object, &pg); err != nil {
					continue
				}
				if len(pg.Status.Placement) >= int(pg.Spec.MinMember) {
					rec := map[string]bool{}
					for _, m := range pg.Status.Placement {
						rec[m.Pod] = true
					}
					records[pg.Name] = rec
				}
			}
			mid, partial := 0, 0
			for g, names := range partly {
				covered := records[g] != nil
				for _, n := range names {
					covered = covered && records[g][n]
				}
				if covered {
					mid++
				} else {
					partial++
				}
			}
			s.samples++
			s.maxMidBind, s.maxPartial = max(s.maxMidBind, mid), max(s.maxPartial, partial)
		}
	}()
	return s
}

func (s *gangSampler) finish() {
	close(s.stop)
	<-s.done
}

func run(b *testing.B, dyn dynamic.Interface, r round) {
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
	if r.scheduler == "gpuplane-scheduler" {
		schedName = v1alpha1.SchedulerName
	}
	if r.gang > 1 {
		for g := 0; g < r.pods/r.gang; g++ {
			pg := build.PodGroup(ns, fmt.Sprintf("g%05d", g), int32(r.gang)).Obj()
			u, err := kruntime.DefaultUnstructuredConverter.ToUnstructured(pg)
			if err != nil {
				b.Fatal(err)
			}
			if _, err := dyn.Resource(v1alpha1.PodGroupsResource).Namespace(ns).Create(b.Context(), &unstructured.Unstructured{Object: u}, metav1.CreateOptions{}); err != nil {
				b.Fatal(err)
			}
		}
	}
	pods := make([]*corev1.Pod, r.pods)
	for i := range pods {
		pods[i] = framework.Pod(ns, fmt.Sprintf("p%05d", i)).GPUs(1).SchedulerName(schedName).Obj()
		if r.gang > 1 {
			pods[i].Labels[v1alpha1.PodGroupLabel] = fmt.Sprintf("g%05d", i/r.gang)
		}
	}
	w := watch(b, ns)

	var start time.Time
	var created time.Duration
	var pid int
	var stopScheduler func()
	if r.backlog {
		createPods(b, w, pods)
		created = 0
		b.StartTimer()
		start = time.Now()
		pid, stopScheduler = startScheduler(b, r)
	} else {
		pid, stopScheduler = startScheduler(b, r)
		// Both schedulers get to sync their informers before the burst:
		// one probe pod is bound first.
		probe := framework.Pod(ns, "probe").GPUs(1).SchedulerName(schedName).Label("probe", "yes").Obj()
		if _, err := env.Client.CoreV1().Pods(ns).Create(b.Context(), probe, metav1.CreateOptions{}); err != nil {
			b.Fatal(err)
		}
		framework.Eventually(b, 2*time.Minute, "the probe pod bound", func(ctx context.Context) (bool, error) {
			p, err := env.Client.CoreV1().Pods(ns).Get(ctx, "probe", metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			return p.Spec.NodeName != "", fmt.Errorf("%s has not bound it yet", r.scheduler)
		})
		var zero int64
		if err := env.Client.CoreV1().Pods(ns).Delete(b.Context(), "probe", metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		start = time.Now()
	}
	defer stopScheduler()
	var sampler *gangSampler
	if r.gang > 1 {
		sampler = sampleGangs(dyn, w, ns, r.gang)
	}
	if !r.backlog {
		createPods(b, w, pods)
		created = time.Since(start)
	}
	framework.Eventually(b, 20*time.Minute, fmt.Sprintf("%d pods bound by %s", r.pods, r.scheduler), func(context.Context) (bool, error) {
		n := w.boundCount()
		return n == r.pods, fmt.Errorf("%d of %d bound", n, r.pods)
	})
	b.StopTimer()
	if sampler != nil {
		sampler.finish()
	}

	var first, last time.Time
	lat := make([]float64, 0, r.pods)
	w.mu.Lock()
	for name, t := range w.bound {
		if first.IsZero() || t.Before(first) {
			first = t
		}
		if t.After(last) {
			last = t
		}
		if c, ok := w.created[name]; ok && !r.backlog {
			lat = append(lat, t.Sub(c).Seconds()*1000)
		}
	}
	w.mu.Unlock()
	elapsed := last.Sub(start).Seconds()
	b.ReportMetric(float64(r.pods)/elapsed, "pods/s")
	b.ReportMetric(elapsed, "last-bind-s")
	if rss, err := framework.ProcStatusKiB(pid, "VmRSS"); err == nil {
		b.ReportMetric(float64(rss)/1024, "sched-rss-MiB")
		if peak, err := framework.ProcStatusKiB(pid, "VmHWM"); err == nil {
			b.ReportMetric(float64(peak)/1024, "sched-peak-rss-MiB")
		}
	} else {
		b.Logf("reading the scheduler's memory: %v", err)
	}
	// The scheduler's own CPU time for the round (its start and informer
	// sync included): on a shared machine its wall time follows the load
	// as much as the scheduler.
	if cpu, err := framework.ProcCPUSeconds(pid); err == nil {
		b.ReportMetric(cpu, "sched-cpu-s")
	} else {
		b.Logf("reading the scheduler's CPU time: %v", err)
	}
	if heapDir != "" && r.scheduler == "gpuplane-scheduler" {
		saveHeap(b, filepath.Join(heapDir, strings.ReplaceAll(b.Name(), "/", "_")+".heap"))
	}
	if r.backlog {
		b.ReportMetric(first.Sub(start).Seconds(), "first-bind-s")
		b.Logf("%s: %d pods waiting, started; first bound after %.1fs, last after %.1fs: %.0f pods/s",
			r.scheduler, r.pods, first.Sub(start).Seconds(), elapsed, float64(r.pods)/elapsed)
	} else {
		slices.Sort(lat)
		p50, p99 := lat[len(lat)/2], lat[len(lat)*99/100]
		b.ReportMetric(p50, "p50-ms")
		b.ReportMetric(p99, "p99-ms")
		b.ReportMetric(created.Seconds(), "create-s")
		// What the scheduler still had to do once every pod existed.
		b.ReportMetric(elapsed-created.Seconds(), "drain-s")
		b.Logf("%s: %d pods, created in %.1fs, last bound at %.1fs: %.0f pods/s, p50 %.0f ms, p99 %.0f ms",
			r.scheduler, r.pods, created.Seconds(), elapsed, float64(r.pods)/elapsed, p50, p99)
	}
	if sampler != nil {
		partialAtEnd := 0
		w.mu.Lock()
		for _, names := range w.members {
			if len(names) != r.gang {
				partialAtEnd++
			}
		}
		w.mu.Unlock()
		b.ReportMetric(float64(sampler.maxMidBind), "mid-bind-gangs-max")
		b.ReportMetric(float64(sampler.maxPartial), "partial-gangs-max")
		b.ReportMetric(float64(partialAtEnd), "partial-gangs-at-end")
		b.Logf("gangs: %d samples, at most %d mid-bind (committed) and %d partial at once, %d partly bound at the end",
			sampler.samples, sampler.maxMidBind, sampler.maxPartial, partialAtEnd)
	}

	// Free the nodes for the next round: one delete per pod, in parallel
	// (a single DeleteCollection of thousands of pods outlives the API
	// server's request timeout).
	var zero int64
	var delErr error
	var delMu sync.Mutex
	var wg sync.WaitGroup
	sem := make(chan struct{}, 64)
	for _, p := range pods {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			err := env.Client.CoreV1().Pods(ns).Delete(context.Background(), p.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero})
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
