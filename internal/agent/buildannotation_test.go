package agent

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gpuplane/gpuplane/api/buildinfo"
)

// flakyNodes fails the first fails patches, then records the next and
// cancels the test's context through done.
type flakyNodes struct {
	mu    sync.Mutex
	fails int
	calls int
	got   []byte
	opts  metav1.PatchOptions
	pt    types.PatchType
	done  func()
}

func (f *flakyNodes) Patch(_ context.Context, _ string, pt types.PatchType, data []byte, opts metav1.PatchOptions, _ ...string) (*corev1.Node, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	if f.calls <= f.fails {
		return nil, errors.New("connection refused")
	}
	f.got, f.opts, f.pt = data, opts, pt
	f.done()
	return &corev1.Node{}, nil
}

func TestBuildPartAppliesTheAnnotationUntilTaken(t *testing.T) {
	info := buildinfo.Info{Version: "v0.1.0", Commit: "abc", GoVersion: "go1.26.0", Platform: "linux/amd64"}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	nodes := &flakyNodes{fails: 2, done: cancel}
	p, err := buildPart(nodes, "gpu-1", info, time.Millisecond, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.run(ctx); err != nil {
		t.Fatalf("run: %v", err)
	}
	if nodes.calls != 3 {
		t.Errorf("patched %d times, want 3 (two failures, then the one taken)", nodes.calls)
	}
	if nodes.pt != types.ApplyPatchType || nodes.opts.FieldManager != buildFieldManager {
		t.Errorf("patch type %s, field manager %q; want server-side apply under %q", nodes.pt, nodes.opts.FieldManager, buildFieldManager)
	}
	var node corev1.Node
	if err := json.Unmarshal(nodes.got, &node); err != nil {
		t.Fatal(err)
	}
	if node.Name != "gpu-1" {
		t.Errorf("applied to node %q", node.Name)
	}
	got, err := buildinfo.Parse(buildinfo.AgentAnnotation, node.Annotations[buildinfo.AgentAnnotation])
	if err != nil || got != info {
		t.Errorf("annotation reads back as %+v, %v; want %+v", got, err, info)
	}
}

func TestBuildPartRefusesAnInvalidBuild(t *testing.T) {
	_, err := buildPart(&flakyNodes{}, "gpu-1", buildinfo.Info{}, time.Millisecond, slog.New(slog.DiscardHandler))
	if err == nil {
		t.Fatal("a build without a version was accepted")
	}
}
