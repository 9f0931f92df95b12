package main

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// TestTablesAreCurrent fails when the simulator's tables differ from what
// go-nvml's mocks say now: after a go-nvml upgrade, run go generate in
// internal/gpu/sim.
func TestTablesAreCurrent(t *testing.T) {
	want, err := render()
	if err != nil {
		t.Fatalf("rendering the tables from go-nvml's mocks: %v", err)
	}
	path := filepath.Join("..", "..", "tables_nvml.go")
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s is stale: run `go generate ./internal/gpu/sim` (it differs from go-nvml's mocks)", path)
	}
}
