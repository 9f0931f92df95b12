package helmchart

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// readValues reads a values file of testdata.
func readValues(t *testing.T, file string) map[string]any {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var vals map[string]any
	if err := yaml.Unmarshal(b, &vals); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	return vals
}

// TestNVIDIAChartValues installs with each example values file of NVIDIA's
// device plugin chart README (testdata/nvidia): the keys gpuplane honours
// reach the agent; the ones it cannot are refused with what to set
// instead, never by a schema error and never ignored.
func TestNVIDIAChartValues(t *testing.T) {
	c, err := Load()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		file string
		// want are lines of the agent's DaemonSet and ConfigMap; refused
		// are the parts of the refusal.
		want, absent, refused []string
	}{
		{file: "single-config.yaml", want: []string{"  config: |\n    version: v1\n    flags:\n      migStrategy: \"none\"", "--config-fallback=named,single"}},
		{file: "external-configmap.yaml", want: []string{"name: nvidia-plugin-configs"}, absent: []string{"kind: ConfigMap"}},
		{file: "multiple-configs.yaml", want: []string{"--config-default=config0", "  config1: |", "migStrategy: \"mixed\""}},
		{file: "external-configmap-default.yaml", want: []string{"--config-default=config0", "name: nvidia-plugin-configs"}},
		{file: "cpu-manager-resources.yaml", want: []string{"--pass-device-specs", "privileged: true", "cpu: 100m", "memory: 512Mi"}, absent: []string{"cpu: 50m"}},
		{file: "cpu-manager-mixed.yaml", want: []string{"--pass-device-specs", "privileged: true", "--mig-strategy=mixed"}},
		{file: "gfd.yaml", want: []string{"--labels=node"}},
		{file: "gfd-standalone.yaml", refused: []string{"devicePlugin.enabled=false", "agent.dra.gpuAPI=dra", "agent.enabled=false"}},
		{file: "gfd-standalone-no-nfd.yaml", refused: []string{"devicePlugin.enabled=false"}},
		{file: "time-slicing.yaml", want: []string{"replicas: 10", "  shared: |", "renameByDefault: true"}},
		{file: "mps.yaml", want: []string{"mps:\n        resources:"}},
		{file: "runtime-class.yaml", want: []string{"runtimeClassName: nvidia"}},
		{file: "chart-defaults.yaml", refused: []string{"image.repository=nvcr.io/nvidia/k8s-device-plugin", "agent.image.repository"}},
	} {
		t.Run(tc.file, func(t *testing.T) {
			vals := readValues(t, filepath.Join("testdata", "nvidia", tc.file))
			r, err := Render(c, vals, "nvdp", "nvidia-device-plugin")
			if tc.refused != nil {
				if err == nil {
					t.Fatal("accepted, want a refusal")
				}
				if strings.Contains(err.Error(), "schema") {
					t.Errorf("refused by the schema, want the chart's own message: %v", err)
				}
				for _, w := range tc.refused {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("the refusal does not say %q: %v", w, err)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			ds := r["agent/daemonset.yaml"]
			for _, w := range tc.want {
				if !strings.Contains(ds, w) {
					t.Errorf("the agent's DaemonSet lacks %q:\n%s", w, ds)
				}
			}
			for _, w := range tc.absent {
				if strings.Contains(ds, w) {
					t.Errorf("the agent's DaemonSet has %q", w)
				}
			}
		})
	}
}

// TestNVIDIAChartDefaults: NVIDIA's chart's whole values.yaml, but for its
// image, installs, and its DaemonSet settings replace the agent's.
func TestNVIDIAChartDefaults(t *testing.T) {
	c, err := Load()
	if err != nil {
		t.Fatal(err)
	}
	vals := readValues(t, filepath.Join("testdata", "nvidia", "chart-defaults.yaml"))
	delete(vals["image"].(map[string]any), "repository")
	r, err := Render(c, vals, "nvdp", "nvidia-device-plugin")
	if err != nil {
		t.Fatal(err)
	}
	ds := r["agent/daemonset.yaml"]
	for _, w := range []string{
		"- key: CriticalAddonsOnly",                      // tolerations
		"feature.node.kubernetes.io/cpu-model.vendor_id", // affinity
		"priorityClassName: system-node-critical",
		"--mps-root", // only with agent.mps.enabled
	} {
		if strings.Contains(w, "--mps-root") {
			if strings.Contains(ds, w) {
				t.Error("NVIDIA's mps.root turned MPS on")
			}
			continue
		}
		if !strings.Contains(ds, w) {
			t.Errorf("the agent's DaemonSet lacks %q", w)
		}
	}
	// Empty NVIDIA values leave the agent's own.
	if !strings.Contains(ds, "cpu: 50m") || !strings.Contains(ds, "readOnlyRootFilesystem: true") {
		t.Error("NVIDIA's empty resources or securityContext replaced the agent's")
	}
}

// TestNVIDIAChartKeysRefused: each key gpuplane cannot honour is named in
// one refusal, with what to do instead.
func TestNVIDIAChartKeysRefused(t *testing.T) {
	c, err := Load()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		values string
		want   []string
	}{
		{"namespace: gpu", []string{"namespace=gpu", "--namespace"}},
		{"namespaceOverride: gpu", []string{"namespaceOverride=gpu", "--namespace"}},
		{"selectorLabelsOverride: {app: dp}", []string{"selectorLabelsOverride", "agent.podLabels"}},
		{"image: {repository: registry.local/k8s-device-plugin}", []string{"image.repository", "agent.image.repository", "image.registry"}},
		{"config: {fallbackStrategies: [named, empty]}", []string{"config.fallbackStrategies", "config.default"}},
		{"gdrcopyEnabled: true", []string{"gdrcopyEnabled=true", "GDRCopy"}},
		{"gdsEnabled: true", []string{"gdsEnabled=true", "GPUDirect Storage"}},
		{"mofedEnabled: true", []string{"mofedEnabled=true", "MOFED"}},
		{"deviceDiscoveryStrategy: tegra", []string{"deviceDiscoveryStrategy=tegra", "nvml"}},
		{"gfd: {namespaceOverride: gfd}", []string{"gfd.namespaceOverride"}},
		{"gfd: {noTimestamp: false}", []string{"gfd.noTimestamp=false", "flags.gfd.noTimestamp"}},
		{"nfd: {enabled: true}", []string{"nfd.enabled=true", "nvidia.com/gpu.present=true"}},
		{"cdi: {nvidiaHookPath: /usr/bin/nvidia-cdi-hook}", []string{"cdi.nvidiaHookPath"}},
		{"cdi: {featureFlags: [a]}\ngdsEnabled: true", []string{"cdi.featureFlags", "gdsEnabled=true"}},
	} {
		t.Run(tc.values, func(t *testing.T) {
			var vals map[string]any
			if err := yaml.Unmarshal([]byte(tc.values), &vals); err != nil {
				t.Fatal(err)
			}
			_, err := Render(c, vals, "nvdp", "gpu")
			if err == nil {
				t.Fatal("accepted, want a refusal")
			}
			if strings.Contains(err.Error(), "schema") {
				t.Errorf("refused by the schema, want the chart's own message: %v", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("the refusal does not say %q: %v", w, err)
				}
			}
		})
	}
	// What gpuplane honours is applied, over the agent's own values.
	for _, tc := range []struct {
		values string
		want   []string
	}{
		{"deviceDiscoveryStrategy: nvml\ngdsEnabled: false\nallowDefaultNamespace: true", []string{"kind: DaemonSet"}},
		{"deviceListStrategy: cdi-annotations,envvar", []string{"--device-list-strategy=cdi-annotations,envvar"}},
		{"gfd: {enabled: true, sleepInterval: 30s, noTimestamp: true}", []string{"--labels-interval=30s"}},
		{"gfd: {enabled: true}\nagent: {labels: {enabled: false}}", []string{"--labels=node"}},
		{"devicePlugin: {enableHostNetwork: true}", []string{"hostNetwork: true", "dnsPolicy: ClusterFirstWithHostNet"}},
		{"mps: {root: /run/mps, enableHostPID: true}\nagent: {mps: {enabled: true}}", []string{"--mps-root=/run/mps", "path: /run/mps"}},
		{"nodeSelector: {pool: gpu}\npodAnnotations: {a: b}\nupdateStrategy: {type: OnDelete}", []string{"pool: gpu", "a: b", "type: OnDelete"}},
		{"securityContext: {privileged: true}\npodSecurityContext: {fsGroup: 1000}", []string{"privileged: true", "fsGroup: 1000"}},
		{"priorityClassName: gpu-critical", []string{"priorityClassName: gpu-critical"}},
	} {
		t.Run(tc.values, func(t *testing.T) {
			var vals map[string]any
			if err := yaml.Unmarshal([]byte(tc.values), &vals); err != nil {
				t.Fatal(err)
			}
			r, err := Render(c, vals, "nvdp", "gpu")
			if err != nil {
				t.Fatal(err)
			}
			for _, w := range tc.want {
				if !strings.Contains(r["agent/daemonset.yaml"], w) {
					t.Errorf("the agent's DaemonSet lacks %q", w)
				}
			}
		})
	}
}
