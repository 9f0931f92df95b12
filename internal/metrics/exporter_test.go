package metrics_test

import (
	"context"
	"errors"
	"flag"
	"io"
	"log/slog"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/gpuplane/gpuplane/internal/gpu/sim"
	"github.com/gpuplane/gpuplane/internal/metrics"
	"github.com/gpuplane/gpuplane/internal/metrics/metricstest"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/")

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// newHandler returns a metrics handler for n on a fixed clock, so that the
// reported durations are exactly zero.
func newHandler(t testing.TB, n *metricstest.Node, lister metrics.PodResourcesLister, health metrics.HealthSource) http.Handler {
	t.Helper()
	e, err := metrics.NewExporter(metrics.Options{
		GPUs: n.Backend, PodResources: lister, ProcRoot: n.ProcRoot, CheckpointPath: n.CheckpointPath,
		Health: health, Clock: clocktesting.NewFakePassiveClock(time.Unix(0, 0)), Logger: quietLogger(),
	})
	if err != nil {
		t.Fatal(err)
	}
	h, err := metrics.NewHandler(e)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func scrape(t testing.TB, h http.Handler) string {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, metrics.Path, nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("GET /metrics: %d %s", rec.Code, rec.Body.String())
	}
	return rec.Body.String()
}

func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name+".golden")
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("reading golden file (run with -update to create it): %v", err)
	}
	if got != string(want) {
		t.Errorf("/metrics differs from %s (run with -update if the change is intended):\n%s", path, firstDiff(got, string(want)))
	}
}

func firstDiff(got, want string) string {
	g, w := strings.Split(got, "\n"), strings.Split(want, "\n")
	for i := 0; i < len(g) || i < len(w); i++ {
		var gl, wl string
		if i < len(g) {
			gl = g[i]
		}
		if i < len(w) {
			wl = w[i]
		}
		if gl != wl {
			return "line " + strconv.Itoa(i+1) + ":\n got: " + gl + "\nwant: " + wl
		}
	}
	return ""
}

type fakeHealth struct{ st metrics.HealthState }

func (f *fakeHealth) HealthState() metrics.HealthState { return f.st }

// sharedNode is a DGX H100 with two pods time-slicing GPU 0, two on GPU 1
// under the renamed resource nvidia.com/gpu.shared, one pod alone on GPU 2
// and an XID on GPU 5.
func sharedNode(t *testing.T) *metricstest.Node {
	n := metricstest.NewNode(t, "dgxh100", "gpu-node-1")
	devs := n.Devices(t)
	add := func(name string, g, replica int, resource string, pid uint32, mem uint64, util uint32) {
		n.AddPod(t, metricstest.Pod{Namespace: "ml", Name: name, Container: "main", Resource: resource,
			DeviceID: devs[g].UUID + "::" + strconv.Itoa(replica), GPU: g, PID: pid, MemMiB: mem, Util: util, CgroupV1: pid%2 == 1})
	}
	add("a", 0, 0, "nvidia.com/gpu", 101, 10240, 30)
	add("b", 0, 3, "nvidia.com/gpu", 102, 20480, 50)
	add("c", 1, 1, "nvidia.com/gpu.shared", 201, 4096, 10)
	add("d", 1, 7, "nvidia.com/gpu.shared", 202, 8192, 20)
	n.AddPod(t, metricstest.Pod{Namespace: "infer", Name: "solo", Container: "server", Resource: "nvidia.com/gpu",
		DeviceID: devs[2].UUID, GPU: 2, PID: 301, MemMiB: 40960, Util: 90})
	n.WriteCheckpoint(t)
	if err := n.Backend.InjectXID(5, 48); err != nil {
		t.Fatal(err)
	}
	n.Clock.Advance(time.Minute)
	return n
}

func TestGoldenMetrics(t *testing.T) {
	tests := []struct {
		name  string
		setup func(t *testing.T) (*metricstest.Node, metrics.PodResourcesLister, metrics.HealthSource)
		// between runs after a first scrape, before the golden one.
		between func(t *testing.T, n *metricstest.Node)
	}{
		{
			name: "dgxh100-shared",
			setup: func(t *testing.T) (*metricstest.Node, metrics.PodResourcesLister, metrics.HealthSource) {
				n := sharedNode(t)
				h := &fakeHealth{st: metrics.HealthState{Running: true, Devices: []metrics.DeviceHealth{{UUID: n.Devices(t)[5].UUID, Reason: "xid-48"}}}}
				return n, metrics.NewSocketPodResources(metricstest.ServePodResources(t, n.Response())), h
			},
		},
		{
			name: "dgxh100-no-kubelet",
			setup: func(t *testing.T) (*metricstest.Node, metrics.PodResourcesLister, metrics.HealthSource) {
				n := sharedNode(t)
				h := &fakeHealth{st: metrics.HealthState{Running: false, Reason: "subscribe-failed", Unmonitored: 8}}
				return n, metrics.NewSocketPodResources(filepath.Join(t.TempDir(), "absent.sock")), h
			},
		},
		{
			name: "dgxh100-gpu-lost",
			setup: func(t *testing.T) (*metricstest.Node, metrics.PodResourcesLister, metrics.HealthSource) {
				n := sharedNode(t)
				return n, &metricstest.StaticLister{Resp: n.Response()}, nil
			},
			between: func(t *testing.T, n *metricstest.Node) {
				if err := n.Backend.LoseGPU(1); err != nil {
					t.Fatal(err)
				}
			},
		},
		{
			name: "dgxh100-mig",
			setup: func(t *testing.T) (*metricstest.Node, metrics.PodResourcesLister, metrics.HealthSource) {
				n := metricstest.NewNode(t, "dgxh100", "gpu-node-2")
				ctx := context.Background()
				if err := n.Backend.SetMIGMode(ctx, 0, true); err != nil {
					t.Fatal(err)
				}
				for range 2 {
					gi, err := n.Backend.CreateGPUInstance(ctx, 0, "1g.10gb", nil)
					if err != nil {
						t.Fatal(err)
					}
					if _, err := n.Backend.CreateComputeInstance(ctx, 0, gi.ID, ""); err != nil {
						t.Fatal(err)
					}
				}
				migs := n.Devices(t)[0].MIGDevices
				if len(migs) != 2 {
					t.Fatalf("want 2 MIG devices, got %d", len(migs))
				}
				for k, m := range migs {
					n.AddPod(t, metricstest.Pod{Namespace: "ml", Name: "mig-" + strconv.Itoa(k), Container: "main", Resource: "nvidia.com/mig-1g.10gb",
						DeviceID: m.UUID, GPU: 0, MIG: &sim.MIGRef{GPUInstanceID: m.GPUInstanceID, ComputeInstanceID: m.ComputeInstanceID},
						PID: uint32(500 + k), MemMiB: uint64(2048 * (k + 1)), Util: uint32(40 + k)})
				}
				n.WriteCheckpoint(t)
				n.Clock.Advance(time.Minute)
				return n, &metricstest.StaticLister{Resp: n.Response()}, nil
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n, lister, health := tt.setup(t)
			h := newHandler(t, n, lister, health)
			if tt.between != nil {
				scrape(t, h)
				tt.between(t, n)
			}
			golden(t, tt.name, scrape(t, h))
		})
	}
}

// parse reads a /metrics body into families by name.
func parse(t testing.TB, body string) map[string]*dto.MetricFamily {
	t.Helper()
	p := expfmt.NewTextParser(model.LegacyValidation)
	mfs, err := p.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		t.Fatalf("parsing /metrics: %v", err)
	}
	return mfs
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

func TestPerPodSplitOfTimeSlicedGPUs(t *testing.T) {
	n := metricstest.NewNode(t, "dgxh100", "gpu-node-1")
	n.TimeSliced(t, "nvidia.com/gpu", 10)
	n.WriteCheckpoint(t)
	h := newHandler(t, n, &metricstest.StaticLister{Resp: n.Response()}, nil)
	mfs := parse(t, scrape(t, h))

	type key struct{ ns, pod string }
	gotMem, gotUtil := map[key]float64{}, map[key]float64{}
	for _, m := range mfs["gpuplane_pod_gpu_memory_used_bytes"].GetMetric() {
		gotMem[key{label(m, "namespace"), label(m, "pod")}] = m.GetGauge().GetValue()
	}
	for _, m := range mfs["gpuplane_pod_gpu_utilization_ratio"].GetMetric() {
		gotUtil[key{label(m, "namespace"), label(m, "pod")}] = m.GetGauge().GetValue()
	}
	if len(gotMem) != len(n.Pods) || len(gotUtil) != len(n.Pods) {
		t.Fatalf("per-pod series: %d memory, %d utilization, want %d each", len(gotMem), len(gotUtil), len(n.Pods))
	}
	for _, p := range n.Pods {
		k := key{p.Namespace, p.Name}
		if want := float64(p.MemMiB << 20); gotMem[k] != want {
			t.Errorf("pod %s/%s memory = %v, want %v", p.Namespace, p.Name, gotMem[k], want)
		}
		if want := float64(p.Util) / 100; gotUtil[k] != want {
			t.Errorf("pod %s/%s utilization = %v, want %v", p.Namespace, p.Name, gotUtil[k], want)
		}
	}
	// The GPU-wide series are not repeated per pod: shared GPUs carry no
	// pod label.
	for _, m := range mfs["DCGM_FI_DEV_GPU_UTIL"].GetMetric() {
		if label(m, "pod") != "" {
			t.Errorf("shared GPU %s has pod label %q", label(m, "UUID"), label(m, "pod"))
		}
	}
	if got := len(mfs["DCGM_FI_DEV_GPU_UTIL"].GetMetric()); got != 8 {
		t.Errorf("DCGM_FI_DEV_GPU_UTIL has %d series, want one per GPU (8)", got)
	}
}

func TestPodResourcesAbsentStillServes(t *testing.T) {
	n := sharedNode(t)
	tests := []struct {
		name       string
		lister     metrics.PodResourcesLister
		wantReason string
		wantOK     float64
	}{
		{name: "socket absent", lister: metrics.NewSocketPodResources(filepath.Join(t.TempDir(), "kubelet.sock")), wantReason: metrics.ReasonSocketAbsent, wantOK: 1},
		{name: "list fails", lister: &metricstest.StaticLister{Err: errors.New("rpc error: unavailable")}, wantReason: metrics.ReasonListFailed, wantOK: 0},
		{name: "disabled", lister: nil, wantReason: metrics.ReasonDisabled, wantOK: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			mfs := parse(t, scrape(t, newHandler(t, n, tt.lister, nil)))
			up := mfs["gpuplane_podresources_up"].GetMetric()
			if len(up) != 1 || up[0].GetGauge().GetValue() != 0 || label(up[0], "reason") != tt.wantReason {
				t.Errorf("gpuplane_podresources_up = %v, want 0 with reason %q", up, tt.wantReason)
			}
			if got := len(mfs["DCGM_FI_DEV_FB_USED"].GetMetric()); got != 8 {
				t.Errorf("DCGM_FI_DEV_FB_USED has %d series, want 8", got)
			}
			if _, ok := mfs["gpuplane_pod_gpu_memory_used_bytes"]; ok {
				t.Error("per-pod series without a pod source")
			}
			for _, m := range mfs["gpuplane_scrape_collector_success"].GetMetric() {
				if label(m, "collector") == "pods" && m.GetGauge().GetValue() != tt.wantOK {
					t.Errorf("pods collector success = %v, want %v", m.GetGauge().GetValue(), tt.wantOK)
				}
			}
		})
	}
}

func TestNewExporterRejects(t *testing.T) {
	tests := []struct {
		name string
		opts metrics.Options
	}{
		{name: "no backend", opts: metrics.Options{}},
		{name: "negative ttl", opts: metrics.Options{GPUs: &sim.Backend{}, InventoryTTL: -time.Second}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := metrics.NewExporter(tt.opts); err == nil {
				t.Fatal("NewExporter accepted invalid options")
			}
		})
	}
}

func TestLostGPUStaysReportedAcrossInventoryRefreshes(t *testing.T) {
	n := sharedNode(t)
	h := newHandler(t, n, &metricstest.StaticLister{Resp: n.Response()}, nil)
	scrape(t, h)
	if err := n.Backend.LoseGPU(1); err != nil {
		t.Fatal(err)
	}
	// The first scrape after the loss uses the cached inventory; the next
	// ones re-read it, and the sim leaves the lost GPU out.
	for i := range 3 {
		t.Run("scrape "+strconv.Itoa(i), func(t *testing.T) {
			mfs := parse(t, scrape(t, h))
			for _, m := range mfs["DCGM_FI_DEV_GPU_UTIL"].GetMetric() {
				if label(m, "gpu") == "1" {
					t.Errorf("lost GPU 1 still has DCGM_FI_DEV_GPU_UTIL")
				}
			}
			if got := len(mfs["DCGM_FI_DEV_GPU_UTIL"].GetMetric()); got != 7 {
				t.Errorf("DCGM_FI_DEV_GPU_UTIL has %d series, want 7", got)
			}
			lost := 0
			for _, m := range mfs["gpuplane_device_telemetry_up"].GetMetric() {
				if label(m, "gpu") == "1" {
					lost++
					if m.GetGauge().GetValue() != 0 || label(m, "reason") != "gpu-lost" {
						t.Errorf("GPU 1 telemetry_up = %v reason %q, want 0 gpu-lost", m.GetGauge().GetValue(), label(m, "reason"))
					}
				}
			}
			if lost != 1 {
				t.Errorf("GPU 1 has %d telemetry_up series, want 1", lost)
			}
			for _, m := range mfs["gpuplane_scrape_collector_success"].GetMetric() {
				if m.GetGauge().GetValue() != 1 {
					t.Errorf("collector %s failed", label(m, "collector"))
				}
			}
		})
	}
}

// Each container's part of a physical GPU, as OpenCost reads it, and each
// GPU's part nobody holds: 8 GPUs time-sliced 4 ways, 3 pods on each.
func TestContainerGPUAllocation(t *testing.T) {
	n := metricstest.NewNode(t, "dgxh100", "gpu-node-1")
	n.TimeSliced(t, "nvidia.com/gpu", 3)
	shareOf := func(_, _, resource, id string) (float64, bool) {
		if resource != "nvidia.com/gpu" || !strings.Contains(id, "::") {
			return 0, false
		}
		return 0.25, true
	}
	e, err := metrics.NewExporter(metrics.Options{
		GPUs: n.Backend, PodResources: &metricstest.StaticLister{Resp: n.Response()}, ProcRoot: n.ProcRoot, CheckpointPath: n.CheckpointPath,
		ShareOf: shareOf, Clock: clocktesting.NewFakePassiveClock(time.Unix(0, 0)), Logger: quietLogger(),
		MemoryLimitOf: func(namespace, _ string) (int64, bool) { return 2048, namespace == "team-0" },
		QueueOf:       func(namespace, _ string) (string, bool) { return "q-" + namespace, namespace != "team-0" },
	})
	if err != nil {
		t.Fatal(err)
	}
	h, err := metrics.NewHandler(e)
	if err != nil {
		t.Fatal(err)
	}
	mfs := parse(t, scrape(t, h))
	alloc := mfs["container_gpu_allocation"].GetMetric()
	if len(alloc) != len(n.Pods) {
		t.Fatalf("container_gpu_allocation has %d series, want one per container (%d)", len(alloc), len(n.Pods))
	}
	for _, m := range alloc {
		if m.GetGauge().GetValue() != 0.25 || label(m, "node") != "gpu-node-1" || label(m, "container") != "main" {
			t.Errorf("container_gpu_allocation %v = %v, want 0.25 of a GPU on gpu-node-1", m.GetLabel(), m.GetGauge().GetValue())
		}
	}
	// The pods of team-0 asked for 2 GiB of their GPU each.
	limits := mfs["gpuplane_pod_gpu_memory_limit_bytes"].GetMetric()
	team0 := 0
	for _, p := range n.Pods {
		if p.Namespace == "team-0" {
			team0++
		}
	}
	if len(limits) != team0 {
		t.Fatalf("gpuplane_pod_gpu_memory_limit_bytes has %d series, want one per team-0 pod (%d)", len(limits), team0)
	}
	for _, m := range limits {
		if label(m, "namespace") != "team-0" || m.GetGauge().GetValue() != 2048<<20 {
			t.Errorf("limit series %v = %v, want 2 GiB for team-0 pods only", m.GetLabel(), m.GetGauge().GetValue())
		}
	}
	// Every pod but team-0's was bound with a queue: one info series each.
	queues := mfs["gpuplane_pod_queue_info"].GetMetric()
	if len(queues) != len(n.Pods)-team0 {
		t.Fatalf("gpuplane_pod_queue_info has %d series, want one per pod outside team-0 (%d)", len(queues), len(n.Pods)-team0)
	}
	for _, m := range queues {
		if label(m, "queue") != "q-"+label(m, "namespace") || label(m, "pod") == "" || m.GetGauge().GetValue() != 1 {
			t.Errorf("queue info %v = %v, want 1 naming the pod and its namespace's queue", m.GetLabel(), m.GetGauge().GetValue())
		}
	}
	idle := mfs["gpuplane_gpu_idle_share"].GetMetric()
	if len(idle) != 8 {
		t.Fatalf("gpuplane_gpu_idle_share has %d series, want 8", len(idle))
	}
	for _, m := range idle {
		if m.GetGauge().GetValue() != 0.25 {
			t.Errorf("GPU %s idle share %v, want 0.25 (3 of 4 replicas held)", label(m, "gpu"), m.GetGauge().GetValue())
		}
	}
}

// A pod's process on a GPU no container was given (the pod reached past
// the device plugin) is counted on that GPU with the pod's UID; a pod on
// the GPU it was given is not.
func TestUnallocatedPodProcesses(t *testing.T) {
	n := metricstest.NewNode(t, "dgxh100", "gpu-node-1")
	devs := n.Devices(t)
	n.AddPod(t, metricstest.Pod{Namespace: "ml", Name: "given", Container: "main", Resource: "nvidia.com/gpu", DeviceID: devs[1].UUID, GPU: 1, PID: 4001, MemMiB: 100, Util: 10})
	n.AddPod(t, metricstest.Pod{Namespace: "ml", Name: "sneaky", Container: "main", Resource: "nvidia.com/gpu", DeviceID: devs[2].UUID, GPU: 2, PID: 4002, MemMiB: 100, Util: 10})
	resp := n.Response()
	resp.PodResources = resp.PodResources[:1] // the kubelet gave "sneaky" nothing
	h := newHandler(t, n, &metricstest.StaticLister{Resp: resp}, nil)
	got := parse(t, scrape(t, h))["gpuplane_gpu_unallocated_pod_processes"].GetMetric()
	if len(got) != 1 || label(got[0], "gpu") != "2" || label(got[0], "pod_uid") != n.Pods[1].UID || got[0].GetGauge().GetValue() != 1 {
		t.Fatalf("gpuplane_gpu_unallocated_pod_processes = %v, want one process of %s on GPU 2", got, n.Pods[1].UID)
	}
}

// A pod's process on a GPU given to another pod counts as the intruder's,
// not the holder's: the holder's memory is its own, and Usage reports the
// intruder with the pod the GPU was given to.
func TestProcessOnAnotherPodsGPU(t *testing.T) {
	n := metricstest.NewNode(t, "dgxh100", "gpu-node-1")
	devs := n.Devices(t)
	n.AddPod(t, metricstest.Pod{Namespace: "ml", Name: "holder", Container: "main", Resource: "nvidia.com/gpu", DeviceID: devs[1].UUID, GPU: 1, PID: 4101, MemMiB: 300, Util: 10})
	// intruder was given GPU 3, and runs a process on GPU 1 as well.
	n.AddPod(t, metricstest.Pod{Namespace: "ml", Name: "intruder", Container: "main", Resource: "nvidia.com/gpu", DeviceID: devs[3].UUID, GPU: 1, PID: 4102, MemMiB: 700, Util: 10})
	uids := map[string]string{"ml/holder": n.Pods[0].UID, "ml/intruder": n.Pods[1].UID}
	e, err := metrics.NewExporter(metrics.Options{
		GPUs: n.Backend, PodResources: &metricstest.StaticLister{Resp: n.Response()}, ProcRoot: n.ProcRoot, CheckpointPath: n.CheckpointPath,
		PodUID: func(ns, pod string) (string, bool) { uid, ok := uids[ns+"/"+pod]; return uid, ok },
		Clock:  clocktesting.NewFakePassiveClock(time.Unix(0, 0)), Logger: quietLogger(),
	})
	if err != nil {
		t.Fatal(err)
	}
	u, err := e.Usage(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(u.Pods) != 1 || u.Pods[0].Pod != "holder" || u.Pods[0].UsedMiB != 300 || u.Pods[0].GPU != 1 {
		t.Errorf("pods' use = %+v, want holder's 300 MiB on GPU 1 only", u.Pods)
	}
	if len(u.Foreign) != 1 || u.Foreign[0].PodUID != n.Pods[1].UID || u.Foreign[0].GPU != 1 || !slices.Equal(u.Foreign[0].Holders, []string{"ml/holder"}) {
		t.Errorf("foreign use = %+v, want the intruder's process on GPU 1, given to ml/holder", u.Foreign)
	}
	h, err := metrics.NewHandler(e)
	if err != nil {
		t.Fatal(err)
	}
	got := parse(t, scrape(t, h))["gpuplane_gpu_unallocated_pod_processes"].GetMetric()
	if len(got) != 1 || label(got[0], "gpu") != "1" || label(got[0], "pod_uid") != n.Pods[1].UID {
		t.Errorf("gpuplane_gpu_unallocated_pod_processes = %v, want the intruder on GPU 1", got)
	}
}

// TestDCGMDefaultCounters checks the dcgm-exporter default counters that
// only some GPUs offer: profiling on Hopper, NVLink where GPUs have links,
// and the driver version label on every DCGM_FI_* series.
func TestDCGMDefaultCounters(t *testing.T) {
	prof := []string{"DCGM_FI_PROF_GR_ENGINE_ACTIVE", "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "DCGM_FI_PROF_DRAM_ACTIVE",
		"DCGM_FI_PROF_PCIE_TX_BYTES", "DCGM_FI_PROF_PCIE_RX_BYTES"}
	tests := []struct {
		profile      string
		gpus         int
		prof, nvlink bool
	}{
		{"dgxh100", 8, true, true},
		{"dgxa100", 8, false, true},
		{"4xt4", 4, false, false},
	}
	for _, tt := range tests {
		t.Run(tt.profile, func(t *testing.T) {
			n := metricstest.NewNode(t, tt.profile, "gpu-node-1")
			devs := n.Devices(t)
			n.AddPod(t, metricstest.Pod{Namespace: "infer", Name: "solo", Container: "server", Resource: "nvidia.com/gpu",
				DeviceID: devs[1].UUID, GPU: 1, PID: 301, MemMiB: 4096, Util: 90})
			n.WriteCheckpoint(t)
			var logs strings.Builder
			e, err := metrics.NewExporter(metrics.Options{
				GPUs: n.Backend, PodResources: &metricstest.StaticLister{Resp: n.Response()}, ProcRoot: n.ProcRoot,
				CheckpointPath: n.CheckpointPath, Clock: clocktesting.NewFakePassiveClock(time.Unix(0, 0)),
				Logger: slog.New(slog.NewTextHandler(&logs, nil)),
			})
			if err != nil {
				t.Fatal(err)
			}
			h, err := metrics.NewHandler(e)
			if err != nil {
				t.Fatal(err)
			}
			before := parse(t, scrape(t, h))
			n.Clock.Advance(10 * time.Second)
			mfs := parse(t, scrape(t, h))

			sys, err := n.Backend.System(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			for name, mf := range mfs {
				for _, m := range mf.GetMetric() {
					dcgm := strings.HasPrefix(name, "DCGM_FI_")
					if got := label(m, metrics.LabelDriverVersion); dcgm && got != sys.DriverVersion || !dcgm && got != "" {
						t.Fatalf("%s has driver version label %q (driver %s)", name, got, sys.DriverVersion)
					}
				}
			}
			for _, name := range []string{"DCGM_FI_DEV_ENC_UTIL", "DCGM_FI_DEV_DEC_UTIL"} {
				if ms := mfs[name].GetMetric(); len(ms) != tt.gpus || mfs[name].GetType() != dto.MetricType_GAUGE || ms[0].GetGauge().GetValue() != 0 {
					t.Errorf("%s: %d series of type %v, want %d idle gauges", name, len(ms), mfs[name].GetType(), tt.gpus)
				}
			}
			if _, ok := mfs["DCGM_FI_DEV_VGPU_LICENSE_STATUS"]; ok {
				t.Error("bare-metal GPUs report a vGPU license status")
			}

			nv := mfs["DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL"]
			if !tt.nvlink {
				if nv != nil {
					t.Errorf("GPUs without NVLink have %d NVLink series", len(nv.GetMetric()))
				}
			} else {
				if nv.GetType() != dto.MetricType_COUNTER || len(nv.GetMetric()) != tt.gpus {
					t.Fatalf("NVLink: %d series of type %v", len(nv.GetMetric()), nv.GetType())
				}
				// The busy GPU's counter grows; an idle one's does not.
				rate := counterOf(t, mfs, nv.GetName(), "1") - counterOf(t, before, nv.GetName(), "1")
				if rate <= 0 || counterOf(t, mfs, nv.GetName(), "0") != counterOf(t, before, nv.GetName(), "0") {
					t.Errorf("NVLink KiB over 10 s: busy GPU +%v, idle GPU %v -> %v", rate, counterOf(t, before, nv.GetName(), "0"), counterOf(t, mfs, nv.GetName(), "0"))
				}
				// 90% load over 10 s: hundreds of GB, reported in KiB.
				if gb := rate * 1024 / 1e9; gb < 100 || gb > 10000 {
					t.Errorf("NVLink traffic of a 90%% busy GPU over 10 s = %.0f GB", gb)
				}
			}

			for _, name := range prof {
				mf := mfs[name]
				if !tt.prof {
					if mf != nil {
						t.Errorf("%s on %s, which has no GPM", name, tt.profile)
					}
					continue
				}
				if mf.GetType() != dto.MetricType_GAUGE || len(mf.GetMetric()) != tt.gpus {
					t.Fatalf("%s: %d series of type %v, want %d gauges", name, len(mf.GetMetric()), mf.GetType(), tt.gpus)
				}
			}
			if tt.prof {
				// GPU 1 is 90% busy and held by one pod, whose labels its
				// profiling series carry. Ratios are 0..1, PCIe in bytes/s.
				want := map[string]float64{"DCGM_FI_PROF_GR_ENGINE_ACTIVE": 0.9, "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": 0.54,
					"DCGM_FI_PROF_PCIE_TX_BYTES": 0.05 * 64e9 * 0.9, "DCGM_FI_PROF_PCIE_RX_BYTES": 0.15 * 64e9 * 0.9}
				for name, w := range want {
					for _, m := range mfs[name].GetMetric() {
						if label(m, "gpu") != "1" {
							continue
						}
						if got := m.GetGauge().GetValue(); math.Abs(got-w) > 1e-6*w || label(m, "pod") != "solo" {
							t.Errorf("%s of the busy GPU = %v (pod %q), want %v (pod solo)", name, got, label(m, "pod"), w)
						}
					}
				}
			}
			// A GPU without profiling or NVLink says so once, not every
			// scrape.
			if got, want := strings.Count(logs.String(), "does not offer"), map[bool]int{true: 0, false: tt.gpus}[tt.prof && tt.nvlink]; got != want {
				t.Errorf("%d log lines about missing readings after two scrapes, want %d:\n%s", got, want, logs.String())
			}
			if !tt.prof && !strings.Contains(logs.String(), "DCGM_FI_PROF_GR_ENGINE_ACTIVE") {
				t.Errorf("the log does not name the missing profiling series:\n%s", logs.String())
			}
		})
	}
}

func counterOf(t *testing.T, mfs map[string]*dto.MetricFamily, name, gpu string) float64 {
	t.Helper()
	for _, m := range mfs[name].GetMetric() {
		if label(m, "gpu") == gpu {
			return m.GetCounter().GetValue()
		}
	}
	t.Fatalf("%s has no series for gpu %s", name, gpu)
	return 0
}
