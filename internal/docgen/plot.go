package docgen

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/gpuplane/gpuplane/internal/cli/simulate"
)

// plotPage is the guide whose trace the simulator's plot is drawn from.
const plotPage = "docs/howto/simulate-policies.md"

// plot runs `gpuplane simulate --out` on the trace the guide writes (the
// heredoc of its first shell block) with the policies the guide compares,
// and keeps the plot it draws.
func plot(root string, out Pages) error {
	page, err := os.ReadFile(filepath.Join(root, plotPage))
	if err != nil {
		return err
	}
	_, rest, ok := strings.Cut(string(page), "cat > trace.yaml <<'YAML'\n")
	if !ok {
		return fmt.Errorf("%s writes no trace.yaml", plotPage)
	}
	trace, _, ok := strings.Cut(rest, "\n   YAML\n")
	if !ok {
		return fmt.Errorf("%s: the trace's heredoc does not end", plotPage)
	}
	// The policies of the guide's command that writes the plot.
	_, after, ok := strings.Cut(string(page), "gpuplane simulate --trace trace.yaml --policy ")
	for ok && !strings.Contains(strings.SplitN(after, "\n", 2)[0], "--out results") {
		_, after, ok = strings.Cut(after, "gpuplane simulate --trace trace.yaml --policy ")
	}
	if !ok {
		return fmt.Errorf("%s has no command that writes --out results", plotPage)
	}
	policies := strings.Fields(after)[0]
	var lines []string
	for _, l := range strings.Split(trace, "\n") {
		lines = append(lines, strings.TrimPrefix(l, "   "))
	}
	tmp, err := os.MkdirTemp("", "gpuplane-docgen-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	tracePath := filepath.Join(tmp, "trace.yaml")
	if err := os.WriteFile(tracePath, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		return err
	}
	cmd := simulate.NewCommand()
	var stdout, stderr bytes.Buffer
	cmd.SetOut(&stdout)
	cmd.SetErr(&stderr)
	cmd.SetArgs([]string{"--trace", tracePath, "--policy", policies, "--out", filepath.Join(tmp, "results")})
	if err := cmd.Execute(); err != nil {
		return fmt.Errorf("gpuplane simulate: %w\n%s", err, stderr.String())
	}
	svg, err := os.ReadFile(filepath.Join(tmp, "results", "plot.svg"))
	if err != nil {
		return err
	}
	// The title names the trace by the path it was read from.
	out["docs/images/simulate-plot.svg"] = bytes.ReplaceAll(svg, []byte(tracePath), []byte("trace.yaml"))
	return nil
}
