package gpunode_test

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/equality"

	"github.com/gpuplane/gpuplane/api/gpunode"
)

const h100Layout = `{"v":1,"gpus":[{"i":0,"id":"0x233010DE","name":"NVIDIA H100 80GB HBM3","mig":true,"devices":{"1g.10gb":7}},{"i":1,"id":"0x233010DE","name":"NVIDIA H100 80GB HBM3","mig":false}],"models":{"0x233010DE":[{"n":"1g.10gb","pid":19,"s":1,"c":7,"m":9856,"p":[[0,1],[1,1],[2,1],[3,1],[4,1],[5,1],[6,1]]},{"n":"7g.80gb","pid":0,"s":7,"c":1,"m":80000,"p":[[0,8]]}]}}`

func TestParseMIGLayout(t *testing.T) {
	l, err := gpunode.ParseMIGLayout(h100Layout)
	if err != nil {
		t.Fatal(err)
	}
	if len(l.GPUs) != 2 || l.GPUs[0].Devices["1g.10gb"] != 7 || len(l.Models["0x233010DE"]) != 2 {
		t.Fatalf("parsed %+v", l)
	}
	for _, tc := range []struct{ name, in, want string }{
		{"unknown field", `{"v":1,"gpus":[],"extra":1}`, `unknown field "extra"`},
		{"version", `{"v":2,"gpus":[]}`, "v: want 1, got 2"},
		{"order", `{"v":1,"gpus":[{"i":1,"id":"0x233010DE","name":"x","mig":false}]}`, "gpus[0].i: 1"},
		{"device ID", `{"v":1,"gpus":[{"i":0,"id":"H100","name":"x","mig":false}]}`, `gpus[0].id: "H100"`},
		{"count", `{"v":1,"gpus":[{"i":0,"id":"0x233010DE","name":"x","mig":true,"devices":{"1g.10gb":9}}]}`, `gpus[0].devices["1g.10gb"]: 9`},
		{"placement", `{"v":1,"gpus":[],"models":{"0x233010DE":[{"n":"a","s":1,"c":1,"m":1,"p":[[15,4]]}]}}`, "outside 16 memory slices"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := gpunode.ParseMIGLayout(tc.in)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want %q", err, tc.want)
			}
		})
	}
}

// FuzzParseMIGLayout: any annotation value parses within the bounds or is
// an error, never a panic; what parses survives a round trip.
func FuzzParseMIGLayout(f *testing.F) {
	f.Add(h100Layout)
	f.Add(`{"v":1,"gpus":[]}`)
	f.Fuzz(func(t *testing.T, s string) {
		l, err := gpunode.ParseMIGLayout(s)
		if err != nil {
			return
		}
		b, err := json.Marshal(l)
		if err != nil {
			t.Fatal(err)
		}
		back, err := gpunode.ParseMIGLayout(string(b))
		if err != nil || !equality.Semantic.DeepEqual(back, l) {
			t.Fatalf("round trip of %q through %s: %+v, %v; want %+v", s, b, back, err, l)
		}
		if again, _ := json.Marshal(back); !bytes.Equal(again, b) {
			t.Fatalf("encoding is not stable: %s, then %s", b, again)
		}
	})
}
