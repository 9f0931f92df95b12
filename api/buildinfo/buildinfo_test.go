package buildinfo_test

import (
	"strings"
	"testing"

	"github.com/gpuplane/gpuplane/api/buildinfo"
)

var full = buildinfo.Info{Version: "v0.1.0", Commit: "4f1c2d3e4f1c2d3e4f1c2d3e4f1c2d3e4f1c2d3e-dirty", Date: "2026-11-27T18:02:11Z",
	GoVersion: "go1.26.0", KubernetesClient: "v0.36.3", Platform: "linux/amd64"}

func TestRoundTrip(t *testing.T) {
	for _, in := range []buildinfo.Info{full, {Version: "devel", GoVersion: "go1.26.0"}, {Version: "(devel)"}} {
		s, err := buildinfo.Encode(in)
		if err != nil {
			t.Fatalf("Encode(%+v): %v", in, err)
		}
		out, err := buildinfo.Parse(buildinfo.AgentAnnotation, s)
		if err != nil {
			t.Fatalf("Parse(%s): %v", s, err)
		}
		if out != in {
			t.Errorf("round trip of %+v gave %+v", in, out)
		}
	}
}

func TestParseIgnoresNewerFields(t *testing.T) {
	i, err := buildinfo.Parse(buildinfo.AgentAnnotation, `{"version":"v2.0.0","sbom":"sha256:00"}`)
	if err != nil || i.Version != "v2.0.0" {
		t.Fatalf("a newer build's annotation: %+v, %v", i, err)
	}
}

func TestParseRefuses(t *testing.T) {
	for _, tc := range []struct{ name, value, want string }{
		{"empty", ``, "not the JSON"},
		{"not json", `v0.1.0`, "not the JSON"},
		{"no version", `{"commit":"abc"}`, "version: must not be empty"},
		{"trailing data", `{"version":"v1"} {}`, "data after"},
		{"newline in a field", `{"version":"v1\nFAKE"}`, `version: "v1\nFAKE" has character '\n'`},
		{"markup", `{"version":"v1","commit":"<b>x</b>"}`, "commit:"},
		{"long field", `{"version":"` + strings.Repeat("1", buildinfo.MaxFieldBytes+1) + `"}`, "at most 128"},
		{"long value", `{"version":"v1","commit":"` + strings.Repeat(" ", buildinfo.MaxBytes) + `"}`, "at most 1024"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := buildinfo.Parse(buildinfo.SchedulerAnnotation, tc.value)
			if err == nil {
				t.Fatalf("Parse(%q) accepted it", tc.value)
			}
			if !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), buildinfo.SchedulerAnnotation) {
				t.Errorf("Parse(%q) = %v; want an error naming the annotation and saying %q", tc.value, err, tc.want)
			}
		})
	}
}

// FuzzParse: any value parses to an Info within the bounds or to an error,
// never a panic; what parses survives a round trip.
func FuzzParse(f *testing.F) {
	s, _ := buildinfo.Encode(full)
	for _, v := range []string{s, `{"version":"devel"}`, `{"version":""}`, `{`, ``, `{"version":"v1","platform":"a\u0000b"}`} {
		f.Add(v)
	}
	f.Fuzz(func(t *testing.T, v string) {
		i, err := buildinfo.Parse(buildinfo.AgentAnnotation, v)
		if err != nil {
			return
		}
		if i.Version == "" || len(i.Version) > buildinfo.MaxFieldBytes || len(i.Commit) > buildinfo.MaxFieldBytes {
			t.Fatalf("accepted out-of-bounds %+v", i)
		}
		e, err := buildinfo.Encode(i)
		if err != nil {
			t.Fatalf("Encode of a parsed value failed: %v", err)
		}
		again, err := buildinfo.Parse(buildinfo.AgentAnnotation, e)
		if err != nil || again != i {
			t.Fatalf("round trip of %+v: %+v, %v", i, again, err)
		}
	})
}
