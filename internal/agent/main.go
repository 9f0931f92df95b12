package agent

import (
	"context"
	"io"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/gpuplane/gpuplane/internal/cliutil"
	"github.com/gpuplane/gpuplane/internal/version"
)

const name = "gpuplane-agent"

// NewCommand returns the gpuplane-agent command tree.
func NewCommand(stdout, stderr io.Writer) *cobra.Command {
	root := &cobra.Command{
		Use:   name,
		Short: "gpuplane's node agent: device plugin, GPU health, CDI, feature labels and metrics",
		Long: `gpuplane-agent runs on every GPU node. It finds the node's GPUs through
NVML (or a simulated DGX with --simulate), advertises them to the kubelet
as device-plugin resources, watches their health, and reports them.`,
	}
	// --version prints the build on one line (internal/version).
	root.Version = version.String(version.Get())
	root.SetVersionTemplate("{{.Name}} {{.Version}}\n")
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.AddCommand(newInventoryCommand())
	root.AddCommand(newMIGCommand())
	attachRun(root)
	cliutil.Apply(root)
	return root
}

// Main runs gpuplane-agent and returns its exit code.
func Main(args []string, stdout, stderr io.Writer) int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	root := NewCommand(stdout, stderr)
	root.SetArgs(args)
	ran, err := root.ExecuteContextC(ctx)
	return cliutil.Exit(err, ran, name, stderr)
}
