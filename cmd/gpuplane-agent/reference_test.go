package main

import (
	"bytes"
	"flag"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/gpuplane/gpuplane/internal/agent"
	"github.com/gpuplane/gpuplane/internal/docgen/cobradoc"
)

var update = flag.Bool("update", false, "rewrite docs/reference/cli/gpuplane-agent*.md (make docs)")

// TestReferenceIsCurrent fails when a committed page of gpuplane-agent's
// commands in docs/reference/cli differs from its help, or documents a
// command that is gone; with -update (make docs) it rewrites them. It is
// here rather than in internal/docgen, whose binary links the gpuplane CLI
// (cobradoc says why the two stay apart).
func TestReferenceIsCurrent(t *testing.T) {
	root := filepath.Join("..", "..")
	pages, err := cobradoc.Pages(agent.NewCommand(io.Discard, io.Discard))
	if err != nil {
		t.Fatal(err)
	}
	if page := pages[cobradoc.Dir+"/gpuplane-agent.md"]; !bytes.Contains(page, []byte("--simulate")) || !bytes.Contains(page, []byte("--metrics-addr")) {
		t.Fatalf("gpuplane-agent's page lacks its flags:\n%s", page)
	}
	committed, err := cobradoc.Committed(root, "gpuplane-agent")
	if err != nil {
		t.Fatal(err)
	}
	for _, rel := range committed {
		if _, ok := pages[rel]; ok {
			continue
		}
		if !*update {
			t.Errorf("%s documents no command: run make docs", rel)
		} else if err := os.Remove(filepath.Join(root, rel)); err != nil {
			t.Fatal(err)
		}
	}
	for rel, want := range pages {
		path := filepath.Join(root, rel)
		if *update {
			if err := os.WriteFile(path, want, 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if got, err := os.ReadFile(path); err != nil || !bytes.Equal(got, want) {
			t.Errorf("%s is stale: run make docs (or make generate) and commit it", rel)
		}
	}
}
