package version

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/gpuplane/gpuplane/api/buildinfo"
)

func TestGet(t *testing.T) {
	installed := &debug.BuildInfo{GoVersion: "go1.26.0",
		Main: debug.Module{Path: "github.com/gpuplane/gpuplane", Version: "v0.2.0"},
		Deps: []*debug.Module{{Path: "k8s.io/api", Version: "v0.36.3"}, {Path: "k8s.io/client-go", Version: "v0.36.3"}}}
	checkout := &debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Path: "github.com/gpuplane/gpuplane", Version: "(devel)"},
		Deps:     []*debug.Module{{Path: "k8s.io/client-go", Version: "v0.36.0", Replace: &debug.Module{Path: "k8s.io/client-go", Version: "v0.36.3"}}},
		Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "4f1c2d3e"}, {Key: "vcs.time", Value: "2026-11-27T18:02:11Z"}, {Key: "vcs.modified", Value: "true"}}}
	platform := runtime.GOOS + "/" + runtime.GOARCH
	for _, tc := range []struct {
		name                  string
		version, commit, date string
		bi                    *debug.BuildInfo
		want                  buildinfo.Info
	}{
		{"stamped wins over build info", "v0.1.0-3-gabc", "abc", "2026-11-01T00:00:00Z", checkout,
			buildinfo.Info{Version: "v0.1.0-3-gabc", Commit: "abc", Date: "2026-11-01T00:00:00Z", GoVersion: "go1.26.0", KubernetesClient: "v0.36.3", Platform: platform}},
		{"go install module@version", "", "", "", installed,
			buildinfo.Info{Version: "v0.2.0", GoVersion: "go1.26.0", KubernetesClient: "v0.36.3", Platform: platform}},
		{"go build in a dirty checkout", "", "", "", checkout,
			buildinfo.Info{Version: "devel", Commit: "4f1c2d3e-dirty", Date: "2026-11-27T18:02:11Z", GoVersion: "go1.26.0", KubernetesClient: "v0.36.3", Platform: platform}},
		{"no build info", "", "", "", nil,
			buildinfo.Info{Version: "devel", GoVersion: runtime.Version(), Platform: platform}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := get(tc.version, tc.commit, tc.date, tc.bi)
			if got != tc.want {
				t.Errorf("got  %+v\nwant %+v", got, tc.want)
			}
			if err := got.Validate(); err != nil {
				t.Errorf("the build info does not validate: %v", err)
			}
		})
	}
}

// TestLDFlagsStamp builds a small program that prints Get with LDFlags
// and checks that the stamped values come out.
func TestLDFlagsStamp(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a binary")
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "stamped")
	cmd := exec.Command("go", "build", "-ldflags", LDFlags("v9.8.7", "0123abcd", "2026-11-27T00:00:00Z"), "-o", bin, "./testdata/printversion")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOFLAGS=")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	out, err := exec.Command(bin).CombinedOutput()
	if err != nil {
		t.Fatalf("running the stamped binary: %v\n%s", err, out)
	}
	for _, want := range []string{"v9.8.7 (", "commit 0123abcd", "date 2026-11-27T00:00:00Z"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("stamped binary printed %q, want %q in it", out, want)
		}
	}
}
