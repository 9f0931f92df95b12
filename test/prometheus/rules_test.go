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

	"github.com/gpuplane/gpuplane/test/integration/framework"
)

var update = flag.Bool("update", false, "regenerate deploy/monitoring/prometheusrule.yaml from the rules file")

func asExitError(err error, target **exec.ExitError) bool { return errors.As(err, target) }

// ruleHeader heads a generated PrometheusRule manifest.
func ruleHeader(what, rules string) string {
	return "# " + what + " as a Prometheus operator PrometheusRule. Generated from\n" +
		"# " + rules + " by: go test ./test/prometheus -run TestPrometheusRule -update\n" +
		"# Edit the rules file, not this one.\n"
}

// ruleFiles are the rules files and the PrometheusRule manifests
// generated from them.
var ruleFiles = []struct {
	what, rules, out, name string
}{
	{what: "GPU alert rules", rules: "gpu-alerts.rules.yaml", out: "prometheusrule.yaml", name: "gpuplane-gpu-alerts"},
	{what: "gpuplane-scheduler alert rules", rules: "scheduler-alerts.rules.yaml", out: "scheduler-prometheusrule.yaml", name: "gpuplane-scheduler-alerts"},
}

// prometheusRule renders the PrometheusRule manifest for a rules file's
// groups.
func prometheusRule(t *testing.T, header, name string, groups any) []byte {
	t.Helper()
	obj := map[string]any{
		"apiVersion": "monitoring.coreos.com/v1",
		"kind":       "PrometheusRule",
		"metadata": map[string]any{
			"name": name,
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
	return append([]byte(header), b...)
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
	dir := filepath.Join(framework.RepoRoot(), "deploy", "monitoring")
	for _, f := range ruleFiles {
		t.Run(f.rules, func(t *testing.T) {
			rules := readYAML(t, filepath.Join(dir, f.rules))
			path := filepath.Join(dir, f.out)
			want := prometheusRule(t, ruleHeader(f.what, f.rules), f.name, rules["groups"])
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
		})
	}
}

func TestAlertRules(t *testing.T) {
	promtool := tool(t, "promtool")
	dir := filepath.Join(framework.RepoRoot(), "deploy", "monitoring")
	// The PrometheusRules' groups, as plain rules files.
	fromCRD := func(name string) string {
		rule := readYAML(t, filepath.Join(dir, name))
		spec, _ := rule["spec"].(map[string]any)
		b, err := yaml.Marshal(map[string]any{"groups": spec["groups"]})
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(t.TempDir(), "from-"+name)
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Fatal(err)
		}
		return path
	}
	tests := []struct {
		name string
		args []string
		want string
	}{
		{name: "check rules file", args: []string{"check", "rules", filepath.Join(dir, "gpu-alerts.rules.yaml")}, want: "SUCCESS: 8 rules found"},
		{name: "check PrometheusRule groups", args: []string{"check", "rules", fromCRD("prometheusrule.yaml")}, want: "SUCCESS: 8 rules found"},
		{name: "unit tests", args: []string{"test", "rules", filepath.Join(dir, "gpu-alerts.test.yaml")}, want: "SUCCESS"},
		{name: "check scheduler rules file", args: []string{"check", "rules", filepath.Join(dir, "scheduler-alerts.rules.yaml")}, want: "SUCCESS: 5 rules found"},
		{name: "check scheduler PrometheusRule groups", args: []string{"check", "rules", fromCRD("scheduler-prometheusrule.yaml")}, want: "SUCCESS: 5 rules found"},
		{name: "scheduler unit tests", args: []string{"test", "rules", filepath.Join(dir, "scheduler-alerts.test.yaml")}, want: "SUCCESS"},
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
