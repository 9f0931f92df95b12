package cli

import (
	"github.com/spf13/cobra"

	"github.com/gpuplane/gpuplane/internal/cli/cost"
	"github.com/gpuplane/gpuplane/internal/cli/dev"
	"github.com/gpuplane/gpuplane/internal/cli/doctor"
	"github.com/gpuplane/gpuplane/internal/cli/metricsapi"
	"github.com/gpuplane/gpuplane/internal/cli/mig"
	"github.com/gpuplane/gpuplane/internal/cli/simulate"
	"github.com/gpuplane/gpuplane/internal/cli/status"
	"github.com/gpuplane/gpuplane/internal/cli/topology"
	"github.com/gpuplane/gpuplane/internal/cli/ui"
	"github.com/gpuplane/gpuplane/internal/cli/version"
)

// subcommands lists the gpuplane sub-commands in the order --help shows them.
func subcommands() []*cobra.Command {
	return []*cobra.Command{
		status.NewCommand(),
		doctor.NewCommand(),
		cost.NewCommand(),
		ui.NewCommand(),
		mig.NewCommand(),
		topology.NewCommand(),
		simulate.NewCommand(),
		dev.NewCommand(),
		metricsapi.NewCommand(),
		version.NewCommand(),
	}
}
