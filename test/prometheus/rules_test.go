package prometheus_test

import (
	"errors"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

var update = flag.Bool("update", false, "regenerate deploy/monitoring/prometheusrule.yaml from the rules file")

func asExitError(err error, target **exec.ExitError) bool { return errors.As(err, target) }

const ruleHeader = `# GPU alert rules as a Prometheus operator PrometheusRule. Generated from
# gpu-alerts.rules.yaml by: go test ./test/prometheus -run TestPrometheusRule -update
# Edit the rules file, not this one.
`

// prometheusRule renders the PrometheusRule manifest for the rules file's
// groups.
func prometheusRule(t *testing.T, groups any) []byte {
	t.Helper()
	obj := map[string]any{
		"apiVersion": "monitoring.coreos.com/v1",
		"kind":       "PrometheusRule",
		"metadata": map[string]any{
			"name": "gpuplane-gpu-alerts",
			"labels": map[string]any{
				"app.kubernetes.io/name":      "gpuplane",
				"app.kubernetes.io/component": "monitoring",
			},
		},
		"spec": map[string]any{"groups": groups},
	}
	b, err := yaml.Marshal(obj)
	if err != nil {
		t.Fatal(err)
	}
	return append([]byte(ruleHeader), b...)
}

func readYAML(t *testing.T, path string) map[string]any {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var v map[string]any
	if err := yaml.Unmarshal(b, &v); err != nil {
		t.Fatalf("parsing %s: %v", path, err)
	}
	return v
}

func TestPrometheusRuleMatchesRulesFile(t *testing.T) {
	dir := filepath.Join(repoRoot(t), "deploy", "monitoring")
	rules := readYAML(t, filepath.Join(dir, "gpu-alerts.rules.yaml"))
	path := filepath.Join(dir, "prometheusrule.yaml")
	want := prometheusRule(t, rules["groups"])
	if *update {
		if err := os.WriteFile(path, want, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != string(want) {
		t.Fatalf("%s is stale: run go test ./test/prometheus -run TestPrometheusRule -update", path)
	}
	rule := readYAML(t, path)
	spec, _ := rule["spec"].(map[string]any)
	if !reflect.DeepEqual(spec["groups"], rules["groups"]) {
		t.Fatal("the PrometheusRule's groups differ from the rules file's")
	}
}

func TestAlertRules(t *testing.T) {
	promtool := tool(t, "promtool")
	dir := filepath.Join(repoRoot(t), "deploy", "monitoring")
	// The PrometheusRule's groups, as a plain rules file.
	rule := readYAML(t, filepath.Join(dir, "prometheusrule.yaml"))
	spec, _ := rule["spec"].(map[string]any)
	b, err := yaml.Marshal(map[string]any{"groups": spec["groups"]})
	if err != nil {
		t.Fatal(err)
	}
	fromCRD := filepath.Join(t.TempDir(), "from-prometheusrule.yaml")
	if err := os.WriteFile(fromCRD, b, 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		args []string
		want string
	}{
		{name: "check rules file", args: []string{"check", "rules", filepath.Join(dir, "gpu-alerts.rules.yaml")}, want: "SUCCESS: 8 rules found"},
		{name: "check PrometheusRule groups", args: []string{"check", "rules", fromCRD}, want: "SUCCESS: 8 rules found"},
		{name: "unit tests", args: []string{"test", "rules", filepath.Join(dir, "gpu-alerts.test.yaml")}, want: "SUCCESS"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, code := run(t, nil, promtool, tt.args...)
			if code != 0 || !strings.Contains(out, tt.want) {
				t.Fatalf("promtool %s: exit %d\n%s", strings.Join(tt.args, " "), code, out)
			}
		})
	}
}
