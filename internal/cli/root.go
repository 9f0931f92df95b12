package cli

import (
	"context"
	"io"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/gpuplane/gpuplane/internal/cliutil"
	"github.com/gpuplane/gpuplane/internal/version"
)

// NewRoot returns the gpuplane root command with every sub-command.
func NewRoot(name string, stdout, stderr io.Writer) *cobra.Command {
	root := &cobra.Command{
		Use:   name,
		Short: "GPU management for Kubernetes: scheduling simulation, local clusters, cluster status",
		Long: `gpuplane manages NVIDIA GPUs in Kubernetes clusters.

It bundles a node agent (device plugin, health, feature labels, metrics),
a GPU batch scheduler (queues, gangs, fair share, preemption, topology-aware
placement) and this CLI, which simulates scheduling policies on real cluster
traces and brings up a local cluster with simulated GPU nodes.

Commands that read a cluster take kubectl's flags (--kubeconfig, --context,
-n/--namespace, --as, --request-timeout, ...); commands whose output is
structured take -o table|wide|json|yaml.

` + cliutil.ExitHelp,
	}
	// --version prints the build on one line (internal/version).
	root.Version = version.String(version.Get())
	root.SetVersionTemplate("{{.Name}} {{.Version}}\n")
	root.SetOut(stdout)
	root.SetErr(stderr)
	for _, sub := range subcommands() {
		root.AddCommand(sub)
	}
	cliutil.Apply(root)
	return root
}

// Main runs the CLI and returns the process exit code (cliutil.Code: 0 on
// success, 1 failed, 2 usage, 3 unreachable).
func Main(args []string, stdout, stderr io.Writer) int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	name := "gpuplane"
	root := NewRoot(name, stdout, stderr)
	root.SetArgs(args)
	ran, err := root.ExecuteContextC(ctx)
	return cliutil.Exit(err, ran, filepath.Base(name), stderr)
}
