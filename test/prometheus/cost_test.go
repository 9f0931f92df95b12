package prometheus_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpuplane/gpuplane/internal/cli/cost"
)

// costStart is where the backfilled history begins: a whole minute, so
// that the one-minute steps of the queries fall between samples.
var costStart = time.Date(2026, 10, 1, 0, 0, 0, 0, time.UTC)

// span is a series that holds value from one hour to another after
// costStart.
type span struct {
	labels   string
	value    float64
	from, to int
}

// costHistory is four hours of two nodes' shares:
//
//	ml/train    1 GPU      hours 0-2  queue research
//	ml/infer    0.5 + 0.25 hours 1-2  queue serving (two containers)
//	web/chat    0.25       hours 0-4  queue serving
//	batch/once  1 GPU      hours 3-4  no queue recorded
//
// and each of the four GPUs' idle share, consistent with them: 4.75
// GPU-hours held, 11.25 idle, 16 in all.
var costHistory = map[string][]span{
	"container_gpu_allocation": {
		{`namespace="ml",pod="train",container="main",node="n1"`, 1, 0, 2},
		{`namespace="ml",pod="infer",container="main",node="n1"`, 0.5, 1, 2},
		{`namespace="ml",pod="infer",container="sidecar",node="n1"`, 0.25, 1, 2},
		{`namespace="web",pod="chat",container="main",node="n2"`, 0.25, 0, 4},
		{`namespace="batch",pod="once",container="main",node="n2"`, 1, 3, 4},
	},
	"gpuplane_pod_queue_info": {
		{`namespace="ml",pod="train",queue="research"`, 1, 0, 2},
		{`namespace="ml",pod="infer",queue="serving"`, 1, 1, 2},
		{`namespace="web",pod="chat",queue="serving"`, 1, 0, 4},
	},
	"gpuplane_gpu_idle_share": {
		{`Hostname="n1",gpu="0"`, 0, 0, 2}, {`Hostname="n1",gpu="0"`, 1, 2, 4},
		{`Hostname="n1",gpu="1"`, 1, 0, 1}, {`Hostname="n1",gpu="1"`, 0.25, 1, 2}, {`Hostname="n1",gpu="1"`, 1, 2, 4},
		{`Hostname="n2",gpu="0"`, 0.75, 0, 4},
		{`Hostname="n2",gpu="1"`, 1, 0, 3}, {`Hostname="n2",gpu="1"`, 0, 3, 4},
	},
}

// backfill writes costHistory as OpenMetrics, a sample every 20 s at 10 s
// past each step, and has promtool turn it into TSDB blocks in dir.
func backfill(t *testing.T, dir string) {
	t.Helper()
	promtool := tool(t, "promtool")
	var b strings.Builder
	for _, name := range []string{"container_gpu_allocation", "gpuplane_pod_queue_info", "gpuplane_gpu_idle_share"} {
		fmt.Fprintf(&b, "# TYPE %s gauge\n", name)
		// One series' spans in time order, each series whole before the
		// next, as OpenMetrics wants.
		var order []string
		bySeries := map[string][]span{}
		for _, s := range costHistory[name] {
			if _, ok := bySeries[s.labels]; !ok {
				order = append(order, s.labels)
			}
			bySeries[s.labels] = append(bySeries[s.labels], s)
		}
		for _, labels := range order {
			for _, s := range bySeries[labels] {
				for ts := costStart.Add(time.Duration(s.from)*time.Hour + 10*time.Second); ts.Before(costStart.Add(time.Duration(s.to) * time.Hour)); ts = ts.Add(20 * time.Second) {
					fmt.Fprintf(&b, "%s{%s} %g %d\n", name, labels, s.value, ts.Unix())
				}
			}
		}
	}
	b.WriteString("# EOF\n")
	in := filepath.Join(t.TempDir(), "history.om")
	if err := os.WriteFile(in, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, code := run(t, nil, promtool, "tsdb", "create-blocks-from", "openmetrics", in, dir); code != 0 {
		t.Fatalf("promtool tsdb create-blocks-from openmetrics: exit %d\n%s", code, out)
	}
}

// gpuplaneCost runs `gpuplane cost` with args and returns its output.
func gpuplaneCost(t *testing.T, args ...string) (string, error) {
	t.Helper()
	cmd := cost.NewCommand()
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	cmd.SetArgs(args)
	cmd.SilenceUsage = true
	err := cmd.Execute()
	return out.String(), err
}

// costReport runs gpuplane cost -o json and decodes it.
func costReport(t *testing.T, args ...string) cost.Report {
	t.Helper()
	out, err := gpuplaneCost(t, append(args, "-o", "json")...)
	if err != nil {
		t.Fatalf("gpuplane cost %v: %v\n%s", args, err, out)
	}
	var r cost.Report
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("gpuplane cost %v -o json: %v\n%s", args, err, out)
	}
	return r
}

// TestCost sums four hours of backfilled history in a real Prometheus
// by namespace, queue, pod and node, over the whole of it and over its
// first hour, priced, and checks every number against the history.
func TestCost(t *testing.T) {
	data := filepath.Join(t.TempDir(), "data")
	backfill(t, data)
	// The history has no staleness markers (a scrape writes them when a
	// series goes away): a short lookback lets a series end with its last
	// sample instead of five minutes later.
	p := startPrometheusOn(t, "", data, "--query.lookback-delta=15s", "--storage.tsdb.retention.time=100y")
	end := costStart.Add(5 * time.Hour).Format(time.RFC3339)
	base := []string{"--prometheus", p.base, "--end", end, "--window", "6h", "--resolution", "1m"}

	for _, tc := range []struct {
		by    string
		hours map[string]float64
		peak  map[string]float64
	}{
		{"namespace", map[string]float64{"ml": 2.75, "web": 1, "batch": 1}, map[string]float64{"ml": 1.75, "web": 0.25, "batch": 1}},
		{"queue", map[string]float64{"research": 2, "serving": 1.75, "": 1}, map[string]float64{"research": 1, "serving": 1, "": 1}},
		{"pod", map[string]float64{"ml/train": 2, "ml/infer": 0.75, "web/chat": 1, "batch/once": 1}, nil},
		{"node", map[string]float64{"n1": 2.75, "n2": 2}, map[string]float64{"n1": 1.75, "n2": 1.25}},
	} {
		t.Run(tc.by, func(t *testing.T) {
			r := costReport(t, append(base, "--by", tc.by, "--gpu-hour-price", "2")...)
			got := map[string]float64{}
			for _, row := range r.Rows {
				got[row.Name] = row.GPUHours
				if !near(row.Cost, 2*row.GPUHours) || !near(row.Share, row.GPUHours/4.75) || !near(row.MeanGPUs, row.GPUHours/6) {
					t.Errorf("row %+v: cost, share or mean do not follow its %v GPU-hours", row, row.GPUHours)
				}
				if want, ok := tc.peak[row.Name]; ok && !near(row.PeakGPUs, want) {
					t.Errorf("%s %q peaked at %v GPUs, want %v", tc.by, row.Name, row.PeakGPUs, want)
				}
			}
			if len(got) != len(tc.hours) {
				t.Errorf("rows %v, want %v", got, tc.hours)
			}
			for name, want := range tc.hours {
				if !near(got[name], want) {
					t.Errorf("%s %q: %v GPU-hours, want %v", tc.by, name, got[name], want)
				}
			}
			if !near(r.AllocatedGPUHours, 4.75) || !near(r.IdleGPUHours, 11.25) || !near(r.CapacityGPUHours, 16) {
				t.Errorf("allocated %v, idle %v, capacity %v GPU-hours; want 4.75, 11.25, 16", r.AllocatedGPUHours, r.IdleGPUHours, r.CapacityGPUHours)
			}
			if r.Rows[0].GPUHours < r.Rows[len(r.Rows)-1].GPUHours {
				t.Errorf("rows not sorted by GPU-hours: %+v", r.Rows)
			}
		})
	}

	t.Run("first hour", func(t *testing.T) {
		r := costReport(t, "--prometheus", p.base, "--end", costStart.Add(time.Hour).Format(time.RFC3339), "--window", "1h", "--resolution", "1m")
		want := map[string]float64{"ml": 1, "web": 0.25}
		for _, row := range r.Rows {
			if !near(row.GPUHours, want[row.Name]) {
				t.Errorf("namespace %s: %v GPU-hours in the first hour, want %v", row.Name, row.GPUHours, want[row.Name])
			}
		}
		if len(r.Rows) != 2 || !near(r.CapacityGPUHours, 4) {
			t.Errorf("rows %+v and %v GPU-hours of capacity, want ml and web of 4", r.Rows, r.CapacityGPUHours)
		}
	})

	t.Run("table", func(t *testing.T) {
		out, err := gpuplaneCost(t, append(base, "--by", "queue", "-o", "wide", "--gpu-hour-price", "2.5")...)
		if err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		for _, want := range []string{"QUEUE", "GPU-HOURS", "PEAK GPUS", "COST", "research", "2.00", "(none)", "(idle)", "11.25", "(capacity)", "29.7% held", "40.00"} {
			if !strings.Contains(out, want) {
				t.Errorf("table lacks %q:\n%s", want, out)
			}
		}
	})

	t.Run("bad input", func(t *testing.T) {
		for _, tc := range []struct {
			args []string
			want string
		}{
			{[]string{"--by", "team"}, `--by "team": want namespace, queue, pod or node`},
			{[]string{"--window", "-1h"}, `--window "-1h"`},
			{[]string{"--window", "1h", "--resolution", "2h"}, "longer than --window"},
			{[]string{"--window", "1y", "--resolution", "1s"}, "over 100,000 steps"},
			{[]string{"--end", "yesterday"}, `--end "yesterday": want now or an RFC 3339 time`},
			{[]string{"--gpu-hour-price", "-1"}, "a price is not negative"},
			{[]string{"--end", costStart.Add(-48 * time.Hour).Format(time.RFC3339), "--window", "1h"}, "no container_gpu_allocation"},
		} {
			out, err := gpuplaneCost(t, append([]string{"--prometheus", p.base}, tc.args...)...)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("gpuplane cost %v: error %v, want one saying %q\n%s", tc.args, err, tc.want, out)
			}
		}
		for _, tc := range []struct{ url, want string }{
			{"localhost:9090", "want the server's base URL"},
			{p.base + "/nothing-here", "not the Prometheus API's JSON"},
		} {
			if _, err := gpuplaneCost(t, "--prometheus", tc.url); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("--prometheus %s: error %v, want one saying %q", tc.url, err, tc.want)
			}
		}
	})
}
