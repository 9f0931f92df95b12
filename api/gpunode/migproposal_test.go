package gpunode_test

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/equality"

	"github.com/gpuplane/gpuplane/api/gpunode"
)

const h100Proposal = `{"v":1,"gpus":[{"i":3,"mig":true,"devices":{"1g.10gb":7},"at":1764130000000},{"i":5,"mig":false,"at":1764130000000}]}`

func TestParseMIGProposal(t *testing.T) {
	p, err := gpunode.ParseMIGProposal(h100Proposal)
	if err != nil {
		t.Fatal(err)
	}
	if len(p.GPUs) != 2 || p.GPUs[0].Devices["1g.10gb"] != 7 || p.GPUs[1].MIG || p.GPUs[0].String() != "mig: 7x1g.10gb" || p.GPUs[1].String() != "whole GPU" {
		t.Fatalf("parsed %+v", p)
	}
	for _, tc := range []struct{ name, in, want string }{
		{"unknown field", `{"v":1,"gpus":[],"extra":1}`, `unknown field "extra"`},
		{"trailing data", `{"v":1,"gpus":[]} {}`, "trailing data"},
		{"version", `{"v":2,"gpus":[]}`, "v: want 1, got 2"},
		{"negative index", `{"v":1,"gpus":[{"i":-1,"mig":false,"at":0}]}`, "gpus[0].i: -1"},
		{"index too large", `{"v":1,"gpus":[{"i":64,"mig":false,"at":0}]}`, "gpus[0].i: 64"},
		{"order", `{"v":1,"gpus":[{"i":2,"mig":false,"at":0},{"i":2,"mig":false,"at":0}]}`, "gpus[1].i: 2, want one entry per GPU in index order"},
		{"time", `{"v":1,"gpus":[{"i":0,"mig":false,"at":-5}]}`, "gpus[0].at: -5"},
		{"devices without MIG", `{"v":1,"gpus":[{"i":0,"mig":false,"devices":{"1g.10gb":1},"at":0}]}`, "gpus[0].devices: a GPU with MIG off"},
		{"profile name", `{"v":1,"gpus":[{"i":0,"mig":true,"devices":{"big":1},"at":0}]}`, `gpus[0].devices["big"]: not a MIG profile`},
		{"count", `{"v":1,"gpus":[{"i":0,"mig":true,"devices":{"1g.10gb":0},"at":0}]}`, `gpus[0].devices["1g.10gb"]: 0, want 1 to 7`},
		{"too many devices", `{"v":1,"gpus":[{"i":0,"mig":true,"devices":{"1g.10gb":7,"2g.20gb":1},"at":0}]}`, "more than 7 MIG devices"},
		{"size", `{"v":1,"gpus":[` + strings.Repeat(" ", gpunode.MaxMIGProposalBytes) + `]}`, "larger than"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := gpunode.ParseMIGProposal(tc.in)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want %q", err, tc.want)
			}
		})
	}
}

func TestMIGProposalReportedBy(t *testing.T) {
	mig7 := gpunode.MIGProposalGPU{Index: 3, MIG: true, Devices: map[string]int{"1g.10gb": 7}}
	off := gpunode.MIGProposalGPU{Index: 3}
	for _, tc := range []struct {
		name string
		p    gpunode.MIGProposalGPU
		g    gpunode.MIGLayoutGPU
		want bool
	}{
		{"applied", mig7, gpunode.MIGLayoutGPU{Index: 3, MIG: true, Devices: map[string]int{"1g.10gb": 7}}, true},
		{"zero counts ignored", mig7, gpunode.MIGLayoutGPU{Index: 3, MIG: true, Devices: map[string]int{"1g.10gb": 7, "3g.40gb": 0}}, true},
		{"still whole", mig7, gpunode.MIGLayoutGPU{Index: 3}, false},
		{"other devices", mig7, gpunode.MIGLayoutGPU{Index: 3, MIG: true, Devices: map[string]int{"3g.40gb": 2}}, false},
		{"other GPU", mig7, gpunode.MIGLayoutGPU{Index: 2, MIG: true, Devices: map[string]int{"1g.10gb": 7}}, false},
		{"MIG off applied", off, gpunode.MIGLayoutGPU{Index: 3}, true},
		{"MIG off not yet", off, gpunode.MIGLayoutGPU{Index: 3, MIG: true}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.p.ReportedBy(&tc.g); got != tc.want {
				t.Fatalf("ReportedBy = %v, want %v", got, tc.want)
			}
		})
	}
}

// FuzzParseMIGProposal: any annotation value parses within the bounds or
// is an error, never a panic; what parses survives a round trip.
func FuzzParseMIGProposal(f *testing.F) {
	f.Add(h100Proposal)
	f.Add(`{"v":1,"gpus":[]}`)
	f.Add(`{"v":1,"gpus":[{"i":0,"mig":true,"devices":{"1c.3g.40gb":2,"1g.10gb+me":1},"at":5}]}`)
	f.Fuzz(func(t *testing.T, s string) {
		p, err := gpunode.ParseMIGProposal(s)
		if err != nil {
			return
		}
		for _, g := range p.GPUs {
			if g.Index < 0 || g.Index >= gpunode.MaxGPUs || len(g.Devices) > gpunode.MaxMIGSlices {
				t.Fatalf("out of bounds: %+v", g)
			}
		}
		b, err := json.Marshal(p)
		if err != nil {
			t.Fatal(err)
		}
		back, err := gpunode.ParseMIGProposal(string(b))
		if err != nil || !equality.Semantic.DeepEqual(back, p) {
			t.Fatalf("round trip of %q through %s: %+v, %v; want %+v", s, b, back, err, p)
		}
		if again, _ := json.Marshal(back); !bytes.Equal(again, b) {
			t.Fatalf("encoding is not stable: %s, then %s", b, again)
		}
	})
}
