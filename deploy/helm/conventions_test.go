package helmchart

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	"helm.sh/helm/v3/pkg/lint"
	"helm.sh/helm/v3/pkg/lint/support"
	"sigs.k8s.io/yaml"

	"github.com/gpuplane/gpuplane/deploy/helm/valuesdoc"
	"github.com/gpuplane/gpuplane/internal/cli/doctor"
)

func renderYAML(t *testing.T, values, release, namespace string) Rendered {
	t.Helper()
	c, err := Load()
	if err != nil {
		t.Fatal(err)
	}
	var vals map[string]any
	if err := yaml.Unmarshal([]byte(values), &vals); err != nil {
		t.Fatal(err)
	}
	r, err := Render(c, vals, release, namespace)
	if err != nil {
		t.Fatalf("values %s: %v", values, err)
	}
	return r
}

// TestChartConventions: the values every chart of the ecosystem has do
// what a platform engineer expects of them.
func TestChartConventions(t *testing.T) {
	for _, tc := range []struct {
		name, values, release string
		// want maps a template to lines it must render, absent to lines
		// it must not.
		want, absent map[string][]string
	}{
		{name: "release named after the chart", release: "gpuplane", want: map[string][]string{
			"agent/daemonset.yaml":      {"name: gpuplane-agent\n", "name: gpuplane-agent-config\n"},
			"scheduler/deployment.yaml": {"name: gpuplane-scheduler\n", "app.kubernetes.io/instance: gpuplane"},
		}},
		{name: "another release", release: "gpu", want: map[string][]string{
			"agent/daemonset.yaml":      {"name: gpu-gpuplane-agent\n", "serviceAccountName: gpu-gpuplane-agent\n", "app.kubernetes.io/name: gpuplane-agent"},
			"agent/policy.yaml":         {"name: gpu-gpuplane-agent-own-node\n", `"system:serviceaccount:ns:gpu-gpuplane-agent"`},
			"scheduler/policy.yaml":     {`"system:serviceaccount:ns:gpu-gpuplane-scheduler"`},
			"admission/hide-gpus.yaml":  {"name: gpu-gpuplane-hide-gpus\n", "policyName: gpu-gpuplane-hide-gpus\n"},
			"scheduler/deployment.yaml": {"kind: PodDisruptionBudget", "name: gpu-gpuplane-scheduler-metrics\n"},
		}},
		{name: "fullnameOverride and nameOverride", values: "fullnameOverride: gp\nnameOverride: gpus", release: "x", want: map[string][]string{
			"agent/daemonset.yaml":      {"name: gp-agent\n", "app.kubernetes.io/name: gpus-agent\n"},
			"agent/rbac.yaml":           {"kind: ClusterRole\nmetadata:\n  name: gp-agent\n", "name: gp-agent-mig\n"},
			"scheduler/rbac.yaml":       {"name: gp-scheduler-leader\n"},
			"admission/gpu-access.yaml": {"name: gp-gpu-access\n"},
		}},
		{name: "service accounts of your own", values: `
agent: {serviceAccount: {create: false, name: gpu-sa}}
scheduler: {serviceAccount: {annotations: {eks.amazonaws.com/role-arn: arn}}}`, want: map[string][]string{
			"agent/daemonset.yaml": {"serviceAccountName: gpu-sa\n"},
			"agent/rbac.yaml":      {"- kind: ServiceAccount\n  name: gpu-sa\n"},
			"agent/policy.yaml":    {":gpu-sa\""},
			"scheduler/rbac.yaml":  {"eks.amazonaws.com/role-arn: arn"},
		}, absent: map[string][]string{"agent/rbac.yaml": {"kind: ServiceAccount\nmetadata"}}},
		{name: "pod labels, env and security contexts", values: `
agent: {podLabels: {team: infra}, extraEnv: [{name: HTTPS_PROXY, value: "http://proxy:3128"}], podSecurityContext: {fsGroup: 7}, securityContext: {runAsUser: 0, privileged: true}}
scheduler: {podLabels: {team: ml}, podAnnotations: {a: b}, extraEnv: [{name: GOMAXPROCS, value: "2"}], podSecurityContext: {runAsUser: 1000}, securityContext: {readOnlyRootFilesystem: false}}`, want: map[string][]string{
			"agent/daemonset.yaml":      {"team: infra", "- name: HTTPS_PROXY\n          value: http://proxy:3128", "fsGroup: 7", "privileged: true"},
			"scheduler/deployment.yaml": {"team: ml", "a: b", "- name: GOMAXPROCS", "runAsUser: 1000", "readOnlyRootFilesystem: false"},
		}, absent: map[string][]string{"agent/daemonset.yaml": {"drop:"}}},
		{name: "kubelet root directory", values: "kubeletRootDir: /var/lib/k0s/kubelet/", want: map[string][]string{
			"agent/daemonset.yaml": {"--kubelet-dir=/var/lib/k0s/kubelet/device-plugins", "--pod-resources-socket=/var/lib/k0s/kubelet/pod-resources/kubelet.sock",
				"--dra-registrar-dir=/var/lib/k0s/kubelet/plugins_registry", "--dra-plugin-dir=/var/lib/k0s/kubelet/plugins/gpu.gpuplane.io",
				"path: /var/lib/k0s/kubelet/device-plugins", "mountPath: /var/lib/k0s/kubelet/plugins/gpu.gpuplane.io"},
		}, absent: map[string][]string{"agent/daemonset.yaml": {"/var/lib/kubelet"}}},
		{name: "images per component", values: `
image: {registry: reg.example.com/gp, tag: v9}
agent: {image: {repository: mirror.example.com/agent, pullPolicy: Always}}
scheduler: {image: {tag: v9.1}}`, want: map[string][]string{
			"agent/daemonset.yaml":      {"image: mirror.example.com/agent:v9\n", "imagePullPolicy: Always"},
			"scheduler/deployment.yaml": {"image: reg.example.com/gp/gpuplane-scheduler:v9.1\n", "imagePullPolicy: IfNotPresent"},
		}},
		{name: "ServiceMonitor TLS", values: `
monitoring: {serviceMonitor: {enabled: true, scheme: https, tlsConfig: {serverName: agent.gpu, ca: {secret: {name: ca, key: ca.crt}}}}}`, want: map[string][]string{
			"monitoring/servicemonitor.yaml": {"scheme: https\n    tlsConfig:\n      ca:\n        secret:\n          key: ca.crt", "serverName: agent.gpu"},
		}},
		{name: "ServiceMonitor https by the agent's web config", values: `
agent: {metrics: {webConfigSecret: web}}
monitoring: {serviceMonitor: {enabled: true}}`, want: map[string][]string{
			"monitoring/servicemonitor.yaml": {"scheme: https"},
		}},
		{name: "scheduler PodDisruptionBudget off", values: "scheduler: {podDisruptionBudget: {enabled: false}}", absent: map[string][]string{
			"scheduler/deployment.yaml": {"PodDisruptionBudget"},
		}},
		{name: "gpuAccess in opted-in namespaces by default", want: map[string][]string{
			"admission/gpu-access.yaml": {"matchLabels:\n        gpuplane.io/gpu-access: restricted\n", "operator: NotIn", "gpuplane.io/unrestricted-gpu-access\n        operator: DoesNotExist"},
		}},
		{name: "gpuAccess everywhere", values: "admission: {gpuAccessScope: all}", want: map[string][]string{
			"admission/gpu-access.yaml": {"operator: NotIn"},
		}, absent: map[string][]string{"admission/gpu-access.yaml": {"gpuplane.io/gpu-access: restricted"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			release := tc.release
			if release == "" {
				release = "gpuplane"
			}
			r := renderYAML(t, tc.values, release, "ns")
			for tmpl, lines := range tc.want {
				for _, w := range lines {
					if !strings.Contains(r[tmpl], w) {
						t.Errorf("%s lacks %q:\n%s", tmpl, w, r[tmpl])
					}
				}
			}
			for tmpl, lines := range tc.absent {
				for _, w := range lines {
					if strings.Contains(r[tmpl], w) {
						t.Errorf("%s has %q", tmpl, w)
					}
				}
			}
		})
	}
}

// TestChartLint runs Helm's linter (helm lint --strict) on the chart with
// its defaults and with each values file the tests install with. (Helm's
// linter only logs a template's fail, so the refused files are tested by
// TestNVIDIAChartValues.)
func TestChartLint(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "nvidia", "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	refused := map[string]bool{"gfd-standalone.yaml": true, "gfd-standalone-no-nfd.yaml": true, "chart-defaults.yaml": true}
	cases := map[string]map[string]any{"defaults": nil, "manifests": manifestValues}
	for _, f := range files {
		if !refused[filepath.Base(f)] {
			cases[f] = readValues(t, f)
		}
	}
	for name, vals := range cases {
		t.Run(name, func(t *testing.T) {
			l := lint.All(Name, vals, "gpuplane-system", true)
			for _, m := range l.Messages {
				t.Log(m.Error())
			}
			if l.HighestSeverity >= support.WarningSev {
				t.Errorf("helm lint --strict fails")
			}
		})
	}
}

// TestSubchart renders gpuplane as a dependency of an umbrella chart with
// global values, as `helm install platform ./platform` would.
func TestSubchart(t *testing.T) {
	sub, err := Load()
	if err != nil {
		t.Fatal(err)
	}
	parent := &chart.Chart{
		Metadata: &chart.Metadata{APIVersion: chart.APIVersionV2, Name: "platform", Version: "1.0.0",
			Dependencies: []*chart.Dependency{{Name: Name, Version: sub.Metadata.Version}}},
		Values: map[string]any{
			"global":   map[string]any{"imageRegistry": "reg.example.com", "storageClass": "fast"},
			"gpuplane": map[string]any{"scheduler": map[string]any{"replicas": 1}},
		},
	}
	parent.AddDependency(sub)
	render := func(values map[string]any) (map[string]string, error) {
		opts := chartutil.ReleaseOptions{Name: "platform", Namespace: "infra", Revision: 1, IsInstall: true}
		vals, err := chartutil.ToRenderValues(parent, values, opts, chartutil.DefaultCapabilities.Copy())
		if err != nil {
			return nil, err
		}
		return engine.Render(parent, vals)
	}
	out, err := render(map[string]any{"global": map[string]any{"labels": map[string]any{"team": "platform"}}})
	if err != nil {
		t.Fatal(err)
	}
	dep := out["platform/charts/gpuplane/templates/scheduler/deployment.yaml"]
	for _, w := range []string{"name: platform-gpuplane-scheduler\n", "replicas: 1\n", "namespace: infra\n"} {
		if !strings.Contains(dep, w) {
			t.Errorf("the subchart's scheduler lacks %q:\n%s", w, dep)
		}
	}
	if !strings.Contains(out["platform/charts/gpuplane/templates/agent/daemonset.yaml"], "kind: DaemonSet") {
		t.Error("the subchart renders no agent")
	}
	// The schema still holds inside the umbrella.
	if _, err := render(map[string]any{"gpuplane": map[string]any{"schedular": map[string]any{}}}); err == nil || !strings.Contains(err.Error(), "schedular") {
		t.Errorf("a typo in the subchart's values: %v, want an error naming it", err)
	}
}

// TestNotesCommandsWork: every gpuplane command NOTES.txt shows parses as
// that command, with a pod's name (never namespace/name) and its namespace
// as a flag.
func TestNotesCommandsWork(t *testing.T) {
	c, err := Load()
	if err != nil {
		t.Fatal(err)
	}
	vals, err := chartutil.ToRenderValues(c, nil, chartutil.ReleaseOptions{Name: "gpuplane", Namespace: "gpuplane-system", IsInstall: true}, chartutil.DefaultCapabilities.Copy())
	if err != nil {
		t.Fatal(err)
	}
	out, err := engine.Render(c, vals)
	if err != nil {
		t.Fatal(err)
	}
	notes := out[Name+"/templates/NOTES.txt"]
	placeholder := regexp.MustCompile(`<([a-z]+)>`)
	n := 0
	for line := range strings.Lines(notes) {
		cmdline, _, _ := strings.Cut(strings.TrimSpace(line), "#")
		args := strings.Fields(cmdline)
		if len(args) < 2 || args[0] != "gpuplane" || args[1] != "doctor" {
			continue
		}
		n++
		args = args[2:]
		for i, a := range args {
			args[i] = placeholder.ReplaceAllString(a, "x$1")
		}
		cmd := doctor.NewCommand()
		if err := cmd.ParseFlags(args); err != nil {
			t.Errorf("%q: %v", cmdline, err)
			continue
		}
		pos := cmd.Flags().Args()
		if err := cmd.ValidateArgs(pos); err != nil {
			t.Errorf("%q: %v", cmdline, err)
		}
		if len(pos) == 2 && pos[0] == "pod" {
			if strings.Contains(pos[1], "/") {
				t.Errorf("%q names the pod as %s; doctor takes the name and -n", cmdline, pos[1])
			}
			if ns, _ := cmd.Flags().GetString("namespace"); ns == "" {
				t.Errorf("%q gives the pod no namespace", cmdline)
			}
		}
	}
	if n == 0 {
		t.Fatalf("NOTES.txt shows no gpuplane doctor command:\n%s", notes)
	}
}

// TestChartREADME holds deploy/helm/gpuplane/README.md to the comments in
// values.yaml: `go test ./deploy/helm -update` (make manifests) rewrites it.
func TestChartREADME(t *testing.T) {
	chartYAML, err := os.ReadFile(filepath.Join(Name, "Chart.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	valuesYAML, err := os.ReadFile(filepath.Join(Name, "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	want, err := valuesdoc.Generate(chartYAML, valuesYAML)
	if err != nil {
		t.Fatal(err)
	}
	want = append(want, '\n')
	file := filepath.Join(Name, "README.md")
	if *update {
		if err := os.WriteFile(file, want, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	got, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != string(want) {
		t.Errorf("%s is not generated from values.yaml: run `make manifests` and commit it", file)
	}
}
