package prometheus_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/gpuplane/gpuplane/test/integration/framework"
)

// dcgmLintExceptions are the promtool lint findings that dcgm-exporter
// compatibility makes unavoidable on its DCGM_FI_* names: counters
// (DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION, ..._TOTAL) lack the lower-case
// _total suffix and DCGM_FI_DEV_PCIE_REPLAY_COUNTER names its type.
// Renaming them would break every dashboard and alert written for
// dcgm-exporter.
var dcgmLintExceptions = []string{
	`counter metrics should have "_total" suffix`,
	"metric name should not include type 'counter'",
}

// camelCaseFinding is promtool's finding for the modelName label, which
// every per-GPU series carries, gpuplane_* included, so that they join with
// the DCGM_FI_* series on the same labels. dcgmLabels lists the label names
// allowed to break snake_case; checkLabelNames enforces that no other does.
const camelCaseFinding = "label names should be written in 'snake_case' not 'camelCase'"

var dcgmLabels = map[string]bool{"UUID": true, "modelName": true, "Hostname": true, "GPU_I_PROFILE": true, "GPU_I_ID": true, "DCGM_FI_DRIVER_VERSION": true}

var snakeCase = regexp.MustCompile(`^[a-z_][a-z0-9_]*$`)

// checkLabelNames fails for a label name that is neither snake_case nor
// one of dcgm-exporter's.
func checkLabelNames(t *testing.T, body string) {
	t.Helper()
	p := expfmt.NewTextParser(model.LegacyValidation)
	mfs, err := p.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		t.Fatalf("parsing: %v", err)
	}
	for name, mf := range mfs {
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if !snakeCase.MatchString(l.GetName()) && !dcgmLabels[l.GetName()] {
					t.Errorf("%s: label %q is neither snake_case nor a dcgm-exporter label", name, l.GetName())
				}
			}
		}
	}
}

func TestPromtoolCheckMetricsOnGoldenOutput(t *testing.T) {
	promtool := tool(t, "promtool")
	files, err := filepath.Glob(filepath.Join(framework.RepoRoot(), "internal", "metrics", "testdata", "*.golden"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no golden /metrics files found (%v)", err)
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			body, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			out, code := run(t, body, promtool, "check", "metrics")
			// Exit 3 means lint findings only; anything else but 0 is a
			// parse error.
			if code != 0 && code != 3 {
				t.Fatalf("promtool check metrics: exit %d\n%s", code, out)
			}
			checkLabelNames(t, string(body))
			for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
				if line == "" {
					continue
				}
				metric, problem, _ := strings.Cut(line, " ")
				if strings.HasPrefix(metric, "DCGM_FI_") && contains(dcgmLintExceptions, problem) || problem == camelCaseFinding {
					continue
				}
				t.Errorf("promtool check metrics: %s", line)
			}
		})
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
