package simulate

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestSpotNodes(t *testing.T) {
	small := []string{"--workload", "contended", "--mode", "event", "--nodes", "16", "--hours", "2", "--seeds", "1", "--config", "gpuplane"}
	spot := append(small[:len(small):len(small)], "--spot-fraction", "0.5", "--spot-reclaim-per-hour", "0.5")
	t.Run("json", func(t *testing.T) {
		out, _, code := runCmd(t, append(spot, "-o", "json")...)
		if code != 0 {
			t.Fatalf("exit %d:\n%s", code, out)
		}
		var r struct{ Event map[string]any }
		if err := json.Unmarshal([]byte(out), &r); err != nil {
			t.Fatal(err)
		}
		if r.Event["spotNodes"] != float64(8) {
			t.Fatalf("spotNodes %v, want half of 16: %s", r.Event["spotNodes"], out)
		}
		for _, k := range []string{"nodesLost", "nodeLossPods", "nodeLossGangs", "lostGpuHoursNodeLoss"} {
			if v, ok := r.Event[k].(float64); !ok || v <= 0 {
				t.Fatalf("event %q = %v, want a count above 0 at this rate: %s", k, r.Event[k], out)
			}
		}
	})
	t.Run("table", func(t *testing.T) {
		out, _, code := runCmd(t, spot...)
		if code != 0 || !strings.Contains(out, "LOST GPU-H (NODE LOSS)") || !strings.Contains(out, "NODES LOST") {
			t.Fatalf("exit %d, table:\n%s", code, out)
		}
		out, _, code = runCmd(t, small...)
		if code != 0 || strings.Contains(out, "NODES LOST") {
			t.Fatalf("exit %d, a node loss table without spot nodes:\n%s", code, out)
		}
	})
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"fraction", append(small[:len(small):len(small)], "--spot-fraction", "1.5", "--spot-reclaim-per-hour", "1"), "--spot-fraction"},
		{"rate", append(small[:len(small):len(small)], "--spot-fraction", "0.5", "--spot-reclaim-per-hour", "-1"), "--spot-reclaim-per-hour"},
		{"only one", append(small[:len(small):len(small)], "--spot-fraction", "0.5"), "give both"},
		{"notice", append(spot[:len(spot):len(spot)], "--spot-notice", "1.5s"), "--spot-notice"},
		{"packing", []string{"--trace", "x.yaml", "--spot-fraction", "0.5", "--spot-reclaim-per-hour", "1"}, "--mode event"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, stderr, code := runCmd(t, tc.args...)
			if code == 0 || !strings.Contains(stderr, tc.want) {
				t.Fatalf("exit %d, stderr %q, want an error naming %s", code, stderr, tc.want)
			}
		})
	}
}
