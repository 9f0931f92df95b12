package gpu

import "testing"

func TestMIGProfileName(t *testing.T) {
	tests := []struct {
		name      string
		id, slice int
		mem, tot  uint64
		want      string
	}{
		{"a100-40gb 1g", 0, 1, 4864, 40960, "1g.5gb"},
		{"a100-40gb 2g", 1, 2, 9856, 40960, "2g.10gb"},
		{"a100-40gb 3g", 2, 3, 19968, 40960, "3g.20gb"},
		{"a100-40gb 7g", 4, 7, 40192, 40960, "7g.40gb"},
		{"h100-80gb 1g", 0, 1, 10240, 81920, "1g.10gb"},
		{"h100-80gb 1g+me", 7, 1, 10240, 81920, "1g.10gb+me"},
		{"h100-80gb 1g rev2", 9, 1, 20480, 81920, "1g.20gb"},
		{"h100-80gb 7g", 4, 7, 81920, 81920, "7g.80gb"},
		{"h200-141gb 1g", 0, 1, 18432, 144384, "1g.18gb"},
		{"h200-141gb 1g rev2", 9, 1, 35840, 144384, "1g.35gb"},
		{"h200-141gb 3g", 2, 3, 72704, 144384, "3g.71gb"},
		{"h200-141gb 7g", 4, 7, 144384, 144384, "7g.141gb"},
		{"b200-180gb 1g", 0, 1, 23552, 184320, "1g.23gb"},
		{"b200-180gb 3g", 2, 3, 92160, 184320, "3g.90gb"},
		{"no total", 0, 1, 10240, 0, "1g.10gb"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := MIGProfileName(tt.id, tt.slice, tt.mem, tt.tot); got != tt.want {
				t.Errorf("MIGProfileName = %q, want %q", got, tt.want)
			}
		})
	}
	if got := MIGDeviceName("3g.40gb", 3, 1); got != "1c.3g.40gb" {
		t.Errorf("MIGDeviceName = %q", got)
	}
	if got := MIGDeviceName("3g.40gb", 3, 3); got != "3g.40gb" {
		t.Errorf("MIGDeviceName full = %q", got)
	}
}
