package agent

import (
	"bytes"
	"strings"
	"testing"

	"github.com/spf13/cobra"

	"github.com/gpuplane/gpuplane/internal/cliutil"
)

// TestOutputFormats: gpuplane-agent's commands with structured output take
// the same -o as gpuplane's: table, wide (more than table), json and yaml;
// any other format is a usage error naming them. A command that gains -o
// without a case here fails.
func TestOutputFormats(t *testing.T) {
	cases := map[string][]string{
		"gpuplane-agent inventory": {"inventory", "--simulate", "dgxh100", "--node-name", "n"},
		"gpuplane-agent mig apply": {"mig", "apply", "--simulate", "dgxh100", "--config", migDefaultConfig, "--name", "all-balanced"},
	}
	cliutil.Walk(NewCommand(&bytes.Buffer{}, &bytes.Buffer{}), func(c *cobra.Command) {
		f := c.Flags().Lookup("output")
		if f == nil {
			return
		}
		if f.Annotations[cliutil.OutputFlagAnnotation] == nil {
			t.Errorf("%s: -o is declared by hand; use cliutil.AddOutputFlag", c.CommandPath())
		}
		if _, ok := cases[c.CommandPath()]; !ok {
			t.Errorf("%s has -o but no case in TestOutputFormats", c.CommandPath())
		}
	})
	for path, args := range cases {
		t.Run(path, func(t *testing.T) {
			if code, _, stderr := run(t, append(args, "-o", "xml")...); code != cliutil.ExitUsage || !strings.Contains(stderr, "want one of table, wide, json, yaml") {
				t.Errorf("-o xml: exit %d, stderr %q", code, stderr)
			}
			outs := map[cliutil.Format]string{}
			for _, f := range cliutil.Formats {
				code, out, stderr := run(t, append(args, "-o", string(f))...)
				if code != 0 {
					t.Fatalf("-o %s: exit %d, stderr %q", f, code, stderr)
				}
				outs[f] = out
			}
			if len(outs[cliutil.Wide]) <= len(outs[cliutil.Table]) || outs[cliutil.JSON] == outs[cliutil.YAML] || !strings.HasPrefix(outs[cliutil.JSON], "{") {
				t.Errorf("outputs:\n%v", outs)
			}
		})
	}
}
