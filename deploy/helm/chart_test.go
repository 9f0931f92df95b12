package helmchart

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

var update = flag.Bool("update", false, "rewrite the manifests in deploy/ from the chart")

// rendered maps the chart's templates to the manifests in deploy/ that
// are rendered from them.
var rendered = map[string]string{
	"agent/daemonset.yaml":               "../agent/daemonset.yaml",
	"agent/rbac.yaml":                    "../agent/rbac.yaml",
	"agent/policy.yaml":                  "../agent/policy.yaml",
	"agent/mig-config.yaml":              "../agent/mig-config.yaml",
	"scheduler/deployment.yaml":          "../scheduler/deployment.yaml",
	"scheduler/rbac.yaml":                "../scheduler/rbac.yaml",
	"scheduler/policy.yaml":              "../scheduler/policy.yaml",
	"admission/hide-gpus.yaml":           "../admission/hide-gpus.yaml",
	"admission/gpu-access.yaml":          "../admission/gpu-access.yaml",
	"admission/gpu-fraction-device.yaml": "../admission/gpu-fraction-device.yaml",
	"admission/kai-pods.yaml":            "../admission/kai-pods.yaml",
	"admission/hami-pods.yaml":           "../admission/hami-pods.yaml",
	"admission/scheduling-gate.yaml":     "../admission/scheduling-gate.yaml",
}

// copied are files the chart carries as copies of their source elsewhere
// in deploy/ (Helm reads nothing outside the chart's directory).
var copied = map[string]string{
	"gpuplane/crds/scheduling.gpuplane.io_queues.yaml":        "../crds/scheduling.gpuplane.io_queues.yaml",
	"gpuplane/crds/scheduling.gpuplane.io_podgroups.yaml":     "../crds/scheduling.gpuplane.io_podgroups.yaml",
	"gpuplane/crds/scheduling.gpuplane.io_groupingrules.yaml": "../crds/scheduling.gpuplane.io_groupingrules.yaml",
	"gpuplane/crds/scheduling.gpuplane.io_topologies.yaml":    "../crds/scheduling.gpuplane.io_topologies.yaml",
	"gpuplane/files/gpu-alerts.rules.yaml":                    "../monitoring/gpu-alerts.rules.yaml",
	"gpuplane/files/grafana-dashboard.json":                   "../monitoring/grafana-dashboard.json",
	"gpuplane/files/scheduler-alerts.rules.yaml":              "../monitoring/scheduler-alerts.rules.yaml",
	"gpuplane/files/scheduler-dashboard.json":                 "../monitoring/scheduler-dashboard.json",
}

// manifestValues are the values the manifests in deploy/ are rendered
// with: the defaults, with every admission policy on and gpuAccess
// checking every namespace, as `gpuplane dev up` runs them.
var manifestValues = map[string]any{"admission": map[string]any{"kaiPods": true, "hamiPods": true, "gpuAccessScope": "all"}}

func header(tmpl string) string {
	return "# Rendered from the Helm chart, deploy/helm/gpuplane/templates/" + tmpl + ",\n" +
		"# with its default values (and every admission policy on, gpuAccess in every\n" +
		"# namespace) for namespace " + DefaultNamespace + ": edit the chart, then run\n" +
		"# `make manifests`.\n"
}

// TestManifestsAreRendered holds the plain manifests in deploy/ to the
// chart: `go test ./deploy/helm -update` (make manifests) rewrites them.
func TestManifestsAreRendered(t *testing.T) {
	c, err := Load()
	if err != nil {
		t.Fatal(err)
	}
	r, err := Render(c, manifestValues, "gpuplane", DefaultNamespace)
	if err != nil {
		t.Fatal(err)
	}
	for tmpl, file := range rendered {
		text, ok := r[tmpl]
		if !ok {
			t.Errorf("template %s rendered nothing", tmpl)
			continue
		}
		want := header(tmpl) + strings.TrimLeft(text, "\n")
		if !strings.HasSuffix(want, "\n") {
			want += "\n"
		}
		if *update {
			if err := os.WriteFile(file, []byte(want), 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		got, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != want {
			t.Errorf("%s is not the chart's %s rendered: run `make manifests` and commit it", filepath.Clean(file), tmpl)
		}
	}
	for name, src := range copied {
		want, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		if *update {
			if err := os.WriteFile(name, want, 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		got, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != string(want) {
			t.Errorf("the chart's %s differs from %s: run `make manifests` and commit it", name, filepath.Clean(src))
		}
	}
}

// TestEveryObjectParses renders the chart with everything on and checks
// each document is one Kubernetes object in the release's namespace (or
// cluster scoped).
func TestEveryObjectParses(t *testing.T) {
	c, err := Load()
	if err != nil {
		t.Fatal(err)
	}
	all := map[string]any{
		"admission": map[string]any{"kaiPods": true, "hamiPods": true},
		"agent":     map[string]any{"mps": map[string]any{"enabled": true}, "metrics": map[string]any{"webConfigSecret": "agent-web"}},
		"monitoring": map[string]any{
			"serviceMonitor":   map[string]any{"enabled": true},
			"prometheusRule":   map[string]any{"enabled": true},
			"grafanaDashboard": map[string]any{"enabled": true},
		},
	}
	r, err := Render(c, all, "gp", "gpu-infra")
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[string]int{}
	for name, text := range r {
		for doc := range strings.SplitSeq(text, "\n---\n") {
			if strings.TrimSpace(stripComments(doc)) == "" {
				continue
			}
			var obj struct {
				Kind     string `json:"kind"`
				Metadata struct {
					Name      string `json:"name"`
					Namespace string `json:"namespace"`
				} `json:"metadata"`
			}
			if err := yaml.UnmarshalStrict([]byte(doc), &obj, yaml.DisallowUnknownFields); err != nil {
				// Strict on the top level only: the struct names a subset.
				if err := yaml.Unmarshal([]byte(doc), &obj); err != nil {
					t.Fatalf("%s: %v\n%s", name, err, doc)
				}
			}
			if obj.Kind == "" || obj.Metadata.Name == "" {
				t.Errorf("%s: a document without kind or name:\n%s", name, doc)
			}
			if obj.Metadata.Namespace != "" && obj.Metadata.Namespace != "gpu-infra" {
				t.Errorf("%s: %s/%s in namespace %q, not the release's", name, obj.Kind, obj.Metadata.Name, obj.Metadata.Namespace)
			}
			if strings.Contains(doc, "gpuplane-system") {
				t.Errorf("%s: %s/%s names gpuplane-system, not the release's namespace", name, obj.Kind, obj.Metadata.Name)
			}
			kinds[obj.Kind]++
		}
	}
	for kind, n := range map[string]int{
		"DaemonSet": 1, "Deployment": 1, "ServiceMonitor": 2, "PrometheusRule": 2, "MutatingAdmissionPolicy": 5,
		"ValidatingAdmissionPolicy": 4, "ConfigMap": 4, "ServiceAccount": 2,
	} {
		if kinds[kind] != n {
			t.Errorf("%d %s objects, want %d (all: %v)", kinds[kind], kind, n, kinds)
		}
	}
}

// TestValuesSchemaRefusesMistakes: a typo, an unknown mode or an
// impossible number is an error naming the value.
func TestValuesSchemaRefusesMistakes(t *testing.T) {
	c, err := Load()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		values string
		want   string
	}{
		{"typo at the top", "schedular: {replicas: 1}", "schedular"},
		{"typo inside", "agent: {nodeSelecter: {pool: a}}", "nodeSelecter"},
		{"unknown sharing mode", "migStrategy: half", "migStrategy"},
		{"negative replicas", "scheduler: {replicas: -1}", "replicas"},
		{"port out of range", "agent: {metrics: {port: 70000}}", "port"},
		{"bad duration", "agent: {labels: {interval: soon}}", "interval"},
		{"not a flag", "agent: {extraArgs: [\"mig-strategy=mixed\"]}", "extraArgs"},
		{"unknown fallback", "config: {fallbackStrategies: [first]}", "fallbackStrategies"},
		{"a config that is not text", "config: {map: {default: {version: v1}}}", "default"},
		{"bad quantity", "scheduler: {resources: {limits: {memory: lots}}}", "memory"},
		{"unknown GPU API", "agent: {dra: {gpuAPI: kubelet}}", "gpuAPI"},
		{"a pod label the chart sets", "scheduler: {podLabels: {app.kubernetes.io/name: mine}}", "scheduler.podLabels: app.kubernetes.io/name"},
		{"an unknown gpuAccess scope", "admission: {gpuAccessScope: some}", "gpuAccessScope"},
		{"a name that is no DNS label", "fullnameOverride: GPU_plane", "fullnameOverride"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var vals map[string]any
			if err := yaml.Unmarshal([]byte(tc.values), &vals); err != nil {
				t.Fatal(err)
			}
			_, err := Render(c, vals, "gpuplane", DefaultNamespace)
			if err == nil {
				t.Fatalf("values %s were accepted", tc.values)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error does not name %q: %v", tc.want, err)
			}
		})
	}
	t.Run("both config name and map", func(t *testing.T) {
		_, err := Render(c, map[string]any{"config": map[string]any{"name": "mine", "map": map[string]any{"a": "version: v1\n"}}}, "gpuplane", DefaultNamespace)
		if err == nil || !strings.Contains(err.Error(), "config.name") {
			t.Errorf("config.name beside config.map: got %v, want an error naming config.name", err)
		}
	})
}

// TestGPUAPIValue: the chart passes the pool's GPU API and shared GPUs to
// the agent.
func TestGPUAPIValue(t *testing.T) {
	c, err := Load()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		values map[string]any
		want   []string
		absent []string
	}{
		{"default", nil, []string{"--gpu-api=both"}, []string{"--dra-shared-gpus"}},
		{"dra pool with shared GPUs", map[string]any{"agent": map[string]any{"dra": map[string]any{"gpuAPI": "dra", "sharedGPUs": true}}}, []string{"--gpu-api=dra", "--dra-shared-gpus"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := Render(c, tc.values, "gpuplane", DefaultNamespace)
			if err != nil {
				t.Fatal(err)
			}
			ds := r["agent/daemonset.yaml"]
			for _, w := range tc.want {
				if !strings.Contains(ds, w) {
					t.Errorf("the agent's DaemonSet lacks %s", w)
				}
			}
			for _, w := range tc.absent {
				if strings.Contains(ds, w) {
					t.Errorf("the agent's DaemonSet has %s", w)
				}
			}
		})
	}
}
