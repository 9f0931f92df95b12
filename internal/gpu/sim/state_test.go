package sim

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/equality"
)

// TestStateFileKeepsMIGAcrossRestarts re-partitions GPU 3, starts a new
// backend on the same state file, and finds the same MIG devices (same
// UUIDs) there, with the other GPUs as the profile has them.
func TestStateFileKeepsMIGAcrossRestarts(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.json")
	p, err := Load("dgxh100")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	b, err := New(p, Options{NodeName: "n", StateFile: path})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.SetMIGMode(ctx, 3, true); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		gi, err := b.CreateGPUInstance(ctx, 3, "3g.40gb", nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := b.CreateComputeInstance(ctx, 3, gi.ID, ""); err != nil {
			t.Fatal(err)
		}
	}
	// A GPU instance left without a compute instance, as an interrupted
	// apply leaves one.
	if err := b.SetMIGMode(ctx, 5, true); err != nil {
		t.Fatal(err)
	}
	if _, err := b.CreateGPUInstance(ctx, 5, "1g.10gb", nil); err != nil {
		t.Fatal(err)
	}
	before, _ := b.Devices(ctx)
	_ = b.Close()

	b2, err := New(p, Options{NodeName: "n", StateFile: path})
	if err != nil {
		t.Fatalf("restarting on the state file: %v", err)
	}
	defer func() { _ = b2.Close() }()
	after, _ := b2.Devices(ctx)
	if len(after[3].MIGDevices) != 2 || after[3].MIGDevices[0].UUID != before[3].MIGDevices[0].UUID || !after[3].MIG.Current {
		t.Fatalf("GPU 3 after restart: %+v", after[3])
	}
	gis, _ := b2.GPUInstances(ctx, 5)
	if len(gis) != 1 || len(after[5].MIGDevices) != 0 {
		t.Errorf("GPU 5 after restart: %d GPU instances, %d devices; want 1 and 0", len(gis), len(after[5].MIGDevices))
	}
	if after[0].MIG.Current || len(after[0].MIGDevices) != 0 {
		t.Errorf("GPU 0 changed: %+v", after[0].MIG)
	}
}

func TestStateFileErrors(t *testing.T) {
	p, _ := Load("dgxh100")
	for _, tc := range []struct{ name, content, want string }{
		{"unknown field", `{"version":1,"gpus":[{"index":0,"mode":true}]}`, `unknown field "mode"`},
		{"version", `{"version":2}`, "version: want 1, got 2"},
		{"no such GPU", `{"version":1,"gpus":[{"index":9,"current":true}]}`, "gpus[0] (GPU 9): the profile has 8 GPUs"},
		{"bad profile", `{"version":1,"gpus":[{"index":1,"current":true,"pending":true,"instances":[{"profile":"9g.1gb","start":0,"size":1}]}]}`, "gpus[0] (GPU 1): instances[0]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "state.json")
			if err := os.WriteFile(path, []byte(tc.content), 0o600); err != nil {
				t.Fatal(err)
			}
			_, err := New(p, Options{StateFile: path})
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), path) {
				t.Fatalf("got %v, want %q naming the file", err, tc.want)
			}
		})
	}
}

// FuzzParseState: a state file the backend accepts sets each GPU it
// lists to what it says, so that the backend's own state file
// (saveState) lists those GPUs exactly as given.
func FuzzParseState(f *testing.F) {
	f.Add([]byte(`{"version":1,"gpus":[{"index":3,"current":true,"pending":true,"instances":[{"profile":"3g.40gb","start":0,"size":4,"computes":["3g.40gb"]}]}]}`))
	f.Add([]byte(`{"version":1,"gpus":[]}`))
	f.Add([]byte(`{"version":1,"gpus":[{"index":1,"current":true,"instances":[{"profile":"3g.40gb","start":4,"size":4,"computes":["1c.3g.40gb","1c.3g.40gb"]},` +
		`{"profile":"1g.10gb","start":0,"size":1,"computes":[""]}]},{"index":0}]}`))
	p, err := Load("dgxh100")
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		in, err := ParseState(data)
		if err != nil {
			return
		}
		path := filepath.Join(t.TempDir(), "state.json")
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		// Any parsed file either starts the node or is refused, never
		// panics.
		b, err := New(p, Options{StateFile: path})
		if err != nil {
			return
		}
		defer func() { _ = b.Close() }()
		b.mu.Lock()
		b.saveState()
		b.mu.Unlock()
		saved, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		out, err := ParseState(saved)
		if err != nil {
			t.Fatalf("the backend's own state file does not parse: %v\n%s", err, saved)
		}
		got := map[int]stateGPU{}
		for _, g := range out.GPUs {
			got[g.Index] = g
		}
		for _, want := range in.GPUs {
			if !b.gpus[want.Index].mig.capable {
				continue // listed with MIG off, as the profile has it
			}
			// A compute instance named "" or after its GPU instance is
			// the GPU instance's full compute instance.
			for i := range want.Instances {
				in := &want.Instances[i]
				for j, c := range in.Computes {
					if c == "" {
						in.Computes[j] = in.Profile
					}
				}
			}
			if g, ok := got[want.Index]; !ok || !equality.Semantic.DeepEqual(g, want) {
				t.Fatalf("GPU %d restored from %s is saved as %+v; want %+v", want.Index, data, g, want)
			}
		}
	})
}
