package v1alpha1

import (
	"strings"
	"testing"
)

func TestParseMovable(t *testing.T) {
	tests := []struct {
		name             string
		in               map[string]string
		wantMovable, set bool
		wantErr          string
	}{
		{"absent", map[string]string{"other": "true"}, false, false, ""},
		{"true", map[string]string{MovableAnnotation: "true"}, true, true, ""},
		{"false", map[string]string{MovableAnnotation: "false"}, false, true, ""},
		{"not a boolean", map[string]string{MovableAnnotation: "yes"}, false, false, `metadata.annotations[scheduling.gpuplane.io/movable]: want "true" or "false", got "yes"`},
		{"case matters", map[string]string{MovableAnnotation: "True"}, false, false, "movable"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m, set, err := ParseMovable(tc.in)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || m != tc.wantMovable || set != tc.set {
				t.Fatalf("= %v, %v, %v; want %v, %v", m, set, err, tc.wantMovable, tc.set)
			}
		})
	}
}

// FuzzParseMovable: any value is true, false or an error naming the
// annotation, never a panic.
func FuzzParseMovable(f *testing.F) {
	for _, s := range []string{"true", "false", "", "yes", "TRUE"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		m, set, err := ParseMovable(map[string]string{MovableAnnotation: v})
		switch {
		case err != nil && (set || m || !strings.Contains(err.Error(), MovableAnnotation)):
			t.Fatalf("%q: %v %v %v", v, m, set, err)
		case err == nil && (!set || m != (v == "true")):
			t.Fatalf("%q: %v %v", v, m, set)
		}
	})
}
