package agent

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/gpuplane/gpuplane/internal/cliutil"
	"github.com/gpuplane/gpuplane/internal/gpu"
	"github.com/gpuplane/gpuplane/internal/gpu/backends"
	"github.com/gpuplane/gpuplane/internal/mig"
)

func newMIGCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "mig",
		Short: "check and apply mig-parted MIG configs offline",
		Long: `Work with MIG configs in NVIDIA mig-parted's format (version: v1,
mig-configs: NAME: [{device-filter, devices, mig-enabled, mig-devices}]), the
format of the ConfigMap the agent reads when a Node's nvidia.com/mig.config
label names a config.`,
		Args: cobra.NoArgs,
	}
	cmd.AddCommand(newMIGApplyCommand())
	return cmd
}

// MIGApplyResult is what `gpuplane-agent mig apply` reports.
type MIGApplyResult struct {
	Backend string     `json:"backend"`
	Config  string     `json:"config"`
	DryRun  bool       `json:"dryRun"`
	Plan    *mig.Plan  `json:"plan"`
	Devices []MIGEntry `json:"devices"`
}

// MIGEntry is one MIG device a config leaves on a GPU.
type MIGEntry struct {
	GPU       int           `json:"gpu"`
	Profile   string        `json:"profile"`
	Placement gpu.Placement `json:"placement"`
	MemoryMiB uint64        `json:"memoryMiB"`
	// UUID is empty under --dry-run: the devices are not created.
	UUID string `json:"uuid,omitempty"`
}

func newMIGApplyCommand() *cobra.Command {
	var (
		bo                  backends.Options
		configFile, cfgName string
		dryRun              bool
		output              *cliutil.Format
	)
	cmd := &cobra.Command{
		Use:   "apply --simulate PROFILE --config FILE --name CONFIG-NAME [--dry-run]",
		Short: "validate a MIG config against a simulated GPU model and print the MIG devices it makes",
		Long: `Read a mig-parted config file, pick the config --name names, check every layout
it gives against the MIG profiles and placements of the simulated node's GPUs,
apply it to the simulated GPUs, and print the MIG devices each GPU ends with.
Only GPUs whose layout changes are touched. --dry-run places the devices
without creating them.

A config that does not fit exits 1 with the field to change, for example
  mig-configs.custom[0].mig-devices."1g.10gb": the layout does not fit the GPU:
  8 devices asked, the GPU holds at most 7

This command never touches real GPUs: on a cluster node, set the Node's
nvidia.com/mig.config label and the agent applies the config, evicting the pods
on the GPUs that change first.`,
		Example: `  gpuplane-agent mig apply --simulate dgxh100 --config config.yaml --name all-balanced
  gpuplane-agent mig apply --simulate dgxa100 --config config.yaml --name all-1g.5gb --dry-run -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			format := *output
			switch {
			case bo.Simulate == "":
				return cliutil.Usagef("--simulate: required: name the GPU model to check against (dgxa100, dgxh100, dgxh200, dgxb200 or a profile file); on a real node set the Node's nvidia.com/mig.config label instead")
			case configFile == "":
				return cliutil.Usagef("--config: required: a mig-parted config file (version: v1, mig-configs: ...)")
			case cfgName == "":
				return cliutil.Usagef("--name: required: the config of the file to apply (a key under mig-configs)")
			}
			f, err := os.Open(configFile)
			if err != nil {
				return &cliutil.UsageError{Err: fmt.Errorf("--config: %w", err)}
			}
			spec, err := mig.Parse(f)
			_ = f.Close()
			if err != nil {
				return fmt.Errorf("%s: %w", configFile, err)
			}
			bo.FailOnInitError = true
			b, err := backends.Open(cmd.Context(), bo)
			if errors.Is(err, backends.ErrUnknownProfile) {
				return &cliutil.UsageError{Err: fmt.Errorf("--simulate: %w", err)}
			}
			if err != nil {
				return err
			}
			defer func() { _ = b.Close() }()
			res, err := runMIGApply(cmd, b, spec, cfgName, dryRun)
			if err != nil {
				return fmt.Errorf("%s: %w", configFile, err)
			}
			if format.Data() {
				return cliutil.Encode(cmd.OutOrStdout(), format, res)
			}
			return writeMIGApply(cmd.OutOrStdout(), res, format == cliutil.Wide)
		},
	}
	backends.AddFlags(cmd.Flags(), &bo)
	cmd.Flags().StringVar(&configFile, "config", "", "mig-parted config file (YAML or JSON)")
	cmd.Flags().StringVar(&cfgName, "name", "", "the config to apply: a key under mig-configs (what nvidia.com/mig.config names)")
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "place the MIG devices without creating them")
	output = cliutil.AddOutputFlag(cmd, cliutil.Table, "wide adds each changing GPU's UUID and MIG devices, placed")
	return cmd
}

func runMIGApply(cmd *cobra.Command, b gpu.Backend, spec *mig.Spec, name string, dryRun bool) (*MIGApplyResult, error) {
	ctx := cmd.Context()
	gpus, err := mig.GPUs(ctx, b)
	if err != nil {
		return nil, err
	}
	plan, err := mig.NewPlan(spec, name, gpus)
	if err != nil {
		return nil, err
	}
	res := &MIGApplyResult{Backend: b.Name(), Config: name, DryRun: dryRun, Plan: plan, Devices: []MIGEntry{}}
	if dryRun {
		devs, err := b.Devices(ctx)
		if err != nil {
			return nil, fmt.Errorf("listing GPUs: %w", err)
		}
		for _, d := range devs {
			if c := changeOf(plan, d.Index); c != nil {
				for _, in := range c.Instances {
					res.Devices = append(res.Devices, MIGEntry{GPU: d.Index, Profile: in.Profile, Placement: in.Placement, MemoryMiB: in.MemoryMiB})
				}
				continue
			}
			res.Devices = append(res.Devices, entriesOf(&d)...)
		}
		return res, nil
	}
	if err := mig.ApplyPlan(ctx, b, plan); err != nil {
		return nil, err
	}
	devs, err := b.Devices(ctx)
	if err != nil {
		return nil, fmt.Errorf("listing GPUs: %w", err)
	}
	for i := range devs {
		res.Devices = append(res.Devices, entriesOf(&devs[i])...)
	}
	return res, nil
}

func changeOf(p *mig.Plan, index int) *mig.Change {
	for i := range p.Changes {
		if p.Changes[i].Index == index {
			return &p.Changes[i]
		}
	}
	return nil
}

func entriesOf(d *gpu.Device) []MIGEntry {
	out := make([]MIGEntry, 0, len(d.MIGDevices))
	for _, m := range d.MIGDevices {
		out = append(out, MIGEntry{GPU: d.Index, Profile: m.Profile, Placement: m.Placement, MemoryMiB: m.MemoryMiB, UUID: m.UUID})
	}
	return out
}

func writeMIGApply(w io.Writer, r *MIGApplyResult, wide bool) error {
	verb := "applied"
	if r.DryRun {
		verb = "would apply (dry run)"
	}
	fmt.Fprintf(w, "Config %s %s on %s: %d GPUs change, %d unchanged.\n\n", r.Config, verb, r.Backend, len(r.Plan.Changes), len(r.Plan.Unchanged))
	tw := cliutil.NewTable(w)
	head := "GPU\tBEFORE\tAFTER\tENTRY"
	if wide {
		head += "\tUUID\tMIG DEVICES (PROFILE@START)"
	}
	fmt.Fprintln(tw, head)
	for _, c := range r.Plan.Changes {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s", c.Index, c.From, c.To, c.Entry)
		if wide {
			devs := make([]string, len(c.Instances))
			for i, in := range c.Instances {
				devs[i] = fmt.Sprintf("%s@%d", in.Profile, in.Placement.Start)
			}
			fmt.Fprintf(tw, "\t%s\t%s", orDash(c.UUID), orDash(strings.Join(devs, ",")))
		}
		fmt.Fprintln(tw)
	}
	for _, i := range r.Plan.Unchanged {
		fmt.Fprintf(tw, "%d\t%s\t(unchanged)\t", i, r.Plan.Targets[i])
		if wide {
			fmt.Fprint(tw, "\t\t")
		}
		fmt.Fprintln(tw)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(r.Devices) == 0 {
		fmt.Fprintln(w, "\nNo MIG devices.")
		return nil
	}
	fmt.Fprintln(w)
	tw = cliutil.NewTable(w)
	fmt.Fprintln(tw, "GPU\tMIG DEVICE\tPLACEMENT\tMEMORY\tUUID")
	for _, d := range r.Devices {
		fmt.Fprintf(tw, "%d\t%s\t%d:%d\t%d MiB\t%s\n", d.GPU, d.Profile, d.Placement.Start, d.Placement.Size, d.MemoryMiB, strings.TrimSpace(orDash(d.UUID)))
	}
	return tw.Flush()
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
