package simulate

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestContendedWorkload(t *testing.T) {
	small := []string{"--workload", "contended", "--mode", "event", "--nodes", "16", "--hours", "2", "--seeds", "1-2"}
	t.Run("json names", func(t *testing.T) {
		out, _, code := runCmd(t, append(small, "--config", "fifo-bestfit,gpuplane", "-o", "json")...)
		if code != 0 {
			t.Fatalf("exit %d:\n%s", code, out)
		}
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if len(lines) != 4 {
			t.Fatalf("%d json objects, want 4 (2 configurations x 2 seeds):\n%s", len(lines), out)
		}
		var r struct {
			Policy string
			Event  map[string]any
		}
		if err := json.Unmarshal([]byte(lines[0]), &r); err != nil {
			t.Fatal(err)
		}
		if r.Policy != "fifo-bestfit" {
			t.Fatalf("policy %q, want the configuration's name", r.Policy)
		}
		for _, k := range []string{"jctP50", "jctP95", "waitP50", "waitP95", "fairnessDeviation", "lostGpuHours", "lostGpuHoursMoves", "preemptions", "moves", "jctMean", "queues"} {
			if _, ok := r.Event[k]; !ok {
				t.Fatalf("event lacks %q: %s", k, lines[0])
			}
		}
		q := r.Event["queues"].([]any)[0].(map[string]any)
		for _, k := range []string{"jctP50", "jctP95", "waitP50", "waitP95", "fairnessDeviation", "lostGpuHours", "preemptions"} {
			if _, ok := q[k]; !ok {
				t.Fatalf("queue lacks %q: %v", k, q)
			}
		}
	})
	t.Run("table and out dir", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "out")
		out, _, code := runCmd(t, append(small, "--config", "kai-like,kueue-like", "--out", dir)...)
		if code != 0 || !strings.Contains(out, "FAIRNESS DEV") || !strings.Contains(out, "LOST BY MOVES") || !strings.Contains(out, "kueue-like  team-d") {
			t.Fatalf("exit %d, table:\n%s", code, out)
		}
		b, err := os.ReadFile(filepath.Join(dir, "utilization.csv"))
		if err != nil || !strings.Contains(string(b), ",team-a\n") {
			t.Fatalf("utilization.csv without per-queue rows: %v", err)
		}
		svg, err := os.ReadFile(filepath.Join(dir, "plot.svg"))
		if err != nil || !strings.Contains(string(svg), "kai-like, mean") || !strings.Contains(string(svg), "virtual time (hours)") {
			t.Fatalf("plot.svg without the configurations' allocation over time: %v", err)
		}
	})
	t.Run("placement policies on the teams' queues", func(t *testing.T) {
		out, _, code := runCmd(t, "--workload", "contended", "--mode", "event", "--nodes", "16", "--hours", "1", "--policy", "bestfit", "-o", "json")
		if code != 0 || strings.Count(out, "\n") != 1 || !strings.Contains(out, `"policy":"bestfit"`) || !strings.Contains(out, `"queue":"team-d"`) {
			t.Fatalf("exit %d:\n%s", code, out)
		}
	})
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"unknown workload", []string{"--workload", "big", "--mode", "event"}, "--workload"},
		{"packing", []string{"--workload", "contended"}, "--mode event"},
		{"with a trace", []string{"--workload", "contended", "--mode", "event", "--trace", "x.yaml"}, "--trace"},
		{"load", append(small, "--load", "0"), "load"},
		{"teams", append(small, "--teams", "a:0.9:1,b:0.9:1"), "guarantees"},
		{"config", append(small, "--config", "slurm"), "--config"},
		{"config in packing", []string{"--trace", "x.yaml", "--config", "gpuplane"}, "--config"},
		{"lost-work bound", append(small, "--config", "gpuplane", "--defrag-max-lost-work", "1500ms"), "--defrag-max-lost-work"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, stderr, code := runCmd(t, tc.args...)
			if code == 0 || !strings.Contains(stderr, tc.want) {
				t.Fatalf("exit %d, stderr %q, want an error naming %s", code, stderr, tc.want)
			}
		})
	}
}
