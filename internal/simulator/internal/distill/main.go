// Command distill rebuilds internal/simulator/workload_tables.json, the
// small tables the contended workload is drawn from, out of the full
// traces in ../shared/traces (openb, Philly, Alibaba 2025). `go generate
// ./internal/simulator` runs it; it says what it read and wrote.
package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"

	"github.com/gpuplane/gpuplane/internal/simulator"
)

func main() {
	traces := flag.String("traces", "../../../shared/traces", "directory holding openb/, philly/ and alibaba-gpu-2025/")
	out := flag.String("o", "workload_tables.json", "file to write")
	quantiles := flag.Int("quantiles", 200, "run-time quantiles to keep (evenly spaced, plus the least)")
	flag.Parse()
	if err := run(*traces, *out, *quantiles); err != nil {
		fmt.Fprintln(os.Stderr, "distill:", err)
		os.Exit(1)
	}
}

func run(traces, out string, quantiles int) error {
	if quantiles < 1 {
		return fmt.Errorf("-quantiles must be >= 1, got %d", quantiles)
	}
	t, err := simulator.ReadWorkloadTables(traces, quantiles)
	if err != nil {
		return err
	}
	var b bytes.Buffer
	if err := t.WriteJSON(&b); err != nil {
		return err
	}
	if err := os.WriteFile(out, b.Bytes(), 0o644); err != nil {
		return fmt.Errorf("writing %s: %w", out, err)
	}
	fmt.Printf("distill: rebuilt %s from %s:\n", out, traces)
	for _, s := range t.Sources {
		fmt.Println("  " + s)
	}
	return nil
}
