package metrics_test

import (
	"bufio"
	"bytes"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpuplane/gpuplane/internal/metrics"
	"github.com/gpuplane/gpuplane/internal/metrics/metricstest"
)

// discardWriter is an http.ResponseWriter that drops the body.
type discardWriter struct {
	h     http.Header
	bytes int
	code  int
}

func (w *discardWriter) Header() http.Header         { return w.h }
func (w *discardWriter) WriteHeader(code int)        { w.code = code }
func (w *discardWriter) Write(p []byte) (int, error) { w.bytes += len(p); return len(p), nil }

// timeSlicedHandler is the exporter of a DGX H100 with ten time-sliced
// pods per GPU (80 pods), reading pods from a real PodResources gRPC server
// on a unix socket, cgroups from a procfs tree and the kubelet checkpoint.
func timeSlicedHandler(b *testing.B) http.Handler {
	b.Helper()
	n := metricstest.NewNode(b, "dgxh100", "gpu-node-1")
	n.TimeSliced(b, "nvidia.com/gpu", 10)
	n.WriteCheckpoint(b)
	n.Clock.Advance(time.Minute)
	e, err := metrics.NewExporter(metrics.Options{
		GPUs: n.Backend, PodResources: metrics.NewSocketPodResources(metricstest.ServePodResources(b, n.Response())),
		ProcRoot: n.ProcRoot, CheckpointPath: n.CheckpointPath, Logger: quietLogger(),
	})
	if err != nil {
		b.Fatal(err)
	}
	h, err := metrics.NewHandler(e)
	if err != nil {
		b.Fatal(err)
	}
	return h
}

func scrapeOnce(b *testing.B, h http.Handler, req *http.Request, w *discardWriter) {
	clear(w.h)
	w.bytes, w.code = 0, http.StatusOK
	h.ServeHTTP(w, req)
	if w.code != http.StatusOK || w.bytes == 0 {
		b.Fatalf("scrape answered %d with %d bytes", w.code, w.bytes)
	}
}

// BenchmarkScrape80TimeSlicedPods is one /metrics scrape of a DGX H100
// with 80 time-sliced pods. Targets: under 20 ms and 2 MiB per scrape.
func BenchmarkScrape80TimeSlicedPods(b *testing.B) {
	for _, enc := range []string{"identity", "gzip"} {
		b.Run(enc, func(b *testing.B) {
			h := timeSlicedHandler(b)
			req := httptest.NewRequest(http.MethodGet, metrics.Path, nil)
			req.Header.Set("Accept-Encoding", enc)
			w := &discardWriter{h: http.Header{}}
			scrapeOnce(b, h, req, w) // connect to the PodResources socket
			b.ReportAllocs()
			for b.Loop() {
				scrapeOnce(b, h, req, w)
			}
			b.ReportMetric(float64(w.bytes), "body-bytes")
		})
	}
}

// BenchmarkRSSOver10000Scrapes scrapes the 80-pod node 10,000 times per
// iteration and reports the process's resident memory after a warm-up and
// at the end, and its growth: the exporter keeps no per-scrape state, so
// the growth should stay near zero.
func BenchmarkRSSOver10000Scrapes(b *testing.B) {
	h := timeSlicedHandler(b)
	req := httptest.NewRequest(http.MethodGet, metrics.Path, nil)
	w := &discardWriter{h: http.Header{}}
	for range 200 {
		scrapeOnce(b, h, req, w)
	}
	runtime.GC()
	start := rssKiB(b)
	var end int
	for b.Loop() {
		for range 10000 {
			scrapeOnce(b, h, req, w)
		}
		runtime.GC()
		end = rssKiB(b)
	}
	b.ReportMetric(float64(start)/1024, "rss-start-MiB")
	b.ReportMetric(float64(end)/1024, "rss-end-MiB")
	b.ReportMetric(float64(end-start)/1024, "rss-growth-MiB")
}

// rssKiB reads VmRSS from /proc/self/status.
func rssKiB(b *testing.B) int {
	b.Helper()
	f, err := os.ReadFile("/proc/self/status")
	if err != nil {
		b.Skipf("no /proc/self/status: %v", err)
	}
	s := bufio.NewScanner(bytes.NewReader(f))
	for s.Scan() {
		if rest, ok := strings.CutPrefix(s.Text(), "VmRSS:"); ok {
			kib, err := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(rest), " kB"))
			if err != nil {
				b.Fatal(err)
			}
			return kib
		}
	}
	b.Fatal("VmRSS missing from /proc/self/status")
	return 0
}
