package docgen

import (
	"fmt"
	"strings"

	"github.com/gpuplane/gpuplane/api/reasons"
)

// conditionsPage lists the catalogue of api/reasons, each name linking its
// troubleshooting entry.
func conditionsPage(_ string, out Pages) error {
	var b strings.Builder
	b.WriteString(header("Conditions and events", "the catalogue in api/reasons"))
	b.WriteString("Every condition gpuplane keeps and every reason it writes on a condition or an event, with the\n" +
		"object it is written on and the process that writes it. Each name links its entry in\n" +
		"[Troubleshooting](../troubleshooting.md), which says what it means and what to do.\n")
	sections := []struct {
		title string
		kind  reasons.Kind
	}{
		{"Conditions", reasons.ConditionType},
		{"Condition reasons", reasons.ConditionReason},
		{"Event reasons", reasons.Event},
	}
	for _, s := range sections {
		fmt.Fprintf(&b, "\n## %s\n\n", s.title)
		if s.kind == reasons.ConditionReason {
			b.WriteString("| reason | condition | on | written by |\n| --- | --- | --- | --- |\n")
		} else {
			b.WriteString("| name | on | written by |\n| --- | --- | --- |\n")
		}
		for _, r := range reasons.All {
			if r.Kind != s.kind {
				continue
			}
			name := fmt.Sprintf("[`%s`](../troubleshooting.md#%s)", r.Name, r.Slug())
			if s.kind == reasons.ConditionReason {
				fmt.Fprintf(&b, "| %s | `%s` | %s | %s |\n", name, r.Condition, r.Object, r.By)
			} else {
				fmt.Fprintf(&b, "| %s | %s | %s |\n", name, r.Object, r.By)
			}
		}
	}
	out[Dir+"/conditions-events.md"] = []byte(b.String())
	return nil
}
