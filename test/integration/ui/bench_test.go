package ui_test

import (
	"context"
	"fmt"
	"net/http/httptest"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpuplane/gpuplane/api/gpunode"
	"github.com/gpuplane/gpuplane/api/gpupod"
	"github.com/gpuplane/gpuplane/api/scheduling/v1alpha1"
	"github.com/gpuplane/gpuplane/internal/testutil/build"
	"github.com/gpuplane/gpuplane/internal/ui"
)

// feedCluster gives s a cluster of nodes DGX H100 nodes in 10 pools and
// 40 racks, and podsPerNode one-GPU pods bound on each, of 50 namespaces
// and 20 queues, through the same handlers an informer calls; no object
// is kept here once fed.
func feedCluster(s *ui.Server, nodes, podsPerNode int) {
	topo := `{"v":1,"gpus":8,"groups":[{"gpus":[0,1,2,3,4,5,6,7],"nvlinks":18}],"numa":[0,0,0,0,1,1,1,1]}`
	for q := range 20 {
		s.Feed(build.Queue(fmt.Sprintf("team-%02d", q)).GPUs(strconv.Itoa(nodes*8/20), "").Obj(), false)
	}
	start := metav1.NewTime(time.Now().Add(-time.Hour))
	for i := range nodes {
		name := fmt.Sprintf("gpu-node-%05d", i)
		n := build.Node(name).CPU("224").Memory("2Ti").Pods(110).Product("NVIDIA-H100-80GB-HBM3", 81559).GPUs(8).
			Label("karpenter.sh/nodepool", fmt.Sprintf("pool-%d", i%10)).Label("topology.kubernetes.io/zone", fmt.Sprintf("zone-%d", i%3)).
			Label("gpuplane.io/rack", fmt.Sprintf("rack-%02d", i%40)).Annotation(gpunode.TopologyAnnotation, topo).Obj()
		n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}
		s.Feed(n, false)
		for j := range podsPerNode {
			p := build.Pod(fmt.Sprintf("ns-%02d", (i*podsPerNode+j)%50), fmt.Sprintf("job-%05d-%d", i, j)).GPUs(1).
				SchedulerName(v1alpha1.SchedulerName).NodeName(name).Phase(corev1.PodRunning).
				Label(v1alpha1.QueueLabel, fmt.Sprintf("team-%02d", (i+j)%20)).Annotation(gpupod.GPUsAnnotation, strconv.Itoa(j%8)).
				UID(fmt.Sprintf("uid-%d-%d", i, j)).Obj()
			p.CreationTimestamp, p.Status.StartTime = start, &start
			s.Feed(p, false)
		}
	}
}

func newServer(tb testing.TB) *ui.Server {
	tb.Helper()
	s, err := ui.NewServer(ui.Config{SchedulerName: v1alpha1.SchedulerName, PoolLabels: []string{"karpenter.sh/nodepool"}, Price: 2.5})
	if err != nil {
		tb.Fatal(err)
	}
	return s
}

// rssMiB is the process's resident set.
func rssMiB(tb testing.TB) float64 {
	tb.Helper()
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		tb.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kib, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
			if err != nil {
				tb.Fatal(err)
			}
			return kib / 1024
		}
	}
	tb.Fatal("no VmRSS in /proc/self/status")
	return 0
}

// BenchmarkUIMemory5000Nodes40000Pods measures what `gpuplane ui` keeps
// for 5,000 nodes and 40,000 pods: the objects as its informers keep them
// (the scheduler's transform), the core's live view, and the page's state
// built from them, fed through the handlers an informer calls. It reports
// the process's resident set after a collection (rss-MiB, the Go heap in
// use (heap-MiB), how long one rebuild of the page's state takes
// (rebuild-ms) and the state's size (state-MiB). Run it alone: the
// resident set is the whole test process's.
func BenchmarkUIMemory5000Nodes40000Pods(b *testing.B) {
	for b.Loop() {
		s := newServer(b)
		feedCluster(s, 5000, 8)
		s.Rebuild()
		start := time.Now()
		s.Rebuild()
		b.ReportMetric(float64(time.Since(start).Milliseconds()), "rebuild-ms")
		b.ReportMetric(float64(len(s.StateJSON()))/(1<<20), "state-MiB")
		runtime.GC()
		debug.FreeOSMemory()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		b.ReportMetric(float64(ms.HeapInuse)/(1<<20), "heap-MiB")
		b.ReportMetric(rssMiB(b), "rss-MiB")
		runtime.KeepAlive(s)
	}
}

// BenchmarkFirstPaint measures, in headless Chromium, the time from the
// start of the page's navigation to the GPU map drawn with every node
// (the page's performance mark gpuplane-map-painted): loading the page,
// its event stream's first state and drawing the map.
func BenchmarkFirstPaint(b *testing.B) {
	for _, nodes := range []int{1000, 5000} {
		b.Run(fmt.Sprintf("nodes=%d", nodes), func(b *testing.B) {
			s := newServer(b)
			feedCluster(s, nodes, 8)
			s.Rebuild()
			srv := httptest.NewServer(s.Handler())
			// Registered before the browser's: the browser goes first, and
			// with it the page's event stream, which would keep Close
			// waiting.
			b.Cleanup(srv.Close)
			br := newBrowser(b)
			var total float64
			for b.Loop() {
				ctx, cancel := context.WithTimeout(br.ctx, time.Minute)
				if err := chromedp.Do(ctx, chromedp.Navigate(srv.URL+"/")); err != nil {
					b.Fatal(err)
				}
				cancel()
				br.waitJS(b, time.Minute, "the map painted", `performance.getEntriesByName('gpuplane-map-painted').length > 0`)
				total += eval[float64](b, br, `performance.getEntriesByName('gpuplane-map-painted')[0].startTime`)
			}
			b.ReportMetric(total/float64(b.N), "paint-ms")
			if errs := br.consoleErrors(); len(errs) > 0 {
				b.Errorf("console errors: %v", errs)
			}
		})
	}
}

// BenchmarkRebuildAfterOneChange5000Nodes measures what one change costs
// the server at 5,000 nodes and 40,000 pods: a pod bound, fed as an
// informer's handler gets it, then the page's state rebuilt and encoded
// (what every open page is then sent), then the pod gone again.
func BenchmarkRebuildAfterOneChange5000Nodes(b *testing.B) {
	s := newServer(b)
	feedCluster(s, 5000, 8)
	s.Rebuild()
	i := 0
	for b.Loop() {
		// Every GPU is held: the pod asks for a CPU.
		p := build.Pod("ns-extra", fmt.Sprintf("late-%d", i)).Request(corev1.ResourceCPU, "1").SchedulerName(v1alpha1.SchedulerName).
			NodeName(fmt.Sprintf("gpu-node-%05d", i%5000)).Phase(corev1.PodRunning).UID(fmt.Sprintf("late-%d", i)).Obj()
		s.Feed(p, false)
		s.Rebuild()
		s.Feed(p, true)
		i++
	}
}
