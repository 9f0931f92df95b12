package metrics

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestReferenceCoversGoldenScrapes checks Reference against what the
// exporter writes: every series in the golden scrapes of testdata/ is
// listed with the type it is written with, and each name once.
func TestReferenceCoversGoldenScrapes(t *testing.T) {
	ref := map[string]string{}
	for _, s := range Reference() {
		name := descName(s.Desc)
		if _, dup := ref[name]; dup {
			t.Errorf("%s is listed twice", name)
		}
		ref[name] = s.Type
		if strings.HasPrefix(name, "DCGM_FI_") && s.DCGM != name {
			t.Errorf("%s: a DCGM series stands for itself, not %q", name, s.DCGM)
		}
	}
	files, err := filepath.Glob(filepath.Join("testdata", "*.golden"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no golden scrapes in testdata: %v", err)
	}
	seen := 0
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(string(data), "\n") {
			fields := strings.Fields(line)
			if len(fields) != 4 || fields[0] != "#" || fields[1] != "TYPE" {
				continue
			}
			name, typ := fields[2], fields[3]
			if !strings.HasPrefix(name, "DCGM_") && !strings.HasPrefix(name, "gpuplane_") && !strings.HasPrefix(name, "container_") {
				continue
			}
			seen++
			if got, ok := ref[name]; !ok {
				t.Errorf("%s: %s is written but not in Reference()", f, name)
			} else if got != typ {
				t.Errorf("%s: %s is a %s, Reference() says %s", f, name, typ, got)
			}
		}
	}
	if seen == 0 {
		t.Fatal("no series found in the golden scrapes: the scan is broken")
	}
}

// descName is the metric name of a descriptor, from its String form
// (Desc{fqName: "name", ...}), which is all prometheus.Desc tells.
func descName(d interface{ String() string }) string {
	s := d.String()
	_, rest, _ := strings.Cut(s, `fqName: "`)
	name, _, _ := strings.Cut(rest, `"`)
	return name
}
