package topology

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	utilyaml "k8s.io/apimachinery/pkg/util/yaml"

	"github.com/gpuplane/gpuplane/api/scheduling/v1alpha1"
)

const input = `apiVersion: kueue.x-k8s.io/v1beta2
kind: Topology
metadata:
  name: default
spec:
  levels:
  - nodeLabel: cloud.provider.com/topology-block
  - nodeLabel: cloud.provider.com/topology-rack
  - nodeLabel: kubernetes.io/hostname
---
apiVersion: kai.scheduler/v1alpha1
kind: Topology
metadata:
  name: nvl72
spec:
  levels:
  - nodeLabel: nvidia.com/gpu.clique
  - nodeLabel: kubernetes.io/hostname
`

// run runs `topology convert` with args, stdin as its input.
func run(t *testing.T, stdin string, args ...string) (string, error) {
	t.Helper()
	cmd := NewCommand()
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	cmd.SetIn(strings.NewReader(stdin))
	cmd.SetArgs(append([]string{"convert"}, args...))
	err := cmd.Execute()
	return out.String(), err
}

// decode reads convert's YAML documents back as gpuplane Topologies.
func decode(t *testing.T, out string) []v1alpha1.Topology {
	t.Helper()
	dec := utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(out), 4096)
	var ts []v1alpha1.Topology
	for {
		var tp v1alpha1.Topology
		if err := dec.Decode(&tp); err != nil {
			break
		}
		ts = append(ts, tp)
	}
	return ts
}

func TestConvert(t *testing.T) {
	out, err := run(t, input, "-f", "-")
	if err != nil {
		t.Fatal(err)
	}
	ts := decode(t, out)
	if len(ts) != 2 {
		t.Fatalf("%d Topologies from\n%s", len(ts), out)
	}
	for i, want := range []struct {
		name, from string
		levels     []string
	}{
		{"default", "kueue.x-k8s.io/v1beta2 Topology default", []string{"cloud.provider.com/topology-block", "cloud.provider.com/topology-rack", "kubernetes.io/hostname"}},
		{"nvl72", "kai.scheduler/v1alpha1 Topology nvl72", []string{"nvidia.com/gpu.clique", "kubernetes.io/hostname"}},
	} {
		tp := ts[i]
		if tp.APIVersion != "scheduling.gpuplane.io/v1alpha1" || tp.Kind != "Topology" || tp.Name != want.name || tp.Annotations[v1alpha1.ConvertedFromAnnotation] != want.from {
			t.Errorf("Topology %d: %+v", i, tp)
		}
		var got []string
		for _, l := range tp.Spec.Levels {
			got = append(got, l.NodeLabel)
		}
		if strings.Join(got, " ") != strings.Join(want.levels, " ") {
			t.Errorf("Topology %s: levels %v, want %v", tp.Name, got, want.levels)
		}
	}

	t.Run("from a file, one source, as JSON", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "t.yaml")
		if err := os.WriteFile(path, []byte(input), 0o600); err != nil {
			t.Fatal(err)
		}
		out, err := run(t, "", "-f", path, "--from", "kai", "-o", "json")
		if err != nil {
			t.Fatal(err)
		}
		var list struct {
			Kind  string              `json:"kind"`
			Items []v1alpha1.Topology `json:"items"`
		}
		if err := json.Unmarshal([]byte(out), &list); err != nil || list.Kind != "List" || len(list.Items) != 1 || list.Items[0].Name != "nvl72" {
			t.Fatalf("%v: %s", err, out)
		}
	})
	t.Run("table and wide", func(t *testing.T) {
		out, err := run(t, input, "-f", "-", "--from", "kai", "-o", "table")
		if err != nil || !strings.Contains(out, "NAME   LEVELS\nnvl72  ") || strings.Contains(out, "CONVERTED FROM") {
			t.Fatalf("%v:\n%s", err, out)
		}
		out, err = run(t, input, "-f", "-", "--from", "kai", "-o", "wide")
		if err != nil || !strings.Contains(out, "CONVERTED FROM") || !strings.Contains(out, "kai.scheduler/v1alpha1 Topology nvl72") {
			t.Fatalf("%v:\n%s", err, out)
		}
	})
	t.Run("by name", func(t *testing.T) {
		out, err := run(t, input, "-f", "-", "default")
		if ts := decode(t, out); err != nil || len(ts) != 1 || ts[0].Name != "default" {
			t.Fatalf("%v: %s", err, out)
		}
	})
	for _, c := range []struct {
		name, in string
		args     []string
		want     string
	}{
		{"not a Topology", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n", nil, "object 0 (v1 ConfigMap x): not a Topology"},
		{"someone else's Topology", "apiVersion: example.com/v1\nkind: Topology\nmetadata: {name: x}\n", nil, "a Topology of example.com, which gpuplane does not read"},
		{"no levels", "apiVersion: kai.scheduler/v1alpha1\nkind: Topology\nmetadata: {name: x}\nspec: {levels: []}\n", nil, "object 0 (kai.scheduler/v1alpha1 Topology x): spec.levels: none"},
		{"bad level", "apiVersion: kai.scheduler/v1alpha1\nkind: Topology\nmetadata: {name: x}\nspec: {levels: [{nodeLabel: 'a b'}]}\n", nil, `spec.levels[0].nodeLabel: "a b" is not a node label key`},
		{"repeated level", "apiVersion: kai.scheduler/v1alpha1\nkind: Topology\nmetadata: {name: x}\nspec: {levels: [{nodeLabel: r}, {nodeLabel: r}]}\n", nil, `spec.levels[1].nodeLabel: "r" is levels[0] already`},
		{"two make one", input + "---\n" + strings.Replace(input[:strings.Index(input, "---")], "kueue.x-k8s.io/v1beta2", "kai.scheduler/v1alpha1", 1), nil, "both make Topology default"},
		{"unknown name", input, []string{"nope"}, "no Topology named nope to convert"},
		{"bad --from", input, []string{"--from", "volcano"}, "--from volcano: want kueue or kai"},
		{"bad -o", input, []string{"-o", "xml"}, `unknown output format "xml": want one of table, wide, json, yaml`},
		{"not YAML", "{{{", nil, "document 0"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := run(t, c.in, append([]string{"-f", "-"}, c.args...)...)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v, want one containing %q", err, c.want)
			}
		})
	}
}
