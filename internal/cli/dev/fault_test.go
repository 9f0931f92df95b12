package dev

import (
	"bytes"
	"context"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/gpuplane/gpuplane/internal/gpu/sim"
)

func TestFaultPath(t *testing.T) {
	tests := []struct {
		name string
		f    faultFlags
		want string
		err  string
	}{
		{"xid", faultFlags{gpu: 3, xid: 79}, "/xid?gpu=3&xid=79", ""},
		{"lose", faultFlags{gpu: 3, lose: true}, "/lose?gpu=3", ""},
		{"fail reset", faultFlags{gpu: 2, failReset: true}, "/fail?gpu=2&message=the+simulated+driver+refused+the+reset&op=ResetGPU", ""},
		{"clear", faultFlags{gpu: -1, clear: true}, "/clear", ""},
		{"nothing", faultFlags{gpu: 3}, "", "give one of --xid, --lose, --fail-reset and --clear"},
		{"two", faultFlags{gpu: 3, lose: true, xid: 48}, "", "give one of"},
		{"no gpu", faultFlags{gpu: -1, lose: true}, "", "--gpu: want the index"},
		{"not an xid", faultFlags{gpu: 1, xid: 1 << 20}, "", "--xid: 1048576 is not an XID"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := faultPath(&tc.f)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("faultPath = %q, %v; want an error with %q", got, err, tc.err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("faultPath = %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}

func TestRunFaultReachesTheAgent(t *testing.T) {
	p, err := sim.Load("dgxh100")
	if err != nil {
		t.Fatal(err)
	}
	b, err := sim.New(p, sim.Options{NodeName: "gpu-node-1"})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = b.Close() }()
	srv := httptest.NewServer(b.ControlHandler())
	defer srv.Close()
	d := stateDir(t.TempDir())
	if err := d.writeState(&State{Phase: PhaseReady, Faults: map[string]string{"gpu-node-1": strings.TrimPrefix(srv.URL, "http://")}}); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := runFault(context.Background(), d, "gpu-node-1", &faultFlags{gpu: 3, lose: true}, &out); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "GPU 3 failed") {
		t.Errorf("output %q", out.String())
	}
	if err := b.Reset(3); err == nil {
		t.Fatal("GPU 3 is not lost after gpuplane dev fault --lose")
	}
	err = runFault(context.Background(), d, "gpu-node-9", &faultFlags{gpu: 3, lose: true}, &out)
	if err == nil || !strings.Contains(err.Error(), `node "gpu-node-9" has no simulated agent`) || !strings.Contains(err.Error(), "gpu-node-1") {
		t.Fatalf("unknown node: %v", err)
	}
	err = runFault(context.Background(), d, "gpu-node-1", &faultFlags{gpu: 12, xid: 79}, &out)
	if err == nil || !strings.Contains(err.Error(), "refused the fault") {
		t.Fatalf("GPU 12 of a DGX: %v", err)
	}
}

// The ports found for the agents are each a different one, held until all
// are found: two agents, or one agent's fault controls and its metrics,
// never get the same port.
func TestFreeLoopbackAddrsDiffer(t *testing.T) {
	addrs, err := freeLoopbackAddrs(64)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, a := range addrs {
		if seen[a] || !strings.HasPrefix(a, "127.0.0.1:") {
			t.Fatalf("address %q given twice or not on loopback, among %v", a, addrs)
		}
		seen[a] = true
	}
}
