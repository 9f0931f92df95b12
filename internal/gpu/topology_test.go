package gpu

import (
	"encoding/json"
	"testing"
)

func TestTopologyMatrixAndScore(t *testing.T) {
	topo := NewTopology(3)
	topo.Set(0, 1, Link{NVLinks: 18, PCIe: PCIeNode})
	topo.Set(0, 2, Link{PCIe: PCIeSystem})
	m := topo.Matrix()
	want := [][]string{{"X", "NV18", "SYS"}, {"NV18", "X", "?"}, {"SYS", "?", "X"}}
	for i := range want {
		for j := range want[i] {
			if m[i][j] != want[i][j] {
				t.Errorf("matrix[%d][%d] = %q, want %q", i, j, m[i][j], want[i][j])
			}
		}
	}
	if _, ok := topo.Between(1, 2); ok {
		t.Error("an unset pair is known")
	}
	if _, ok := topo.Between(0, 7); ok {
		t.Error("an out-of-range pair is known")
	}
	nv, _ := topo.Between(1, 0)
	sys, _ := topo.Between(2, 0)
	pix := Link{PCIe: PCIeSingle}
	if nv.Score() <= pix.Score() || pix.Score() <= sys.Score() {
		t.Errorf("scores NV18=%d PIX=%d SYS=%d are not ordered by bandwidth", nv.Score(), pix.Score(), sys.Score())
	}
	b, err := json.Marshal(topo)
	if err != nil || string(b) != `{"matrix":[["X","NV18","SYS"],["NV18","X","?"],["SYS","?","X"]]}` {
		t.Errorf("json = %s, %v", b, err)
	}
}

func TestParsePCIeLevel(t *testing.T) {
	for _, code := range []string{"BRD", "PIX", "PXB", "PHB", "NODE", "SYS", "sys"} {
		t.Run(code, func(t *testing.T) {
			l, err := ParsePCIeLevel(code)
			if err != nil {
				t.Fatal(err)
			}
			if l.String() != map[string]string{"sys": "SYS"}[code] && l.String() != code {
				t.Errorf("round trip %q -> %q", code, l)
			}
		})
	}
	if _, err := ParsePCIeLevel("NVLINK"); err == nil {
		t.Error("ParsePCIeLevel(NVLINK) succeeded")
	}
}

func TestPlacementOverlaps(t *testing.T) {
	tests := []struct {
		name string
		a, b Placement
		want bool
	}{
		{"disjoint", Placement{0, 2}, Placement{2, 2}, false},
		{"same", Placement{4, 4}, Placement{4, 4}, true},
		{"inside", Placement{0, 8}, Placement{3, 1}, true},
		{"partial", Placement{2, 2}, Placement{3, 2}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.a.Overlaps(tt.b); got != tt.want || tt.b.Overlaps(tt.a) != tt.want {
				t.Errorf("Overlaps = %v, want %v (both ways)", got, tt.want)
			}
		})
	}
}
