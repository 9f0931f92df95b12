package simulator

import (
	"bytes"
	"context"
	"encoding/xml"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gpuplane/gpuplane/internal/scheduler/model"
	"github.com/gpuplane/gpuplane/internal/scheduler/placement"
)

const tinyNodes = `sn,cpu_milli,memory_mib,gpu,model
node-0,32000,131072,2,T4
node-1,32000,131072,4,V100M16
`

const tinyPods = `name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time
pod-2,4000,8192,1,500,,LS,Running,20,100,20
pod-0,4000,8192,1,1000,,LS,Running,0,100,0
pod-1,2000,4096,0,0,,BE,Running,10,100,10
pod-3,4000,8192,2,1000,V100M16,LS,Running,30,100,30
pod-4,4000,8192,8,1000,,LS,Running,40,100,40
`

func writeTrace(t *testing.T, pods string) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, OpenBNodeFile), []byte(tinyNodes), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "openb_pod_list_tiny.csv"), []byte(pods), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestReadOpenB(t *testing.T) {
	tr, err := ReadOpenB(writeTrace(t, tinyPods), "tiny")
	if err != nil {
		t.Fatal(err)
	}
	if len(tr.Nodes) != 2 || len(tr.Nodes[1].GPUs) != 4 || tr.Nodes[1].GPUs[0].Model != "V100M16" {
		t.Fatalf("nodes = %+v", tr.Nodes)
	}
	if got := tr.GPUCapacityMilli(); got != 6000 {
		t.Fatalf("capacity = %d, want 6000", got)
	}
	var names []string
	for _, p := range tr.Pods {
		names = append(names, p.Name)
	}
	if strings.Join(names, ",") != "pod-0,pod-1,pod-2,pod-3,pod-4" {
		t.Fatalf("pods not in creation order: %v", names)
	}
	if r := tr.Pods[2].Request; r.GPUMilli != 500 || r.GPUs != 0 {
		t.Fatalf("sharing pod parsed as %+v", r)
	}
	if r := tr.Pods[3].Request; r.GPUs != 2 || len(r.GPUModels) != 1 {
		t.Fatalf("2-GPU pod parsed as %+v", r)
	}
}

func TestReadOpenBErrors(t *testing.T) {
	tests := []struct {
		name, pods, want string
		line, col        int
	}{
		{"not a number", "name,cpu_milli,memory_mib,num_gpu,gpu_milli\np,4000,x,1,1000\n", "memory_mib", 2, 8},
		{"negative", "name,cpu_milli,memory_mib,num_gpu,gpu_milli\np,4000,1,1,1000\nq,-5,1,1,1\n", "cpu_milli", 3, 3},
		{"missing column", "name,cpu_milli,memory_mib,num_gpu\n", "gpu_milli", 1, 1},
		{"short row", "name,cpu_milli,memory_mib,num_gpu,gpu_milli\np,4000,1\n", "num_gpu", 2, 0},
		{"bad quote", "name,cpu_milli,memory_mib,num_gpu,gpu_milli\n\"p,4000,1,1,1\n", "", 2, 0},
		{"empty file", "", "header", 1, 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ReadOpenB(writeTrace(t, tc.pods), "tiny")
			var re *RowError
			if !errors.As(err, &re) {
				t.Fatalf("err = %v, want a RowError", err)
			}
			if re.Line != tc.line || (tc.col > 0 && re.Column != tc.col) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v (line %d col %d), want line %d col %d mentioning %q", err, re.Line, re.Column, tc.line, tc.col, tc.want)
			}
			if !strings.Contains(err.Error(), "openb_pod_list_tiny.csv") {
				t.Fatalf("err = %v does not name the file", err)
			}
		})
	}
	if _, err := ReadOpenB(t.TempDir(), "tiny"); err == nil || !strings.Contains(err.Error(), "--trace") {
		t.Fatalf("missing directory: err = %v, want a hint about --trace", err)
	}
}

func TestTune(t *testing.T) {
	tr, _ := ReadOpenB(writeTrace(t, tinyPods), "tiny")
	gpuPods := tr.Pods[:4] // leave out the 8-GPU pod that fits nowhere
	a, err := Tune(gpuPods, 6000, 2, 5, true)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := Tune(gpuPods, 6000, 2, 5, true)
	var total int64
	for i := range a {
		total += a[i].Request.GPUMilliTotal()
		if a[i].Name != b[i].Name {
			t.Fatalf("same seed gave different pods at %d: %s vs %s", i, a[i].Name, b[i].Name)
		}
	}
	if total > 12000 || total < 12000-2000 {
		t.Fatalf("tuned demand = %d milli, want within one pod below 12000", total)
	}
	if a[len(a)-1].Name != "pod-3" {
		t.Fatalf("trace pods should come after the drawn ones, last is %s", a[len(a)-1].Name)
	}
	last, _ := Tune(gpuPods, 6000, 2, 5, false)
	if last[0].Name != "pod-0" {
		t.Fatalf("with tuned-last the trace comes first, got %s", last[0].Name)
	}
	down, _ := Tune(gpuPods, 6000, 0.5, 5, true)
	var downTotal int64
	for i := range down {
		downTotal += down[i].Request.GPUMilliTotal()
	}
	if downTotal > 3000 || len(down) >= len(gpuPods) {
		t.Fatalf("tuning down to 0.5 left %d pods with %d milli, want at most 3000", len(down), downTotal)
	}
	if _, err := Tune(gpuPods, 6000, -1, 5, true); err == nil {
		t.Fatal("negative tune accepted")
	}
}

func TestRunPacking(t *testing.T) {
	tr, _ := ReadOpenB(writeTrace(t, tinyPods), "tiny")
	for _, policy := range []string{"fgd", "bestfit", placement.DefaultPolicy, "random", "gpuclustering"} {
		t.Run(policy, func(t *testing.T) {
			r, err := RunPacking(context.Background(), tr, PackingConfig{Policy: policy, Seed: 1})
			if err != nil {
				t.Fatal(err)
			}
			// 1000 + 500 + 2000 of 6000 milli; the 8-GPU pod never fits.
			if r.FailedPods != 1 || r.Pods != 5 {
				t.Fatalf("pods %d failed %d, want 5 and 1", r.Pods, r.FailedPods)
			}
			if want := 3500.0 / 6000; r.MilliGPUAllocationRatio != want {
				t.Fatalf("allocation ratio = %g, want %g", r.MilliGPUAllocationRatio, want)
			}
			if r.GPUAllocationRatio != 4.0/6 {
				t.Fatalf("GPUs in use ratio = %g, want %g", r.GPUAllocationRatio, 4.0/6)
			}
			if n := len(r.Curve); n == 0 || r.Curve[n-1].MilliGPUAllocationRatio != r.MilliGPUAllocationRatio {
				t.Fatalf("curve %+v does not end at the final ratio", r.Curve)
			}
		})
	}
}

func TestRunPackingEmptyCluster(t *testing.T) {
	if _, err := RunPacking(context.Background(), &Trace{Source: "empty"}, PackingConfig{Policy: "fgd"}); err == nil {
		t.Fatal("empty cluster accepted")
	}
}

func TestRunAllAndOutputs(t *testing.T) {
	tr, _ := ReadOpenB(writeTrace(t, tinyPods), "tiny")
	calls := 0
	res, err := RunAll(context.Background(), tr, Spec{Mode: ModePacking, Policies: []string{"fgd", "bestfit"}, Seeds: []uint64{1, 2, 3},
		Tune: 1.5, Parallel: 2, Progress: func(done, total int, _ float64) { calls++ }})
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 6 || res[0].Policy != "fgd" || res[3].Policy != "bestfit" || res[4].Seed != 2 {
		t.Fatalf("results out of order: %d results", len(res))
	}
	if calls == 0 {
		t.Fatal("progress never reported")
	}
	sum := Summarize(res)
	if len(sum) != 2 || sum[0].Runs != 3 {
		t.Fatalf("summary = %+v", sum)
	}
	var csvBuf, curveBuf, svg bytes.Buffer
	if err := WriteResultsCSV(&csvBuf, res); err != nil {
		t.Fatal(err)
	}
	if lines := strings.Count(csvBuf.String(), "\n"); lines != 7 {
		t.Fatalf("results.csv has %d lines, want 7", lines)
	}
	if err := WriteCurveCSV(&curveBuf, res); err != nil {
		t.Fatal(err)
	}
	if err := WritePlot(&svg, "tiny <trace>", res); err != nil {
		t.Fatal(err)
	}
	dec := xml.NewDecoder(&svg)
	paths, texts := 0, ""
	for {
		tok, err := dec.Token()
		if err != nil {
			break
		}
		switch el := tok.(type) {
		case xml.StartElement:
			if el.Name.Local == "path" {
				paths++
			}
		case xml.CharData:
			texts += string(el)
		}
	}
	// Two policies, each drawn in the whole-run panel and in the zoom.
	if paths != 4 || !strings.Contains(texts, "bestfit") || !strings.Contains(texts, "arrived demand") || !strings.Contains(texts, "zoom") {
		t.Fatalf("plot has %d curves and text %q; want 4 curves (2 policies x 2 panels), a legend and axis labels", paths, texts)
	}
}

const yamlTrace = `
nodes:
- {name: a100, count: 2, milliCPU: 64000, memoryMiB: 262144, gpus: 8, gpuModel: A100, nvlink: true}
queues:
- {name: team-a, guaranteed: {gpuMilli: 8000}}
pods:
- {name: train, queue: team-a, count: 4, minMember: 4, gpus: 2, milliCPU: 8000, duration: 60}
- {name: infer, count: 3, gpuMilli: 250, createdAt: 5}
`

func TestReadYAMLTrace(t *testing.T) {
	tr, err := ReadYAMLTrace("t.yaml", strings.NewReader(yamlTrace))
	if err != nil {
		t.Fatal(err)
	}
	if len(tr.Nodes) != 2 || tr.Nodes[1].Name != "a100-1" || tr.Nodes[0].Topology == nil {
		t.Fatalf("nodes = %+v", tr.Nodes)
	}
	if len(tr.Pods) != 7 || tr.Pods[0].Group != "train" || tr.Pods[0].MinMember != 4 || tr.Pods[6].Group != "" {
		t.Fatalf("pods = %+v", tr.Pods)
	}
	for _, bad := range []string{"nodes: [{name: x, cpu: 1}]", "pods: [{name: p, gpuMilli: 1500}]", "pods: [{name: p, count: 2, minMember: 3}]", "nodes: [{milliCPU: 1}]"} {
		if _, err := ReadYAMLTrace("bad.yaml", strings.NewReader(bad)); err == nil {
			t.Fatalf("trace %q accepted", bad)
		}
	}
}

const eventTrace = `
nodes:
- {name: n, count: 2, milliCPU: 64000, memoryMiB: 262144, gpus: 4, gpuModel: A100}
queues:
- {name: org}
- {name: a, parent: org, guaranteed: {gpuMilli: 4000}}
- {name: b, parent: org, guaranteed: {gpuMilli: 4000}}
pods:
- {name: b-batch, queue: b, count: 8, gpus: 1, milliCPU: 1000, createdAt: 0, duration: 1000}
- {name: a-gang, queue: a, count: 4, minMember: 4, gpus: 1, milliCPU: 1000, createdAt: 100, duration: 50}
- {name: a-huge, queue: a, gpus: 16, milliCPU: 1000, createdAt: 200, duration: 10}
`

func TestRunEvent(t *testing.T) {
	tr, err := ReadYAMLTrace("event.yaml", strings.NewReader(eventTrace))
	if err != nil {
		t.Fatal(err)
	}
	r, err := RunEvent(context.Background(), tr, EventConfig{Policy: placement.DefaultPolicy, Interval: 10})
	if err != nil {
		t.Fatal(err)
	}
	ev := r.Event
	if len(ev.Queues) != 2 {
		t.Fatalf("queues = %+v", ev.Queues)
	}
	a, b := ev.Queues[0], ev.Queues[1]
	// b borrowed a's idle half; a's gang reclaims it: 4 evictions in b.
	if ev.Preemptions != 4 || b.Preemptions != 4 {
		t.Fatalf("preemptions %d (b %d), want 4 reclaimed from b", ev.Preemptions, b.Preemptions)
	}
	if a.Started != 4 || a.Completed != 4 || r.FailedPods != 1 {
		t.Fatalf("queue a %+v, failed %d; want the gang done and the 16-GPU pod never run", a, r.FailedPods)
	}
	// The gang waits one cycle (10 s) for its victims to exit, then runs
	// its 50 s.
	if a.WaitP50 != 10 || a.JCTP50 != 60 {
		t.Fatalf("queue a wait p50 %g jct p50 %g, want 10 and 60", a.WaitP50, a.JCTP50)
	}
	if b.Completed != 8 || b.JCTP90 <= 1000 {
		t.Fatalf("queue b %+v: want all 8 done, the evicted ones late", b)
	}
	if ev.MeanUtilization <= 0 || ev.MeanUtilization > 1 || ev.JainFairness <= 0 || ev.JainFairness > 1 {
		t.Fatalf("utilization %g, fairness %g", ev.MeanUtilization, ev.JainFairness)
	}
}

// A GPU shared as 4 replicas takes 4 pods, however small: the fifth tenth
// of a GPU fails where the trace's own shares would all fit.
func TestShareAsReplicas(t *testing.T) {
	tr := &Trace{Source: "one GPU", Nodes: []model.Node{{Name: "n", MilliCPU: 64000, MemoryMiB: 1 << 20, GPUs: []model.GPU{{Index: 0, Model: "T4"}}}}}
	for i := range 5 {
		tr.Pods = append(tr.Pods, TracePod{Name: fmt.Sprint("p", i), Request: model.Request{MilliCPU: 100, GPUMilli: 100}})
	}
	for _, tc := range []struct{ replicas, failed int }{{0, 0}, {4, 1}, {10, 0}} {
		c := *tr
		c.Nodes = []model.Node{tr.Nodes[0]}
		c.Nodes[0].GPUs = slices.Clone(tr.Nodes[0].GPUs)
		c.ShareAsReplicas(tc.replicas)
		r, err := RunPacking(context.Background(), &c, PackingConfig{Policy: placement.DefaultPolicy, Seed: 1})
		if err != nil {
			t.Fatal(err)
		}
		if r.FailedPods != tc.failed {
			t.Errorf("%d replicas: %d pods failed, want %d", tc.replicas, r.FailedPods, tc.failed)
		}
	}
}

const claimTrace = `
nodes:
- {name: dp, count: 1, milliCPU: 64000, memoryMiB: 262144, gpus: 8, gpuModel: A100}
- {name: dra, count: 2, milliCPU: 64000, memoryMiB: 262144, gpus: 4, gpuModel: H100, dra: true}
pods:
- {name: claim, count: 8, claimGPUs: 1, claimModels: [H100], milliCPU: 1000, duration: 100}
- {name: extra, count: 1, claimGPUs: 1, milliCPU: 1000, createdAt: 1, duration: 100}
- {name: plugin, count: 8, gpus: 1, milliCPU: 1000, createdAt: 2, duration: 100}
- {name: b200, count: 1, claimGPUs: 1, claimModels: [B200], milliCPU: 1000, createdAt: 3, duration: 10}
`

// Pods that ask through claims take only the GPUs of DRA nodes their
// claims select, device-plugin pods never those: the simulator replays
// the core's device sets as the scheduler's adapter makes them.
func TestRunEventWithClaims(t *testing.T) {
	tr, err := ReadYAMLTrace("claims.yaml", strings.NewReader(claimTrace))
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range tr.Nodes {
		for _, g := range n.GPUs {
			if strings.HasPrefix(n.Name, "dra") != (g.DeviceSets == "claims:*,claims:H100" && g.ClaimOnly) {
				t.Fatalf("node %s GPU %d: device sets %v, claim-only %v", n.Name, g.Index, g.DeviceSets, g.ClaimOnly)
			}
		}
	}
	r, err := RunEvent(context.Background(), tr, EventConfig{Policy: placement.DefaultPolicy, Interval: 10})
	if err != nil {
		t.Fatal(err)
	}
	// 8 claim pods fill the 8 H100s; extra (any model) finds none left
	// among DRA GPUs and waits until they finish; the 8 plugin pods take
	// the A100s; the B200 claim never runs.
	if r.FailedPods != 1 {
		t.Fatalf("%d pods never ran, want 1 (the B200 claim)", r.FailedPods)
	}
	if ev := r.Event; ev.Queues[0].Started != 17 {
		t.Fatalf("queue %+v: want 17 pods started", ev.Queues[0])
	}
	for _, bad := range []string{"pods: [{name: p, claimGPUs: 1, gpus: 1}]", "pods: [{name: p, claimModels: [H100]}]", "pods: [{name: p, claimGPUs: -1}]"} {
		if _, err := ReadYAMLTrace("bad.yaml", strings.NewReader(bad)); err == nil {
			t.Errorf("trace %q accepted", bad)
		}
	}
}

// TestRunEventWithPodAntiAffinity: eight pods that repel each other per
// node on six nodes: the simulator replays the core's decision, six start
// at once and two wait for a node to empty.
func TestRunEventWithPodAntiAffinity(t *testing.T) {
	const trace = `
nodes:
- {name: n, count: 6, milliCPU: 64000, memoryMiB: 262144, gpus: 8, gpuModel: H100}
pods:
- name: w
  count: 8
  gpus: 1
  milliCPU: 1000
  duration: 100
  namespace: ml
  labels: {app: w}
  podAffinity:
    requiredAnti: [{topologyKey: kubernetes.io/hostname, selector: {matchLabels: {app: w}}}]
`
	tr, err := ReadYAMLTrace("anti.yaml", strings.NewReader(trace))
	if err != nil {
		t.Fatal(err)
	}
	if got := tr.Pods[0].Request.Affinity.RequiredAnti[0].Namespaces; !slices.Equal(got, []string{"ml"}) {
		t.Fatalf("term namespaces %v, want the pod's own", got)
	}
	r, err := RunEvent(context.Background(), tr, EventConfig{Policy: placement.DefaultPolicy, Interval: 10})
	if err != nil {
		t.Fatal(err)
	}
	q := r.Event.Queues[0]
	if q.Completed != 8 || q.WaitP50 != 0 || q.WaitP90 < 100 {
		t.Fatalf("queue %+v: want all 8 done, six at once and two after the first finish", q)
	}
	bad := strings.Replace(trace, "{topologyKey: kubernetes.io/hostname, ", "{", 1)
	if _, err := ReadYAMLTrace("bad.yaml", strings.NewReader(bad)); err == nil || !strings.Contains(err.Error(), "podAffinity.requiredAnti[0].topologyKey") {
		t.Fatalf("a term without a topology key: %v", err)
	}
}

const portsTrace = `
nodes:
- {name: n, count: 2, milliCPU: 64000, memoryMiB: 262144, gpus: 8, gpuModel: H100, allocatable: {pods: 3, rdma/hca: 1}}
pods:
- {name: web, count: 3, milliCPU: 100, hostPorts: [{port: 7777}], createdAt: 0, duration: 100}
- {name: rdma, count: 3, milliCPU: 100, scalars: {rdma/hca: 1}, createdAt: 0, duration: 100}
- {name: plain, count: 3, milliCPU: 100, createdAt: 0, duration: 100}
`

// TestRunEventCountsPortsPodsAndScalars: the simulator replays the core's
// counting of host ports, pods and scalar resources: at no time does a
// node of 3 pods and one rdma/hca run more than 3 pods, two of port 7777
// or two asking rdma/hca, and every pod runs in the end.
func TestRunEventCountsPortsPodsAndScalars(t *testing.T) {
	tr, err := ReadYAMLTrace("ports.yaml", strings.NewReader(portsTrace))
	if err != nil {
		t.Fatal(err)
	}
	if tr.Nodes[1].Allocatable["pods"] != 3 || tr.Pods[0].Request.HostPorts[0].Port != 7777 || tr.Pods[3].Request.Scalars["rdma/hca"] != 1 {
		t.Fatalf("trace read as %+v, %+v", tr.Nodes, tr.Pods)
	}
	type counts struct{ web, rdma, pods int }
	worst := counts{}
	cfg := EventConfig{Policy: placement.DefaultPolicy, Interval: 10, OnCycle: func(_ int64, snap *model.Snapshot, d *model.Decisions) {
		// What runs on each node once the cycle's binds are carried out.
		on := map[string]*counts{}
		count := func(node string, r *model.Request) {
			c := on[node]
			if c == nil {
				c = &counts{}
				on[node] = c
			}
			c.pods++
			if len(r.HostPorts) > 0 {
				c.web++
			}
			if r.Scalars["rdma/hca"] > 0 {
				c.rdma++
			}
			worst = counts{max(worst.web, c.web), max(worst.rdma, c.rdma), max(worst.pods, c.pods)}
		}
		for a := range snap.AllRunning() {
			count(a.Node, &a.Request)
		}
		pending := map[string]*model.Request{}
		for g := range snap.Pending {
			for k := range snap.Pending[g].Pods {
				pending[snap.Pending[g].Pods[k].Name] = &snap.Pending[g].Pods[k].Request
			}
		}
		for _, b := range d.Binds {
			count(b.Node, pending[b.Pod])
		}
	}}
	r, err := RunEvent(context.Background(), tr, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if worst != (counts{1, 1, 3}) || r.FailedPods != 0 {
		t.Errorf("at most %+v on a node at once, %d failed; want 1 web, 1 rdma, 3 pods and none failed", worst, r.FailedPods)
	}
	for _, bad := range []string{"nodes: [{name: n, allocatable: {pods: -1}}]", "pods: [{name: p, hostPorts: [{port: 70000}]}]", "pods: [{name: p, scalars: {x: 2000000000000000000}}]"} {
		if _, err := ReadYAMLTrace("bad.yaml", strings.NewReader(bad)); err == nil {
			t.Errorf("trace %q accepted", bad)
		}
	}
}
