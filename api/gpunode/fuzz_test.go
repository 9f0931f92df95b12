package gpunode_test

import (
	"bytes"
	"encoding/json"
	"math/big"
	"slices"
	"strconv"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"

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
		// The agent writes the annotation with json.Marshal
		// (labels.Topology).
		b, err := json.Marshal(tp)
		if err != nil {
			t.Fatal(err)
		}
		back, err := gpunode.ParseTopology(string(b))
		if err != nil || !equality.Semantic.DeepEqual(back, tp) {
			t.Fatalf("round trip of %q through %s: %+v, %v; want %+v", s, b, back, err, tp)
		}
		if again, _ := json.Marshal(back); !bytes.Equal(again, b) {
			t.Fatalf("encoding is not stable: %s, then %s", b, again)
		}
	})
}

// FuzzParseLabels: each label parser accepts exactly the decimal whole
// numbers within its bounds, reads them as their value, and reads its
// value's decimal form back as the same value.
func FuzzParseLabels(f *testing.F) {
	for _, s := range []string{"8", "0", "-1", "5000000", "81559", "1e3", " 4", "99999999999999999999", "+7", "007", "-0", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		for _, p := range []struct {
			label  string
			parse  func(string) (int64, error)
			lo, hi int64
		}{
			{gpunode.LabelGPUCount, asInt64(gpunode.ParseGPUCount), 0, gpunode.MaxGPUs},
			{gpunode.LabelGPUReplicas, asInt64(gpunode.ParseReplicas), 1, gpunode.MaxReplicas},
			{gpunode.LabelGPUMemory, gpunode.ParseGPUMemoryMiB, 0, gpunode.MaxGPUMemoryMiB},
		} {
			// The oracle: an optionally signed decimal number, within
			// bounds.
			want, isNumber := new(big.Int).SetString(s, 10)
			valid := isNumber && want.Cmp(big.NewInt(p.lo)) >= 0 && want.Cmp(big.NewInt(p.hi)) <= 0
			n, err := p.parse(s)
			if (err == nil) != valid || valid && n != want.Int64() {
				t.Fatalf("%s %q -> %d, %v; want valid %v", p.label, s, n, err, valid)
			}
			if err != nil {
				continue
			}
			if back, err := p.parse(strconv.FormatInt(n, 10)); err != nil || back != n {
				t.Fatalf("%s %q -> %d does not parse back: %d, %v", p.label, s, n, back, err)
			}
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
		`{"v":1,"gpus":[{"gpu":2,"uuid":"c","state":"held","since":"2026-01-01T01:00:00.75+01:00"},{"gpu":1,"uuid":"b","state":"held","since":"2026-01-01T00:00:00Z"}]}`,
		`{"v":1,"gpus":[{"gpu":1,"uuid":"b","state":"held","since":"0001-01-01T00:00:00.5Z"}]}`,
		`{"v":1,"gpus":[{"gpu":1,"uuid":"b","state":"held","since":"9999-12-31T23:59:59-01:00"}]}`,
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
		back, err := gpunode.ParseQuarantine(out)
		if err != nil {
			t.Fatalf("round trip of %q through %q: %v", s, out, err)
		}
		// FormatQuarantine orders the GPUs by index and keeps whole
		// seconds; everything else comes back as it was.
		want := slices.Clone(r.GPUs)
		slices.SortFunc(want, func(a, b gpunode.QuarantinedGPU) int { return a.Index - b.Index })
		if len(back.GPUs) != len(want) {
			t.Fatalf("round trip of %q through %q: %d GPUs, want %d", s, out, len(back.GPUs), len(want))
		}
		for i, w := range want {
			g := back.GPUs[i]
			if !g.Since.Equal(w.Since.Truncate(time.Second)) {
				t.Fatalf("round trip of %q through %q: gpus[%d].since %v, want %v", s, out, i, g.Since, w.Since.Truncate(time.Second))
			}
			g.Since, w.Since = time.Time{}, time.Time{}
			if g != w {
				t.Fatalf("round trip of %q through %q: gpus[%d] %+v, want %+v", s, out, i, g, w)
			}
		}
		if again, err := gpunode.FormatQuarantine(back); err != nil || again != out {
			t.Fatalf("FormatQuarantine is not stable: %q, then %q, %v", out, again, err)
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
