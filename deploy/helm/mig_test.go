package helmchart

import (
	"os"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/gpuplane/gpuplane/internal/mig"
)

// TestMIGConfigMapIsMigPartedDefault renders the agent's MIG ConfigMap and
// checks that it holds mig-parted's default config unchanged, that it
// parses, and that the agent is pointed at it; and that a ConfigMap of the
// user's own replaces it.
func TestMIGConfigMapIsMigPartedDefault(t *testing.T) {
	c, err := Load()
	if err != nil {
		t.Fatal(err)
	}
	r, err := Render(c, nil, "gp", "gpu-infra")
	if err != nil {
		t.Fatal(err)
	}
	var cm corev1.ConfigMap
	if err := yaml.Unmarshal([]byte(r["agent/mig-config.yaml"]), &cm); err != nil {
		t.Fatal(err)
	}
	want, err := os.ReadFile("../../internal/mig/testdata/mig-parted-config-default.yaml")
	if err != nil {
		t.Fatal(err)
	}
	got := cm.Data[MIGConfigKey]
	if cm.Name != MIGConfigMap || strings.TrimSpace(got) != strings.TrimSpace(string(want)) {
		t.Fatalf("ConfigMap %s does not hold mig-parted's default config unchanged", cm.Name)
	}
	if _, err := mig.ParseBytes([]byte(got)); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(r["agent/daemonset.yaml"], "--mig-config-map=gpu-infra/"+MIGConfigMap) {
		t.Error("the agent is not pointed at the chart's MIG ConfigMap")
	}
	own, err := Render(c, map[string]any{"agent": map[string]any{"mig": map[string]any{"configMap": "mine"}}}, "gp", "gpu-infra")
	if err != nil {
		t.Fatal(err)
	}
	if strings.TrimSpace(own["agent/mig-config.yaml"]) != "" || !strings.Contains(own["agent/daemonset.yaml"], "--mig-config-map=gpu-infra/mine") {
		t.Error("agent.mig.configMap does not replace the chart's ConfigMap")
	}
}
