package cli

import "github.com/spf13/cobra"

// subcommands lists the gpuplane sub-commands in the order --help shows them.
func subcommands() []*cobra.Command {
	return []*cobra.Command{}
}
