package agent

import (
	"github.com/spf13/cobra"
)

func newInventoryCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "inventory",
		Short: "print the node's GPUs, their MIG devices and the topology matrix",
	}
}
