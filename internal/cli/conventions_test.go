package cli

import (
	"bytes"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/cobra"

	"github.com/gpuplane/gpuplane/internal/cli/dev"
	"github.com/gpuplane/gpuplane/internal/cliutil"
	"github.com/gpuplane/gpuplane/internal/cliutil/clusterflags"
)

// server is what a command talks to, and so how the test makes it
// unreachable.
type server int

const (
	none       server = iota
	cluster           // the API server: the cluster flags, a kubeconfig to a dead port
	prometheus        // --prometheus at a dead port
	devCluster        // the dev cluster of --state-dir: none runs
)

// commandSpec is one command's conventions. Every command of the tree,
// cobra's help and completion included, has one: a command added without
// one fails TestEveryCommandIsCovered.
type commandSpec struct {
	// badArgs are argument lists the command refuses (exit 2): wrong
	// counts, unknown sub-commands, unknown help topics.
	badArgs [][]string
	// run are arguments with which the command runs (flags for the
	// formats and the server are added by the test).
	run []string
	// output: the command takes -o table|wide|json|yaml.
	output bool
	server server
	// namespaced: the cluster flags include -n/--namespace.
	namespaced bool
	// runs: run the command with run and expect it to succeed (0) when
	// its server is reachable or it has none.
	runs bool
	// wideShowsMore: run as here, -o wide prints more than -o table (a
	// dev status without a cluster has nothing more to show).
	wideShowsMore bool
}

// A tiny trace for simulate.
const trace = `
nodes:
- {name: n, count: 2, milliCPU: 32000, memoryMiB: 131072, gpus: 4, gpuModel: T4}
pods:
- {name: share, count: 4, gpuMilli: 300, milliCPU: 2000}
`

func specs(t *testing.T) map[string]commandSpec {
	dir := t.TempDir()
	tracePath := filepath.Join(dir, "trace.yaml")
	topoPath := filepath.Join(dir, "topology.yaml")
	for path, data := range map[string]string{
		tracePath: trace,
		topoPath:  "apiVersion: kai.scheduler/v1alpha1\nkind: Topology\nmetadata: {name: rack}\nspec: {levels: [{nodeLabel: gpuplane.io/rack}]}\n",
	} {
		if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return map[string]commandSpec{
		"gpuplane":                       {badArgs: [][]string{{"nope"}}, runs: true},
		"gpuplane status":                {badArgs: [][]string{{"x"}}, output: true, server: cluster, namespaced: true},
		"gpuplane doctor":                {badArgs: [][]string{{}, {"pod", "a", "b"}}, run: []string{"trainer-0"}, output: true, server: cluster, namespaced: true},
		"gpuplane cost":                  {badArgs: [][]string{{"x"}}, output: true, server: prometheus},
		"gpuplane ui":                    {badArgs: [][]string{{"x"}}, server: cluster},
		"gpuplane mig":                   {badArgs: [][]string{{"nope"}}, runs: true},
		"gpuplane mig plan":              {badArgs: [][]string{{}, {"node"}, {"node", "config", "x"}}, run: []string{"node", "config"}, output: true, server: cluster},
		"gpuplane topology":              {badArgs: [][]string{{"nope"}}, runs: true},
		"gpuplane topology convert":      {run: []string{}, output: true, server: cluster},
		"gpuplane simulate":              {badArgs: [][]string{{"x"}}, run: []string{"--trace", tracePath, "--seeds", "1"}, output: true, runs: true, wideShowsMore: true},
		"gpuplane dev":                   {badArgs: [][]string{{"nope"}}, runs: true},
		"gpuplane dev up":                {badArgs: [][]string{{"x"}}},
		"gpuplane dev down":              {badArgs: [][]string{{"x"}}, runs: true},
		"gpuplane dev status":            {badArgs: [][]string{{"x"}}, output: true, runs: true},
		"gpuplane dev fault":             {badArgs: [][]string{{}, {"gpu-node-1", "x"}}, run: []string{"gpu-node-1", "--clear"}, server: devCluster},
		"gpuplane dev serve":             {badArgs: [][]string{{"x"}}},
		"gpuplane help":                  {badArgs: [][]string{{"nope"}, {"mig", "nope"}}, run: []string{"status"}, runs: true},
		"gpuplane completion":            {badArgs: [][]string{{"nope"}}, runs: true},
		"gpuplane completion bash":       {badArgs: [][]string{{"x"}}, runs: true},
		"gpuplane completion zsh":        {badArgs: [][]string{{"x"}}, runs: true},
		"gpuplane completion fish":       {badArgs: [][]string{{"x"}}, runs: true},
		"gpuplane completion powershell": {badArgs: [][]string{{"x"}}, runs: true},
		"gpuplane version":               {badArgs: [][]string{{"x"}}, output: true, server: cluster},
		// metrics-api serves until stopped: only its refusals are run.
		"gpuplane metrics-api": {badArgs: [][]string{{"x"}, {"--agents", "no-slash"}}, server: cluster,
			run: []string{"--agents", "gpuplane-system/agents", "--tls-cert-file", "tls.crt", "--tls-private-key-file", "tls.key"}},
		// version --client reads no cluster.
		"gpuplane version --client": {run: []string{"--client"}, output: true, runs: true},
		// topology convert reads a file with -f without a cluster.
		"gpuplane topology convert -f": {run: []string{"-f", topoPath}, output: true, runs: true, wideShowsMore: true},
	}
}

// commands lists every command of the tree by path.
func commands(t *testing.T) map[string]*cobra.Command {
	t.Helper()
	out := map[string]*cobra.Command{}
	cliutil.Walk(NewRoot("gpuplane", &bytes.Buffer{}, &bytes.Buffer{}), func(c *cobra.Command) { out[c.CommandPath()] = c })
	return out
}

// deadAddr is a loopback address nothing listens on.
func deadAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return addr
}

// isolate points every default a command could find a real cluster or
// state through at empty or dead places.
func isolate(t *testing.T) (kubeconfig, prometheusURL string) {
	t.Helper()
	dir := t.TempDir()
	kubeconfig = filepath.Join(dir, "kubeconfig")
	cfg := `apiVersion: v1
kind: Config
clusters:
- name: dead
  cluster: {server: "https://` + deadAddr(t) + `", insecure-skip-tls-verify: true}
users:
- name: u
  user: {token: t}
contexts:
- name: dead
  context: {cluster: dead, user: u}
current-context: dead
`
	if err := os.WriteFile(kubeconfig, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("HOME", dir)
	t.Setenv("KUBECONFIG", kubeconfig)
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	t.Setenv(dev.StateDirEnv, filepath.Join(dir, "dev"))
	t.Setenv("GPUPLANE_PROMETHEUS_URL", "")
	return kubeconfig, "http://" + deadAddr(t)
}

// run runs gpuplane as main does.
func run(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var out, errb bytes.Buffer
	code = Main(args, &out, &errb)
	return out.String(), errb.String(), code
}

// commandOf is the command a spec's path names: a spec may name a
// variant by a flag ("gpuplane version --client"), whose flags its run
// gives.
func commandOf(path string) string {
	cmd, _, _ := strings.Cut(path, " -")
	return cmd
}

// TestEveryCommandIsCovered fails when a command has no spec (add one
// that says its arguments, output and server) or a spec no command.
func TestEveryCommandIsCovered(t *testing.T) {
	cmds := commands(t)
	sp := specs(t)
	for path := range cmds {
		if _, ok := sp[path]; !ok {
			t.Errorf("%s has no commandSpec: add it to specs() with its bad arguments, -o support and server", path)
		}
	}
	for path := range sp {
		if _, ok := cmds[commandOf(path)]; !ok {
			t.Errorf("specs() has %s, which is no command", path)
		}
	}
}

// TestExitCodes is the exit-code policy over every command: bad argument
// counts, unknown sub-commands and unknown flags exit 2 with the usage
// line; a command whose server cannot be reached exits 3; a command that
// can run here exits 0.
func TestExitCodes(t *testing.T) {
	kubeconfig, promURL := isolate(t)
	cmds := commands(t)
	for path, s := range specs(t) {
		cmd := cmds[commandOf(path)]
		if cmd == nil {
			continue
		}
		words := strings.Fields(commandOf(path))[1:]
		usage := "Usage: " + cmd.CommandPath()
		t.Run(path, func(t *testing.T) {
			for _, bad := range s.badArgs {
				_, stderr, code := run(t, append(slices.Clone(words), bad...)...)
				if code != cliutil.ExitUsage || !strings.Contains(stderr, usage) {
					t.Errorf("%s %q: exit %d, stderr %q; want %d and %q", path, bad, code, stderr, cliutil.ExitUsage, usage)
				}
			}
			if path != "gpuplane help" {
				_, stderr, code := run(t, append(slices.Clone(words), "--no-such-flag")...)
				if code != cliutil.ExitUsage || !strings.Contains(stderr, "unknown flag: --no-such-flag") || !strings.Contains(stderr, usage) {
					t.Errorf("%s --no-such-flag: exit %d, stderr %q; want %d with the usage line", path, code, stderr, cliutil.ExitUsage)
				}
			}
			args := append(slices.Clone(words), s.run...)
			switch s.server {
			case cluster:
				_, stderr, code := run(t, append(args, "--kubeconfig", kubeconfig, "--request-timeout", "20s")...)
				if code != cliutil.ExitUnreachable {
					t.Errorf("%s against a dead API server: exit %d, stderr %q; want %d", path, code, stderr, cliutil.ExitUnreachable)
				}
			case prometheus:
				_, stderr, code := run(t, append(args, "--prometheus", promURL)...)
				if code != cliutil.ExitUnreachable {
					t.Errorf("%s against a dead Prometheus: exit %d, stderr %q; want %d", path, code, stderr, cliutil.ExitUnreachable)
				}
			case devCluster:
				_, stderr, code := run(t, args...)
				if code != cliutil.ExitUnreachable || !strings.Contains(stderr, "no dev cluster runs") {
					t.Errorf("%s without a dev cluster: exit %d, stderr %q; want %d", path, code, stderr, cliutil.ExitUnreachable)
				}
			}
			if s.runs {
				stdout, stderr, code := run(t, args...)
				if code != cliutil.ExitOK || stdout == "" {
					t.Errorf("%s %q: exit %d, stdout %q, stderr %q; want 0 and output", path, s.run, code, stdout, stderr)
				}
			}
		})
	}
}

// TestOutputFormats is the -o policy: every command with -o takes the
// shared flag, refuses an unknown format with 2 naming the allowed ones,
// and takes table, wide, json and yaml (a command with a server reaches
// for it, so exits 3, not 2; one without runs).
func TestOutputFormats(t *testing.T) {
	kubeconfig, promURL := isolate(t)
	cmds := commands(t)
	sp := specs(t)
	for path, c := range cmds {
		f := c.Flags().Lookup("output")
		if s := sp[path]; s.output != (f != nil) {
			t.Errorf("%s: has -o %v, spec says %v", path, f != nil, s.output)
		}
		if f != nil && f.Annotations[cliutil.OutputFlagAnnotation] == nil {
			t.Errorf("%s: -o is declared by hand; use cliutil.AddOutputFlag", path)
		}
	}
	for path, s := range sp {
		if !s.output {
			continue
		}
		words := strings.Fields(commandOf(path))[1:]
		args := append(slices.Clone(words), s.run...)
		want := cliutil.ExitOK
		switch s.server {
		case cluster:
			args, want = append(args, "--kubeconfig", kubeconfig), cliutil.ExitUnreachable
		case prometheus:
			args, want = append(args, "--prometheus", promURL), cliutil.ExitUnreachable
		}
		t.Run(path, func(t *testing.T) {
			_, stderr, code := run(t, append(slices.Clone(args), "-o", "xml")...)
			if code != cliutil.ExitUsage || !strings.Contains(stderr, "want one of table, wide, json, yaml") || !strings.Contains(stderr, "Usage: ") {
				t.Errorf("-o xml: exit %d, stderr %q; want %d naming the formats", code, stderr, cliutil.ExitUsage)
			}
			outs := map[cliutil.Format]string{}
			for _, f := range cliutil.Formats {
				stdout, stderr, code := run(t, append(slices.Clone(args), "-o", string(f))...)
				if code != want {
					t.Errorf("-o %s: exit %d, stderr %q; want %d", f, code, stderr, want)
				}
				outs[f] = stdout
			}
			if want != cliutil.ExitOK {
				return
			}
			// A command that ran: json, yaml and the table differ; wide
			// adds to the table.
			for _, pair := range [][2]cliutil.Format{{cliutil.Table, cliutil.JSON}, {cliutil.Table, cliutil.YAML}, {cliutil.JSON, cliutil.YAML}} {
				if outs[pair[0]] == outs[pair[1]] {
					t.Errorf("-o %s and -o %s print the same:\n%s", pair[0], pair[1], outs[pair[0]])
				}
			}
			if s.wideShowsMore && len(outs[cliutil.Wide]) <= len(outs[cliutil.Table]) {
				t.Errorf("-o wide shows no more than -o table:\n%s", outs[cliutil.Wide])
			}
			if !strings.HasPrefix(strings.TrimSpace(outs[cliutil.JSON]), "{") {
				t.Errorf("-o json is not JSON:\n%s", outs[cliutil.JSON])
			}
		})
	}
}

// TestClusterFlags: every command that talks to a cluster takes kubectl's
// flags from the one helper; no other command declares --kubeconfig.
func TestClusterFlags(t *testing.T) {
	sp := specs(t)
	for path, c := range commands(t) {
		s := sp[path]
		marked := c.Annotations[clusterflags.Annotation] != ""
		if (s.server == cluster) != marked {
			t.Errorf("%s: cluster flags from clusterflags.Add %v, spec says it talks to a cluster %v", path, marked, s.server == cluster)
		}
		if !marked {
			if c.Flags().Lookup("kubeconfig") != nil {
				t.Errorf("%s: --kubeconfig declared by hand; use clusterflags.Add", path)
			}
			continue
		}
		for _, name := range []string{"kubeconfig", "context", "cluster", "user", "as", "as-group", "request-timeout", "server", "token", "insecure-skip-tls-verify"} {
			if c.Flags().Lookup(name) == nil {
				t.Errorf("%s: no --%s", path, name)
			}
		}
		if n := c.Flags().ShorthandLookup("n"); (n != nil) != s.namespaced {
			t.Errorf("%s: -n %v, spec says namespaced %v", path, n != nil, s.namespaced)
		}
	}
}

// TestHelpDocumentsExitCodes: gpuplane --help states the policy.
func TestHelpDocumentsExitCodes(t *testing.T) {
	stdout, _, code := run(t, "--help")
	if code != 0 || !strings.Contains(stdout, cliutil.ExitHelp) {
		t.Fatalf("exit %d; --help lacks the exit codes:\n%s", code, stdout)
	}
}

// TestOneNamePerThing: the names the binaries share work in the CLI, and
// the CLI's old names still work, saying which name to use.
func TestOneNamePerThing(t *testing.T) {
	kubeconfig, promURL := isolate(t)
	dir := t.TempDir()
	tracePath := filepath.Join(dir, "trace.yaml")
	if err := os.WriteFile(tracePath, []byte(trace), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		args   []string
		code   int
		stderr string
	}{
		{"doctor's NAMESPACE/NAME needs both", []string{"doctor", "pod", "ml/"}, cliutil.ExitUsage, `"ml/": want NAME or NAMESPACE/NAME`},
		{"doctor's NAMESPACE/NAME and -n disagree", []string{"doctor", "ml/trainer-0", "-n", "other"}, cliutil.ExitUsage, `"ml/trainer-0" names namespace ml, --namespace other: give one`},
		{"doctor's NAMESPACE/NAME reaches for the pod", []string{"doctor", "ml/trainer-0", "-n", "ml", "--kubeconfig", kubeconfig}, cliutil.ExitUnreachable, "reading pod ml/trainer-0"},
		{"mig plan takes the agent's --mig-config-map", []string{"mig", "plan", "n", "c", "--kubeconfig", kubeconfig, "--mig-config-map", "gpuplane/migs", "--mig-config-key", "c.yaml"}, cliutil.ExitUnreachable, "reading node n"},
		{"mig plan checks --mig-config-map", []string{"mig", "plan", "n", "c", "--mig-config-map", "migs"}, cliutil.ExitUsage, `--mig-config-map: "migs": want NAMESPACE/NAME`},
		{"mig plan's --configmap is deprecated", []string{"mig", "plan", "n", "c", "--configmap", "migs"}, cliutil.ExitUsage, "Flag --configmap has been deprecated, use --mig-config-map, the agent's name"},
		{"mig plan's --key is deprecated", []string{"mig", "plan", "n", "c", "--kubeconfig", kubeconfig, "--key", "c.yaml"}, cliutil.ExitUnreachable, "Flag --key has been deprecated, use --mig-config-key"},
		{"cost takes --request-timeout", []string{"cost", "--prometheus", promURL, "--request-timeout", "0s"}, cliutil.ExitUsage, "--request-timeout 0s: want a positive duration"},
		{"cost's --timeout is deprecated", []string{"cost", "--prometheus", promURL, "--timeout", "5s"}, cliutil.ExitUnreachable, "Flag --timeout has been deprecated, use --request-timeout"},
		{"simulate's MIG flags are durations, as the scheduler's", []string{"simulate", "--trace", tracePath, "--mode", "event", "--mig-layout-dwell", "5m", "--mig-proposal-timeout", "2m", "--mig-demand-min-wait", "10s"}, cliutil.ExitOK, ""},
		{"a bare number of seconds is deprecated", []string{"simulate", "--trace", tracePath, "--mode", "event", "--mig-proposal-timeout", "120"}, cliutil.ExitOK, "Flag --mig-proposal-timeout: a bare number of seconds is deprecated"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, stderr, code := run(t, tt.args...)
			if code != tt.code || !strings.Contains(stderr, tt.stderr) {
				t.Fatalf("exit %d, stderr %q; want %d and %q", code, stderr, tt.code, tt.stderr)
			}
		})
	}
}
