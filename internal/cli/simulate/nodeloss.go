package simulate

import (
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/gpuplane/gpuplane/internal/cliutil"
	"github.com/gpuplane/gpuplane/internal/simulator"
)

// nodeLossFlags are the spot nodes of an event-mode run
// (simulator.NodeLoss).
type nodeLossFlags struct {
	fraction, perHour   float64
	notice, returnAfter time.Duration
}

func (n *nodeLossFlags) add(cmd *cobra.Command) {
	f := cmd.Flags()
	f.Float64Var(&n.fraction, "spot-fraction", 0, "event mode: share of the nodes that are spot instances, 0 to 1, picked by each run's seed (0: none)")
	f.Float64Var(&n.perHour, "spot-reclaim-per-hour", 0, "event mode: how often the provider reclaims a spot node in service, per hour of the trace's clock (Poisson, seeded; 0: never)")
	cliutil.DurationVar(cmd, &n.notice, "spot-notice", 2*time.Minute, "event mode: notice a reclaimed spot node gives before it goes (the core requeues or shrinks the groups on it first; whole seconds)")
	cliutil.DurationVar(cmd, &n.returnAfter, "spot-return-after", 10*time.Minute, "event mode: how long a lost spot node stays away before a new one takes its place (0: never; whole seconds)")
}

// loss is the flags as a simulator.NodeLoss, checked, for mode.
func (n *nodeLossFlags) loss(mode simulator.Mode) (simulator.NodeLoss, error) {
	notice, err := traceSeconds("spot-notice", n.notice)
	if err != nil {
		return simulator.NodeLoss{}, err
	}
	back, err := traceSeconds("spot-return-after", n.returnAfter)
	if err != nil {
		return simulator.NodeLoss{}, err
	}
	nl := simulator.NodeLoss{SpotFraction: n.fraction, ReclaimPerHour: n.perHour, Notice: notice, ReturnAfter: back}
	if !(n.fraction >= 0 && n.fraction <= 1) {
		return nl, cliutil.Usagef("--spot-fraction must be 0 to 1, got %g", n.fraction)
	}
	if err := nl.Check("spot"); err != nil {
		return nl, cliutil.Usagef("--spot-reclaim-per-hour must be a finite rate >= 0, got %g", n.perHour)
	}
	if (n.fraction > 0) != (n.perHour > 0) {
		return nl, cliutil.Usagef("--spot-fraction %g and --spot-reclaim-per-hour %g: give both to reclaim spot nodes, or neither", n.fraction, n.perHour)
	}
	if nl.On() && mode != simulator.ModeEvent {
		return nl, cliutil.Usagef("--spot-fraction: spot nodes are reclaimed in --mode event only")
	}
	return nl, nil
}

// printNodeLoss prints, when any run had spot nodes, what node loss did:
// per configuration (means over seeds) for a summary, else per run.
func printNodeLoss(w io.Writer, results []*simulator.Result, summary bool) error {
	spot := false
	for _, r := range results {
		if r.Event != nil && r.Event.SpotNodes > 0 {
			spot = true
		}
	}
	if !spot {
		return nil
	}
	fmt.Fprintln(w)
	t := cliutil.NewTable(w)
	if summary {
		fmt.Fprintln(t, "CONFIG\tRUNS\tNODES LOST\tPODS HIT\tGANGS HIT\tSHRUNK\tLOST GPU-H (NODE LOSS)\tLOST GPU-H (PREEMPTION)")
		for _, s := range simulator.SummarizeEvent(results) {
			fmt.Fprintf(t, "%s\t%d\t%.1f\t%.1f\t%.1f\t%.1f\t%.1f\t%.1f\n", s.Policy, s.Runs, s.NodesLost, s.NodeLossPods, s.NodeLossGangs, s.NodeLossShrunk,
				s.LostGPUHoursNodeLoss, s.LostGPUHours)
		}
		return t.Flush()
	}
	fmt.Fprintln(t, "POLICY\tSEED\tSPOT NODES\tNODES LOST\tPODS HIT\tGANGS HIT\tSHRUNK\tLOST GPU-H (NODE LOSS)\tLOST GPU-H (PREEMPTION)")
	for _, r := range results {
		if e := r.Event; e != nil {
			fmt.Fprintf(t, "%s\t%d\t%d\t%d\t%d\t%d\t%d\t%.1f\t%.1f\n", label(r), r.Seed, e.SpotNodes, e.NodesLost, e.NodeLossPods, e.NodeLossGangs, e.NodeLossShrunk,
				e.LostGPUHoursNodeLoss, e.LostGPUHours)
		}
	}
	return t.Flush()
}
