package valuesdoc

import (
	"strings"
	"testing"
)

const chartYAML = "name: demo\ndescription: >-\n  A demo\n  chart.\n"

func TestGenerate(t *testing.T) {
	values := `# Installs the demo.
#
#   helm install demo ./demo

## Images
#
# Where the images come from.

image:
  # The registry, e.g. <host>/<path>.
  registry: example.com
  tag: "" # Empty means appVersion.
# Secrets | pulled with.
pullSecrets: []

## Pods

pod:
  # The pod's affinity.
  affinity:
    nodeAffinity: {}
  nested:
    deeper:
      # A value two levels below an undocumented key.
      value: 3
`
	got, err := Generate([]byte(chartYAML), []byte(values))
	if err != nil {
		t.Fatal(err)
	}
	want := "# demo\n\nA demo chart.\n\nInstalls the demo.\n\n```sh\nhelm install demo ./demo\n```\n\n" +
		"## Images\n\nWhere the images come from.\n\n" +
		"| value | default | description |\n| --- | --- | --- |\n" +
		"| `image.registry` | `\"example.com\"` | The registry, e.g. &lt;host&gt;/&lt;path&gt;. |\n" +
		"| `image.tag` | `\"\"` | Empty means appVersion. |\n" +
		"| `pullSecrets` | `[]` | Secrets \\| pulled with. |\n\n" +
		"## Pods\n\n" +
		"| value | default | description |\n| --- | --- | --- |\n" +
		"| `pod.affinity` | `{\"nodeAffinity\":{}}` | The pod's affinity. |\n" +
		"| `pod.nested.deeper.value` | `3` | A value two levels below an undocumented key. |"
	if string(got) != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
}

func TestGenerateRefusesUndocumented(t *testing.T) {
	for _, tc := range []struct{ name, values, want string }{
		{"a leaf", "## S\n\n# Documented.\na: 1\nb: 2\n", "b has no comment"},
		{"inside a group", "## S\n\ngroup:\n  # Documented.\n  a: 1\n  b: {c: 1}\n", "group.b has no comment"},
		{"a comment below a block", "## S\n\n# Documented.\na:\n  # Documented.\n  b: 1\n  # Lost.\n\n# Documented.\nc: 1\n", "below a.b"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Generate([]byte(chartYAML), []byte(tc.values))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v, want an error saying %q", err, tc.want)
			}
		})
	}
	if _, err := Generate([]byte("description: x\n"), []byte("## S\n# a.\na: 1\n")); err == nil {
		t.Error("a Chart.yaml without a name was accepted")
	}
}
