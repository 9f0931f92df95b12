package schedulerscale_test

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gpuplane/gpuplane/api/scheduling/v1alpha1"
	"github.com/gpuplane/gpuplane/test/integration/framework"
)

// BenchmarkSchedulerPerf replays kube-scheduler's own benchmark workloads
// (scheduler_perf: SchedulingBasic, SchedulingPodAntiAffinity,
// SchedulingPodAffinity, SchedulingPreferredPodAffinity,
// SchedulingPreferredPodAntiAffinity, TopologySpreading,
// PreferredTopologySpreading, SchedulingNodeAffinity, Unschedulable; see
// schedperf_workloads_test.go) on kwok nodes of upstream's node template,
// each scheduled by kube-scheduler and by gpuplane-scheduler in the same
// run:
//
//	GPUPLANE_CONTROLPLANE_BIN=$PWD/bin go test -run '^$' -bench BenchmarkSchedulerPerf -benchtime 1x -timeout 180m ./test/integration/schedulerscale/
//
// (make bench-scheduler-perf). A round of one workload and one scheduler:
// the scheduler starts and binds the init pods; it stops, the measured
// pods are created (and, for Unschedulable, the churn of unschedulable
// pods starts, one every 200 ms, and runs until the measured pods are
// bound); the scheduler starts again. pods/s is measured pods / (last bind
// - scheduler start): the scheduler's own speed, its start and informer
// sync included, not the API server's creation rate.
//
// After every round the outcome is checked from the API server, and a
// round that breaks it fails: every init and measured pod bound to one of
// the workload's nodes, no node holding more CPU, memory or pods than its
// allocatable, the workload's required constraint kept (no two
// anti-affine pods on a node, the affine pods in one zone, the zone skew
// within maxSkew, every pod on a node its node affinity admits, no
// unschedulable pod bound), and a preferred constraint kept by
// gpuplane-scheduler at least as well as by kube-scheduler in the same run
// (kube-scheduler's rounds of a workload run first). A workload stops at
// its first failed round.
//
// Each round also reports the CPU time the scheduler process took from its
// start to the last bind (sched-cpu-s) and what kube-apiserver, etcd and
// kwok took meanwhile (apiserver-cpu-s, etcd-cpu-s, kwok-cpu-s): where the
// two cores went.
//
// GPUPLANE_BENCH_PERF_NODES sets the nodes (default 500: upstream's
// "500Nodes" workloads, whose pod counts scale with it);
// GPUPLANE_BENCH_PERF_ROUNDS the rounds per scheduler and workload
// (default 3); GPUPLANE_BENCH_PERF_WORKLOADS a comma-separated list of
// workloads (default all). GPUPLANE_BENCH_CPU_PROFILE_DIR, when set, saves
// there gpuplane-scheduler's CPU profile of the first perfProfileSeconds of
// each measurement, and its /metrics once every measured pod is bound
// (cycles, phase timings, bind latencies). GPUPLANE_BENCH_PERF_BIND_ONLY=1 adds a third
// round to each pair, scheduler=bind-only: no scheduler, the benchmark
// binds every pod itself, round robin over the nodes (which keeps every
// workload's constraints at upstream's sizes), with 256 workers and the
// schedulers' client budget: the most pods/s the API server binds in this
// run, the ceiling of both schedulers. GPUPLANE_BENCH_PERF_BARE_BINDER=1
// adds scheduler=bare-binder: the same nodes, bound through
// gpuplane-scheduler's own bind pipeline (its connections, requests in
// flight, client budget and bind workers; startBareBinder) with no
// scheduling, so that gpuplane-scheduler's distance to it is its own time.
func BenchmarkSchedulerPerf(b *testing.B) {
	nodes := envInt("GPUPLANE_BENCH_PERF_NODES", 500)
	rounds := envInt("GPUPLANE_BENCH_PERF_ROUNDS", 3)
	ws, err := selectWorkloads(os.Getenv("GPUPLANE_BENCH_PERF_WORKLOADS"))
	if err != nil {
		b.Fatalf("GPUPLANE_BENCH_PERF_WORKLOADS: %v", err)
	}
	schedulers := perfSchedulers
	if os.Getenv("GPUPLANE_BENCH_PERF_BIND_ONLY") == "1" {
		schedulers = append(slices.Clone(schedulers), perfBindOnly)
	}
	if os.Getenv("GPUPLANE_BENCH_PERF_BARE_BINDER") == "1" {
		schedulers = append(slices.Clone(schedulers), perfBareBinder)
	}
	h := newPerfHarness(b, nodes)
	for _, w := range ws {
		h.label(b, w)
		prefs := perfPreferences{}
		failed := false
		for i := range rounds {
			for _, s := range schedulers {
				if failed {
					continue
				}
				name := fmt.Sprintf("%s/nodes=%d/init=%d/pods=%d/round=%d/scheduler=%s",
					w.name, nodes, scaled(w.initPods, nodes), scaled(w.measurePods, nodes), i+1, s)
				failed = !b.Run(name, func(b *testing.B) {
					for b.Loop() {
						b.StopTimer()
						res, err := h.run(b, w, s, prefs)
						b.StartTimer()
						if err != nil {
							b.Fatalf("%s under %s: %v", w.name, s, err)
						}
						res.report(b)
					}
				})
			}
		}
	}
}

// perfSmokeWorkloads are the workloads TestSchedulerPerfSmoke runs: every
// workload, so the integration tier keeps each constraint's check.
var perfSmokeWorkloads = []string{"SchedulingBasic", "SchedulingPodAntiAffinity", "SchedulingPodAffinityZones",
	"SchedulingPreferredPodAffinity", "SchedulingPreferredPodAntiAffinity", "TopologySpreading",
	"PreferredTopologySpreading", "SchedulingNodeAffinity", "Unschedulable"}

// perfSmokeNodes is the smoke run's size: upstream's counts scaled to 10
// nodes (20 measured pods a workload).
const perfSmokeNodes = 10

// The CPU profile of gpuplane-scheduler over each round's measurement
// (GPUPLANE_BENCH_CPU_PROFILE_DIR): the first perfProfileSeconds after its
// start, which go tool pprof reads.
const perfProfileSeconds = 5

// TestSchedulerPerfSmoke runs BenchmarkSchedulerPerf's harness at a few
// nodes, each of perfSmokeWorkloads once per scheduler and once by each of
// the benchmark's binders (bind-only, bare-binder), with the same checks:
// the integration tier keeps the harness itself working.
func TestSchedulerPerfSmoke(t *testing.T) {
	ws, err := selectWorkloads(strings.Join(perfSmokeWorkloads, ","))
	if err != nil {
		t.Fatal(err)
	}
	h := newPerfHarness(t, perfSmokeNodes)
	for _, w := range ws {
		h.label(t, w)
		prefs := perfPreferences{}
		for _, s := range append(slices.Clone(perfSchedulers), perfBindOnly, perfBareBinder) {
			t.Run(w.name+"/"+s, func(t *testing.T) {
				res, err := h.run(t, w, s, prefs)
				if err != nil {
					t.Fatal(err)
				}
				t.Logf("%s", res)
			})
		}
	}
}

// perfSchedulers are the schedulers of a round pair, kube-scheduler first:
// gpuplane-scheduler's preferences are compared with its.
var perfSchedulers = []string{"kube-scheduler", "gpuplane-scheduler"}

// perfBindOnly names the rounds the benchmark binds itself (startBindOnly),
// and perfBareBinder those it binds through gpuplane-scheduler's bind
// pipeline (startBareBinder).
const (
	perfBindOnly   = "bind-only"
	perfBareBinder = "bare-binder"
)

// perfStall is how long a round waits without a single new bind before it
// fails, saying what the scheduler says of a pod it left.
const perfStall = 90 * time.Second

// perfChurnInterval is upstream's churn interval (intervalMilliseconds).
const perfChurnInterval = 200 * time.Millisecond

func selectWorkloads(list string) ([]perfWorkload, error) {
	if strings.TrimSpace(list) == "" {
		return perfWorkloads, nil
	}
	var out []perfWorkload
	for _, name := range strings.Split(list, ",") {
		name = strings.TrimSpace(name)
		i := slices.IndexFunc(perfWorkloads, func(w perfWorkload) bool { return w.name == name })
		if i < 0 {
			known := make([]string, len(perfWorkloads))
			for j, w := range perfWorkloads {
				known[j] = w.name
			}
			return nil, fmt.Errorf("unknown workload %q (known: %s)", name, strings.Join(known, ", "))
		}
		out = append(out, perfWorkloads[i])
	}
	return out, nil
}

// perfPreferences are the preference measures of one workload's rounds
// so far, by scheduler.
type perfPreferences map[string][]float64

// perfHarness holds the nodes every workload runs on.
type perfHarness struct {
	nodes int
	bench string // the nodes' bench label
	// next is the node the bind-only rounds bind to next, round robin
	// across a round's init and measured pods.
	next int
}

// newPerfHarness creates the kwok nodes (upstream's template), the churn's
// PriorityClass and gpuplane's CRDs, and builds gpuplane-scheduler.
func newPerfHarness(tb testing.TB, nodes int) *perfHarness {
	h := &perfHarness{nodes: nodes, bench: fmt.Sprintf("schedperf-%d", nodes)}
	ctx := tb.Context()
	objs := make([]*corev1.Node, nodes)
	for i := range objs {
		objs[i] = perfNode(fmt.Sprintf("%s-%05d", h.bench, i), h.bench)
	}
	if err := env.CreateNodes(ctx, objs, 64); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if err := env.DeleteNodes(context.Background(), "bench="+h.bench); err != nil {
			tb.Logf("cleaning up: %v", err)
		}
	})
	env.WaitNodesReady(tb, "bench="+h.bench, nodes, max(5*time.Minute, time.Duration(nodes)*300*time.Millisecond))
	waitUntainted(tb, "bench="+h.bench)
	env.InstallCRDs(tb, filepath.Join(framework.RepoRoot(), "deploy", "crds"))
	pc := &schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: perfHighPriority}, Value: 10}
	if _, err := env.Client.SchedulingV1().PriorityClasses().Create(ctx, pc, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		tb.Fatal(err)
	}
	// The API server's Priority admission reads classes from an informer:
	// a dry-run create passes admission once it knows the class.
	probe := largeCPUPod(perfNamespaces{})
	probe.Namespace, probe.Name = metav1.NamespaceDefault, "schedperf-priority-probe"
	framework.Eventually(tb, 30*time.Second, "Priority admission sees "+perfHighPriority, func(ctx context.Context) (bool, error) {
		_, err := env.Client.CoreV1().Pods(probe.Namespace).Create(ctx, probe, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return err == nil, err
	})
	buildScheduler(tb)
	return h
}

// buildScheduler builds gpuplane-scheduler into the test's own directory
// for startScheduler: one built by an earlier test or benchmark went with
// its directory.
func buildScheduler(tb testing.TB) {
	var err error
	if schedulerBin, err = framework.BuildCommand(tb.Context(), tb.TempDir(), "gpuplane-scheduler"); err != nil {
		tb.Fatal(err)
	}
}

// label gives the nodes the workload's zones, round robin in name order,
// or takes the zone label away when it has none.
func (h *perfHarness) label(tb testing.TB, w perfWorkload) {
	var wg sync.WaitGroup
	var mu sync.Mutex
	var firstErr error
	sem := make(chan struct{}, 64)
	for i := range h.nodes {
		var zone any // JSON null removes the label
		if len(w.zones) > 0 {
			zone = w.zones[i%len(w.zones)]
		}
		patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"labels": map[string]any{labelZone: zone}}})
		if err != nil {
			tb.Fatal(err)
		}
		name := fmt.Sprintf("%s-%05d", h.bench, i)
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			if _, err := env.Client.CoreV1().Nodes().Patch(context.Background(), name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
				mu.Lock()
				if firstErr == nil {
					firstErr = fmt.Errorf("labelling node %s: %w", name, err)
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if firstErr != nil {
		tb.Fatal(firstErr)
	}
}

// perfResult is one round's measurement.
type perfResult struct {
	scheduler                        string
	pods                             int
	began                            time.Time
	firstBind, lastBind              time.Duration
	rssMiB                           float64
	preference                       *perfPreference
	preferenceValue, kubePreferences float64
	// cpu is the CPU seconds each process took over the measurement, by
	// component (scheduler, kube-apiserver, etcd, kwok).
	cpu map[string]float64
	// requests are the API server's requests over the measurement, by
	// verb and resource, from every client (kwok's and the
	// controller-manager's too).
	requests map[string]float64
}

func (r perfResult) podsPerSecond() float64 { return float64(r.pods) / r.lastBind.Seconds() }

func (r perfResult) String() string {
	s := fmt.Sprintf("%s: %d measured pods, started at %s, first bound after %.2fs, last after %.2fs: %.1f pods/s",
		r.scheduler, r.pods, r.began.UTC().Format("15:04:05.000"), r.firstBind.Seconds(), r.lastBind.Seconds(), r.podsPerSecond())
	if r.preference != nil {
		s += fmt.Sprintf("; %s: %g", r.preference.what, r.preferenceValue)
	}
	if len(r.requests) > 0 {
		keys := slices.SortedFunc(maps.Keys(r.requests), func(a, b string) int { return cmp.Compare(r.requests[b], r.requests[a]) })
		top := make([]string, 0, 6)
		for _, k := range keys[:min(6, len(keys))] {
			top = append(top, fmt.Sprintf("%s %.0f", k, r.requests[k]))
		}
		s += fmt.Sprintf("; API requests meanwhile: %.0f (%s)", r.totalRequests(), strings.Join(top, ", "))
	}
	return s
}

func (r perfResult) totalRequests() float64 {
	total := 0.0
	for _, v := range r.requests {
		total += v
	}
	return total
}

func (r perfResult) report(b *testing.B) {
	b.ReportMetric(r.podsPerSecond(), "pods/s")
	b.ReportMetric(r.lastBind.Seconds(), "last-bind-s")
	b.ReportMetric(r.firstBind.Seconds(), "first-bind-s")
	if r.rssMiB > 0 {
		b.ReportMetric(r.rssMiB, "sched-rss-MiB")
	}
	if r.preference != nil {
		b.ReportMetric(r.preferenceValue, r.preference.unit)
	}
	if len(r.requests) > 0 {
		b.ReportMetric(r.totalRequests(), "api-requests")
	}
	for _, c := range slices.Sorted(maps.Keys(r.cpu)) {
		b.ReportMetric(r.cpu[c], strings.TrimPrefix(strings.TrimPrefix(c, "kube-"), "gpuplane-")+"-cpu-s")
	}
	b.Logf("%s", r)
}

// run runs one round of w under scheduler s and checks its outcome; the
// error says how the outcome broke the workload, or why it did not end.
func (h *perfHarness) run(tb testing.TB, w perfWorkload, s string, prefs perfPreferences) (perfResult, error) {
	res := perfResult{scheduler: s, pods: scaled(w.measurePods, h.nodes), preference: w.preference}
	ns := perfNamespaces{init: h.namespace(tb, "schedperf-init-"), measure: h.namespace(tb, "schedperf-measure-")}
	defer h.cleanup(tb, ns)
	schedName := corev1.DefaultSchedulerName
	if s == "gpuplane-scheduler" {
		schedName = v1alpha1.SchedulerName
	}
	pods := func(shape perfPod, role perfRole, namespace string, n int) []*corev1.Pod {
		out := make([]*corev1.Pod, n)
		for i := range out {
			p := shape(ns)
			p.Namespace, p.Name, p.Spec.SchedulerName = namespace, fmt.Sprintf("%s-%05d", role, i), schedName
			out[i] = p
		}
		return out
	}

	start := func(namespace string) (int, func()) {
		stride := 1
		if w.bindOnlyOneZone {
			stride = len(w.zones)
		}
		switch s {
		case perfBindOnly:
			return 0, h.startBindOnly(tb, namespace, stride)
		case perfBareBinder:
			return 0, h.startBareBinder(tb, namespace, stride)
		}
		return startScheduler(tb, round{scheduler: s})
	}

	// 1. The init pods, bound by the scheduler under test.
	h.next = 0
	initWatch := watch(tb, ns.init)
	initPods := pods(w.init, roleInit, ns.init, scaled(w.initPods, h.nodes))
	createPods(tb, initWatch, initPods)
	_, stop := start(ns.init)
	err := waitBound(tb, initWatch, ns.init, len(initPods), s)
	stop()
	if err != nil {
		return res, fmt.Errorf("init pods: %w", err)
	}
	// What the scheduler made of them is its outcome too: checked before
	// the measured pods join.
	o, err := h.outcome(tb.Context(), ns)
	if err == nil {
		err = o.fit()
	}
	if err != nil {
		return res, fmt.Errorf("init pods: %w", err)
	}

	// 2. The measured pods wait, the churn runs, the scheduler starts.
	var churn *perfChurn
	if w.churn != nil {
		churn = startChurn(tb, w.churn, ns, schedName)
	}
	measureWatch := watch(tb, ns.measure)
	createPods(tb, measureWatch, pods(w.measure, roleMeasure, ns.measure, res.pods))
	components := env.ControlPlane.Pids()
	cpuBefore := map[string]float64{}
	for _, c := range perfComponents {
		cpuBefore[c], _ = procCPUSeconds(components[c])
	}
	requestsBefore, rerr := apiRequests(tb.Context())
	if rerr != nil {
		tb.Fatal(rerr)
	}
	began := time.Now()
	pid, stop := start(ns.measure)
	var profiled chan struct{}
	if cpuProfileDir != "" && s == "gpuplane-scheduler" {
		profiled = make(chan struct{})
		go func() {
			defer close(profiled)
			saveCPUProfile(tb, filepath.Join(cpuProfileDir, strings.NewReplacer("/", "_", "=", "-").Replace(tb.Name())+".cpu"))
		}()
	}
	err = waitBound(tb, measureWatch, ns.measure, res.pods, s)
	if after, rerr := apiRequests(tb.Context()); rerr == nil {
		res.requests = map[string]float64{}
		for k, v := range after {
			if d := v - requestsBefore[k]; d > 0 {
				res.requests[k] = d
			}
		}
	}
	res.cpu = map[string]float64{}
	for _, c := range perfComponents {
		if after, cerr := procCPUSeconds(components[c]); cerr == nil {
			res.cpu[c] = after - cpuBefore[c]
		}
	}
	if pid != 0 {
		if cpu, cerr := procCPUSeconds(pid); cerr == nil {
			res.cpu["scheduler"] = cpu
		}
	}
	if profiled != nil {
		<-profiled
		saveMetrics(tb, filepath.Join(cpuProfileDir, strings.NewReplacer("/", "_", "=", "-").Replace(tb.Name())+".metrics"))
	}
	if churn != nil {
		if cerr := churn.finish(); cerr != nil && err == nil {
			err = cerr
		}
	}
	if rss, rerr := framework.ProcStatusKiB(pid, "VmRSS"); pid != 0 && rerr == nil {
		res.rssMiB = float64(rss) / 1024
	}
	stop()
	if err != nil {
		return res, fmt.Errorf("measured pods: %w", err)
	}
	var first, last time.Time
	measureWatch.mu.Lock()
	for _, t := range measureWatch.bound {
		if first.IsZero() || t.Before(first) {
			first = t
		}
		last = later(last, t)
	}
	measureWatch.mu.Unlock()
	res.began, res.firstBind, res.lastBind = began, first.Sub(began), last.Sub(began)

	// 3. The outcome, read from the API server once the scheduler is gone.
	o, err = h.outcome(tb.Context(), ns)
	if err != nil {
		return res, err
	}
	if err := o.bound(); err != nil {
		return res, err
	}
	if err := o.fit(); err != nil {
		return res, err
	}
	if w.check != nil {
		if err := w.check(o); err != nil {
			return res, err
		}
	}
	if p := w.preference; p != nil {
		res.preferenceValue = p.measure(o)
		if s == "gpuplane-scheduler" {
			kube := prefs["kube-scheduler"]
			if len(kube) == 0 {
				return res, fmt.Errorf("a preferred constraint is compared with kube-scheduler's rounds of the same run, and none ran before")
			}
			sorted := slices.Sorted(slices.Values(kube))
			res.kubePreferences = sorted[len(sorted)/2]
			if res.preferenceValue > res.kubePreferences {
				return res, fmt.Errorf("preferred constraint kept worse than kube-scheduler: %s is %g, kube-scheduler's %g (median of %d rounds in this run)",
					p.what, res.preferenceValue, res.kubePreferences, len(kube))
			}
		}
		prefs[s] = append(prefs[s], res.preferenceValue)
	}
	return res, nil
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

func (h *perfHarness) namespace(tb testing.TB, prefix string) string {
	ns, err := env.Client.CoreV1().Namespaces().Create(tb.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: prefix}}, metav1.CreateOptions{})
	if err != nil {
		tb.Fatal(err)
	}
	env.WaitServiceAccount(tb, ns.Name, "default", time.Minute)
	return ns.Name
}

// waitBound waits until n pods of the watcher's namespace are bound. It
// fails after perfStall without a new bind, with what the scheduler says
// of a pod it left.
func waitBound(tb testing.TB, w *watcher, ns string, n int, scheduler string) error {
	ctx := tb.Context()
	seen, since := -1, time.Now()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		got := w.boundCount()
		if got == n {
			return nil
		}
		if got != seen {
			seen, since = got, time.Now()
		}
		if time.Since(since) > perfStall {
			says := ""
			list, err := env.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
			if err == nil {
				for i := range list.Items {
					if p := &list.Items[i]; p.Spec.NodeName == "" {
						says = fmt.Sprintf("; of pod %s %s says %s", p.Name, scheduler, cmpString(framework.SchedulerSays(p), "nothing"))
						break
					}
				}
			}
			return fmt.Errorf("%s bound %d of %d pods and then none for %s%s", scheduler, got, n, perfStall, says)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
}

func cmpString(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// perfChurn creates an unschedulable pod every perfChurnInterval in the
// init namespace until finished.
type perfChurn struct {
	stop, done chan struct{}
	err        error
}

// startChurn creates the churn's first pod before it returns, so that
// every round has one to check.
func startChurn(tb testing.TB, shape perfPod, ns perfNamespaces, schedName string) *perfChurn {
	c := &perfChurn{stop: make(chan struct{}), done: make(chan struct{})}
	create := func(i int) error {
		p := shape(ns)
		p.Namespace, p.Name, p.Spec.SchedulerName = ns.init, fmt.Sprintf("%s-%05d", roleChurn, i), schedName
		_, err := env.Client.CoreV1().Pods(ns.init).Create(context.Background(), p, metav1.CreateOptions{})
		return err
	}
	if err := create(0); err != nil {
		tb.Fatalf("creating the churn's first pod: %v", err)
	}
	go func() {
		defer close(c.done)
		tick := time.NewTicker(perfChurnInterval)
		defer tick.Stop()
		for i := 1; ; i++ {
			select {
			case <-c.stop:
				return
			case <-tick.C:
			}
			if err := create(i); err != nil {
				c.err = fmt.Errorf("creating the churn's pod %d: %w", i, err)
				return
			}
		}
	}()
	return c
}

func (c *perfChurn) finish() error {
	close(c.stop)
	<-c.done
	return c.err
}

// outcome reads the workload's nodes and the round's pods, a quorum read.
func (h *perfHarness) outcome(ctx context.Context, ns perfNamespaces) (*perfOutcome, error) {
	nodes, err := env.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: "bench=" + h.bench})
	if err != nil {
		return nil, fmt.Errorf("reading the nodes: %w", err)
	}
	o := &perfOutcome{nodes: map[string]*corev1.Node{}}
	for i := range nodes.Items {
		o.nodes[nodes.Items[i].Name] = &nodes.Items[i]
	}
	for _, n := range []string{ns.init, ns.measure} {
		list, err := env.Client.CoreV1().Pods(n).List(ctx, metav1.ListOptions{})
		if err != nil {
			return nil, fmt.Errorf("reading the pods of %s: %w", n, err)
		}
		for i := range list.Items {
			o.all = append(o.all, &list.Items[i])
		}
	}
	if len(o.nodes) != h.nodes {
		return nil, fmt.Errorf("%d nodes labelled bench=%s, want %d", len(o.nodes), h.bench, h.nodes)
	}
	return o, nil
}

// cleanup deletes the round's pods at once (a namespace's deletion takes
// them gracefully) and waits until they are gone, so the next round finds
// the nodes empty, then deletes the namespaces.
func (h *perfHarness) cleanup(tb testing.TB, ns perfNamespaces) {
	var zero int64
	var errs []error
	for _, n := range []string{ns.init, ns.measure} {
		list, err := env.Client.CoreV1().Pods(n).List(context.Background(), metav1.ListOptions{})
		if err != nil {
			errs = append(errs, err)
			continue
		}
		var wg sync.WaitGroup
		var mu sync.Mutex
		sem := make(chan struct{}, 64)
		for _, p := range list.Items {
			sem <- struct{}{}
			wg.Go(func() {
				defer func() { <-sem }()
				err := env.Client.CoreV1().Pods(n).Delete(context.Background(), p.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero})
				if err != nil && !apierrors.IsNotFound(err) {
					mu.Lock()
					errs = append(errs, fmt.Errorf("deleting pod %s/%s: %w", n, p.Name, err))
					mu.Unlock()
				}
			})
		}
		wg.Wait()
	}
	if err := errors.Join(errs...); err != nil {
		tb.Fatal(err)
	}
	framework.Eventually(tb, 10*time.Minute, "the round's pods gone", func(ctx context.Context) (bool, error) {
		left := 0
		for _, n := range []string{ns.init, ns.measure} {
			list, err := env.Client.CoreV1().Pods(n).List(ctx, metav1.ListOptions{ResourceVersion: "0"})
			if err != nil {
				return false, err
			}
			left += len(list.Items)
		}
		return left == 0, fmt.Errorf("%d pods left", left)
	})
	for _, n := range []string{ns.init, ns.measure} {
		if err := env.Client.CoreV1().Namespaces().Delete(context.Background(), n, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			tb.Error(err)
		}
	}
}
