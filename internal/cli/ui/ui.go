package ui

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/gpuplane/gpuplane/api/scheduling/v1alpha1"
	"github.com/gpuplane/gpuplane/internal/cliutil"
	"github.com/gpuplane/gpuplane/internal/cliutil/clusterflags"
	"github.com/gpuplane/gpuplane/internal/scheduler/placement"
	webui "github.com/gpuplane/gpuplane/internal/ui"
)

// DefaultAddress is where the page is served without --address.
const DefaultAddress = "127.0.0.1:8740"

// DefaultPoolLabels are the node labels that name a node's pool, the
// first present winning: Karpenter's, GKE's, EKS's and AKS's.
var DefaultPoolLabels = []string{"karpenter.sh/nodepool", "cloud.google.com/gke-nodepool", "eks.amazonaws.com/nodegroup", "kubernetes.azure.com/agentpool"}

type options struct {
	cluster       *clusterflags.Cluster
	address       string
	schedulerName string
	policy        string
	poolLabels    []string
	prometheus    string
	costWindow    string
	price         float64
}

// NewCommand returns the ui command.
func NewCommand() *cobra.Command {
	o := &options{}
	cmd := &cobra.Command{
		Use:   "ui",
		Short: "Serve a live web view of the cluster's GPUs, queues and waiting workloads on localhost",
		Long: `ui serves a web view of the cluster on a loopback address and prints it.
It reads the cluster with your kubeconfig (your RBAC applies; nothing is
installed in the cluster), watches it, and the page follows every change
within a second or two. Every asset is in the binary: it needs no network
besides the API server.

  GPU map    every GPU node and GPU: the pods holding each GPU and the part
             each holds (whole, fraction, replica, MIG instance), health,
             quarantine, NVLink islands and the node's topology labels, the
             free fragments; filters by pool, product and queue; a summary
             by pool and product on top, and only the rows in view drawn,
             so that 5,000 nodes stay usable;
  Queues     the Queue tree with usage, fair share, guarantee, limit and
             what each borrows, and its usage over the time the page is open;
  Workloads  what waits, with the reason gpuplane-scheduler gave; select one
             for a what-if: the scheduling core run on the current snapshot
             says whether it fits now, when which running job ends, if its
             queue could borrow N more GPUs, or that it never fits and why;
             running workloads with their placement, age and GPU-hours;
  Cost       GPU-hours by namespace and by queue: with --prometheus as
             'gpuplane cost' computes them over --cost-window, otherwise
             those of the running pods since each started.

Keys: 1-4 switch views, / searches the map, arrows move, Enter selects.
The page is served on loopback only, and refuses other origins' requests.`,
		Example: `  gpuplane ui
  gpuplane ui --address 127.0.0.1:9000 --context prod
  gpuplane ui --prometheus http://localhost:9090 --gpu-hour-price 2.50`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return o.run(cmd.Context(), cmd)
		},
	}
	o.cluster = clusterflags.Add(cmd, clusterflags.ClusterScoped)
	f := cmd.Flags()
	f.StringVar(&o.address, "address", DefaultAddress, "the loopback HOST:PORT to serve the page on (port 0 picks a free one)")
	f.StringVar(&o.schedulerName, "scheduler-name", v1alpha1.SchedulerName, "the spec.schedulerName whose pods are listed as waiting (gpuplane-scheduler's --scheduler-name)")
	f.StringVar(&o.policy, "policy", placement.DefaultPolicy, "the placement policy the what-if runs the scheduling core with (gpuplane-scheduler's --policy)")
	f.StringSliceVar(&o.poolLabels, "pool-label", DefaultPoolLabels, "node labels that name a node's pool, the first present winning")
	f.StringVar(&o.prometheus, "prometheus", os.Getenv("GPUPLANE_PROMETHEUS_URL"), "Prometheus's base URL for the Cost view, as gpuplane cost takes it (default $GPUPLANE_PROMETHEUS_URL)")
	f.StringVar(&o.costWindow, "cost-window", "7d", "the window the Cost view sums over with --prometheus, as gpuplane cost's --window")
	f.Float64Var(&o.price, "gpu-hour-price", 0, "price of one GPU-hour; adds cost to the Workloads and Cost views")
	return cmd
}

func (o *options) run(ctx context.Context, cmd *cobra.Command) error {
	if o.price < 0 {
		return cliutil.Usagef("--gpu-hour-price %g: a price is not negative", o.price)
	}
	for i, l := range o.poolLabels {
		if strings.TrimSpace(l) == "" || len(l) > 317 {
			return cliutil.Usagef("--pool-label[%d] %q: want a node label key", i, l)
		}
	}
	if o.prometheus != "" && !strings.HasPrefix(o.prometheus, "http://") && !strings.HasPrefix(o.prometheus, "https://") {
		return cliutil.Usagef("--prometheus %q: want the server's base URL, e.g. http://localhost:9090", o.prometheus)
	}
	srv, err := webui.NewServer(webui.Config{Address: o.address, SchedulerName: o.schedulerName, Policy: o.policy, PoolLabels: o.poolLabels,
		Prometheus: o.prometheus, CostWindow: o.costWindow, Price: o.price,
		Logger: slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), &slog.HandlerOptions{Level: slog.LevelWarn}))})
	if err != nil {
		return cliutil.Usagef("%v", err)
	}
	rc, err := o.cluster.RESTConfig()
	if err != nil {
		return err
	}
	out := cmd.OutOrStdout()
	fmt.Fprintf(out, "gpuplane ui: reading the cluster at %s\n", rc.Host)
	if err := srv.Watch(ctx, rc); err != nil {
		return err
	}
	l, err := webui.Listen(o.address)
	if err != nil {
		return cliutil.Usagef("%v", err)
	}
	hs := &http.Server{Handler: srv.Handler(), ReadHeaderTimeout: 10 * time.Second}
	fmt.Fprintf(out, "gpuplane ui: serving http://%s/ (Ctrl-C stops it)\n", l.Addr())
	done := make(chan error, 1)
	go func() { done <- hs.Serve(l) }()
	select {
	case err := <-done:
		return fmt.Errorf("serving the page: %w", err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	// Event streams never end on their own: close them rather than wait.
	if err := hs.Shutdown(sctx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("stopping the page's server: %w", err)
	}
	return nil
}
