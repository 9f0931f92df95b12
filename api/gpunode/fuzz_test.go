package gpunode_test

import (
	"encoding/json"
	"testing"

	"github.com/gpuplane/gpuplane/api/gpunode"
)

// FuzzParseTopology: any annotation value parses to a topology within the
// bounds or to an error, never a panic; what parses survives a round trip.
func FuzzParseTopology(f *testing.F) {
	for _, s := range []string{
		`{"v":1,"gpus":8,"groups":[{"gpus":[0,1,2,3,4,5,6,7],"nvlinks":18}],"numa":[0,0,0,0,1,1,1,1]}`,
		`{"v":1,"gpus":4,"groups":[{"gpus":[0,1],"nvlinks":12}],"numa":[0,0,1,1]}`,
		`{"v":1,"gpus":-1}`, `{"v":1,"gpus":2000000000}`, `{"v":2,"gpus":1}`, `{`, ``,
		`{"v":1,"gpus":2,"groups":[{"gpus":[1,0],"nvlinks":1}]}`,
		`{"v":1,"gpus":3,"groups":[],"numa":[0,0,1],"mig":[[1,1,1,1,1,1,1],[3,3]]}`,
		`{"v":1,"gpus":1,"mig":[[4,4]]}`, `{"v":1,"gpus":1,"mig":[[0]]}`, `{"v":1,"gpus":1,"mig":[[],[1]]}`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		tp, err := gpunode.ParseTopology(s)
		if err != nil {
			return
		}
		if tp.GPUs < 0 || tp.GPUs > gpunode.MaxGPUs || len(tp.NUMA) > tp.GPUs || len(tp.MIG) > tp.GPUs {
			t.Fatalf("accepted out-of-bounds topology %+v", tp)
		}
		b, err := json.Marshal(tp)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := gpunode.ParseTopology(string(b)); err != nil {
			t.Fatalf("round trip of %q: %v", s, err)
		}
	})
}

// FuzzParseLabels: the label parsers accept only values within their
// bounds.
func FuzzParseLabels(f *testing.F) {
	for _, s := range []string{"8", "0", "-1", "5000000", "81559", "1e3", " 4", "99999999999999999999"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if n, err := gpunode.ParseGPUCount(s); err == nil && (n < 0 || n > gpunode.MaxGPUs) {
			t.Fatalf("gpu.count %q -> %d", s, n)
		}
		if n, err := gpunode.ParseReplicas(s); err == nil && (n < 1 || n > gpunode.MaxReplicas) {
			t.Fatalf("gpu.replicas %q -> %d", s, n)
		}
		if n, err := gpunode.ParseGPUMemoryMiB(s); err == nil && (n < 0 || n > gpunode.MaxGPUMemoryMiB) {
			t.Fatalf("gpu.memory %q -> %d", s, n)
		}
	})
}

// FuzzParseQuarantine: any annotation value parses to a record within the
// bounds or to an error, never a panic; what parses survives a round trip.
func FuzzParseQuarantine(f *testing.F) {
	for _, s := range []string{
		`{"v":1,"gpus":[{"gpu":3,"uuid":"GPU-3","xid":79,"class":"bus","state":"held","node":true,"since":"2026-11-25T17:00:00Z","fails":2}]}`,
		`{"v":1,"gpus":[]}`, `{"v":2,"gpus":[]}`, `{"v":1,"gpus":[{"gpu":-1}]}`, `{`, ``, `{"v":1}{}`,
		`{"v":1,"gpus":[{"gpu":0,"uuid":"a","state":"returned","since":"2026-01-01T00:00:00Z"},{"gpu":0,"uuid":"a","state":"held","since":"2026-01-01T00:00:00Z"}]}`,
		`{"v":1,"gpus":[{"gpu":1,"uuid":"b","state":"validating","since":"2026-01-01T00:00:00Z","xid":99999999}]}`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		r, err := gpunode.ParseQuarantine(s)
		if err != nil {
			return
		}
		if len(r.GPUs) > gpunode.MaxGPUs {
			t.Fatalf("accepted %d GPUs", len(r.GPUs))
		}
		for _, g := range r.GPUs {
			if g.Index < 0 || g.Index >= gpunode.MaxGPUs || g.XID > gpunode.MaxXID || g.Fails < 0 {
				t.Fatalf("accepted out-of-bounds GPU %+v", g)
			}
		}
		out, err := gpunode.FormatQuarantine(r)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := gpunode.ParseQuarantine(out); err != nil {
			t.Fatalf("round trip of %q: %v", s, err)
		}
	})
}

func FuzzParseGPUAPI(f *testing.F) {
	for _, s := range []string{"dra", "device-plugin", "both", " both", "DRA", "", "dra,both"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		a, err := gpunode.ParseGPUAPI(s)
		if err != nil {
			if a != "" {
				t.Fatalf("%q: error %v with value %q", s, err, a)
			}
			return
		}
		if !a.DevicePlugin() && !a.DRA() {
			t.Fatalf("%q -> %q serves through neither API", s, a)
		}
		if again, err := gpunode.ParseGPUAPI(string(a)); err != nil || again != a {
			t.Fatalf("%q -> %q does not parse back: %q, %v", s, a, again, err)
		}
	})
}
