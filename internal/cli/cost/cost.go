package cost

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/common/model"
	"github.com/spf13/cobra"

	"github.com/gpuplane/gpuplane/internal/cliutil"
)

// Report is what `gpuplane cost` shows; -o json and -o yaml print it as is.
type Report struct {
	// By is what the rows are: namespace, queue, pod or node.
	By    string    `json:"by"`
	Start time.Time `json:"start"`
	End   time.Time `json:"end"`
	// Resolution is the step at which the series were sampled.
	Resolution string `json:"resolution"`
	Rows       []Row  `json:"rows"`
	// AllocatedGPUHours is the sum of the rows.
	AllocatedGPUHours float64 `json:"allocatedGPUHours"`
	// IdleGPUHours is GPU time nobody held; CapacityGPUHours the GPU time
	// the nodes reporting had (both from gpuplane_gpu_idle_share).
	IdleGPUHours     float64 `json:"idleGPUHours"`
	CapacityGPUHours float64 `json:"capacityGPUHours"`
	// PricePerGPUHour is --gpu-hour-price; Cost is set on the rows with it.
	PricePerGPUHour float64 `json:"pricePerGPUHour,omitempty"`
}

// Row is the GPU time of one namespace, queue, pod or node.
type Row struct {
	// Name is the namespace, queue, node, or namespace/pod. A pod bound
	// without a recorded queue is under the queue "" in --by queue.
	Name     string  `json:"name"`
	GPUHours float64 `json:"gpuHours"`
	// Share is the row's part of the allocated GPU-hours (0 to 1).
	Share float64 `json:"share"`
	// MeanGPUs is GPUHours over the window's hours; PeakGPUs the most
	// GPUs held at one step.
	MeanGPUs float64 `json:"meanGPUs"`
	PeakGPUs float64 `json:"peakGPUs"`
	Cost     float64 `json:"cost,omitempty"`
}

// Dimensions --by accepts, with the labels each groups by.
var dimensions = map[string][]string{
	"namespace": {"namespace"},
	"queue":     {"queue"},
	"pod":       {"namespace", "pod"},
	"node":      {"node"},
}

type options struct {
	prometheus, window, resolution, end, by string
	output                                  *cliutil.Format
	price                                   float64
	timeout                                 time.Duration
	now                                     func() time.Time
}

// NewCommand returns the cost command.
func NewCommand() *cobra.Command {
	o := &options{now: time.Now}
	cmd := &cobra.Command{
		Use:   "cost",
		Short: "GPU-hours per namespace, queue, pod or node over a window, from Prometheus",
		Long: `cost sums the GPU time each namespace (or queue, pod, node) held over a
window, from the series gpuplane-agent exports and your Prometheus keeps:

  container_gpu_allocation  the part of a physical GPU each container holds:
                            1 per whole GPU, a MIG device's slices over its
                            GPU's, 1/replicas per shared replica, the
                            fraction a pod asked for (OpenCost reads the
                            same series, so its numbers agree);
  gpuplane_pod_queue_info   the Queue gpuplane-scheduler recorded on each pod
                            it bound, for --by queue (pods it did not bind
                            are under "(none)");
  gpuplane_gpu_idle_share   the part of each GPU nobody holds: IDLE, and the
                            GPU-hours the cluster had (CAPACITY).

A GPU-hour is one physical GPU held for one hour: half a GPU for two hours
is one GPU-hour. The series are sampled every --resolution over the window,
so a pod's time is exact to one step at each end of its life.

Prometheus must scrape gpuplane-agent with --pod-resources-socket set (the
default). --prometheus is its base URL; without one in the cluster's
network, forward a port first:

  kubectl -n monitoring port-forward svc/prometheus-k8s 9090 &
  gpuplane cost --prometheus http://localhost:9090

Output: a table (GPU-HOURS, SHARE of what was allocated, COST with
--gpu-hour-price), -o wide adds MEAN and PEAK GPUS, -o json|yaml the data.`,
		Example: `  # last week, per namespace
  gpuplane cost --prometheus http://localhost:9090

  # last 30 days per queue, priced
  gpuplane cost --prometheus http://localhost:9090 --window 30d --by queue --gpu-hour-price 2.50

  # October, per pod, as JSON
  gpuplane cost --prometheus http://localhost:9090 --end 2026-11-01T00:00:00Z --window 31d --by pod -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return o.run(cmd.Context(), cmd.OutOrStdout())
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.prometheus, "prometheus", os.Getenv("GPUPLANE_PROMETHEUS_URL"), "Prometheus's base URL, e.g. http://localhost:9090; user:password@ in it is sent as basic auth (default $GPUPLANE_PROMETHEUS_URL)")
	f.StringVar(&o.window, "window", "7d", "how far back from --end to sum, in Prometheus's units (90m, 12h, 7d, 4w)")
	f.StringVar(&o.end, "end", "now", "the window's end: now, or a time in RFC 3339 (2026-11-01T00:00:00Z)")
	f.StringVar(&o.by, "by", "namespace", "group rows by namespace, queue, pod or node")
	f.StringVar(&o.resolution, "resolution", "", "the step at which the series are sampled (default: the window over 1,440, at least 1m)")
	f.Float64Var(&o.price, "gpu-hour-price", 0, "price of one GPU-hour; adds a COST column")
	o.output = cliutil.AddOutputFlag(cmd, cliutil.Table, "wide adds MEAN and PEAK GPUS")
	f.DurationVar(&o.timeout, "request-timeout", time.Minute, "how long each Prometheus query may take (the name kubectl and gpuplane's cluster commands give a request's timeout)")
	f.DurationVar(&o.timeout, "timeout", time.Minute, "")
	_ = f.MarkDeprecated("timeout", "use --request-timeout")
	return cmd
}

// query is one evaluation plan: the window's bounds and step as PromQL
// durations, and the end.
type query struct {
	window, step model.Duration
	end          time.Time
}

func (o *options) parse() (cliutil.Format, query, error) {
	var q query
	var err error
	format := *o.output
	if o.prometheus == "" {
		return "", q, cliutil.Usagef("--prometheus is required (or set GPUPLANE_PROMETHEUS_URL): the base URL of the Prometheus that scrapes gpuplane-agent")
	}
	if _, ok := dimensions[o.by]; !ok {
		return "", q, cliutil.Usagef("--by %q: want namespace, queue, pod or node", o.by)
	}
	if q.window, err = model.ParseDuration(o.window); err != nil || q.window <= 0 {
		return "", q, cliutil.Usagef("--window %q: want a positive duration such as 90m, 12h, 7d or 4w", o.window)
	}
	if time.Duration(q.window) > 5*365*24*time.Hour {
		return "", q, cliutil.Usagef("--window %s: at most 5 years", o.window)
	}
	if o.resolution == "" {
		q.step = model.Duration(max(time.Minute, (time.Duration(q.window) / 1440).Truncate(time.Minute)))
	} else if q.step, err = model.ParseDuration(o.resolution); err != nil || q.step <= 0 {
		return "", q, cliutil.Usagef("--resolution %q: want a positive duration such as 30s, 1m or 5m", o.resolution)
	}
	if q.step > q.window {
		return "", q, cliutil.Usagef("--resolution %s is longer than --window %s", q.step, q.window)
	}
	if time.Duration(q.window)/time.Duration(q.step) > 100_000 {
		return "", q, cliutil.Usagef("--window %s at --resolution %s is over 100,000 steps: raise --resolution", q.window, q.step)
	}
	switch o.end {
	case "", "now":
		q.end = o.now()
	default:
		if q.end, err = time.Parse(time.RFC3339, o.end); err != nil {
			return "", q, cliutil.Usagef("--end %q: want now or an RFC 3339 time such as 2026-11-01T00:00:00Z", o.end)
		}
	}
	if o.price < 0 {
		return "", q, cliutil.Usagef("--gpu-hour-price %g: a price is not negative", o.price)
	}
	if o.timeout <= 0 {
		return "", q, cliutil.Usagef("--request-timeout %s: want a positive duration", o.timeout)
	}
	return format, q, nil
}

func (o *options) run(ctx context.Context, out io.Writer) error {
	format, q, err := o.parse()
	if err != nil {
		return err
	}
	c, err := newClient(o.prometheus, o.timeout)
	if err != nil {
		return cliutil.Usagef("%v", err)
	}
	r, err := report(ctx, c, o.by, q, o.price)
	if err != nil {
		return err
	}
	if format.Data() {
		return cliutil.Encode(out, format, r)
	}
	return r.render(out, format == cliutil.Wide)
}

// allocation is the per-container series to sum, with the queue joined
// in for --by queue; containers of pods without a recorded queue keep no
// queue label, and so sum under "".
func allocation(by string) string {
	if by != "queue" {
		return "container_gpu_allocation"
	}
	return `(container_gpu_allocation * on (namespace, pod) group_left (queue) max by (namespace, pod, queue) (gpuplane_pod_queue_info))` +
		` or on (namespace, pod, container, node) container_gpu_allocation`
}

// report asks Prometheus for the GPU time of each row, the peak of each,
// and the cluster's idle and total GPU time.
func report(ctx context.Context, c *client, by string, q query, price float64) (*Report, error) {
	keys := strings.Join(dimensions[by], ", ")
	w, s := q.window.String(), q.step.String()
	hoursPerStep := time.Duration(q.step).Hours()
	alloc := allocation(by)
	sums, err := c.query(ctx, fmt.Sprintf("sum by (%s) (sum_over_time((%s)[%s:%s]))", keys, alloc, w, s), q.end)
	if err != nil {
		return nil, err
	}
	peaks, err := c.query(ctx, fmt.Sprintf("max_over_time((sum by (%s) (%s))[%s:%s])", keys, alloc, w, s), q.end)
	if err != nil {
		return nil, err
	}
	idle, err := c.query(ctx, fmt.Sprintf("sum(sum_over_time(gpuplane_gpu_idle_share[%s:%s]))", w, s), q.end)
	if err != nil {
		return nil, err
	}
	gpus, err := c.query(ctx, fmt.Sprintf("sum(count_over_time(gpuplane_gpu_idle_share[%s:%s]))", w, s), q.end)
	if err != nil {
		return nil, err
	}
	if len(sums) == 0 && len(gpus) == 0 {
		return nil, errors.New("no container_gpu_allocation nor gpuplane_gpu_idle_share in Prometheus over the window: is it scraping gpuplane-agent, with --pod-resources-socket set (the default)?")
	}
	r := &Report{By: by, Start: q.end.Add(-time.Duration(q.window)).UTC(), End: q.end.UTC(), Resolution: s, PricePerGPUHour: price}
	rowName := func(l map[string]string) string {
		if by == "pod" {
			return l["namespace"] + "/" + l["pod"]
		}
		return l[by]
	}
	peak := map[string]float64{}
	for _, p := range peaks {
		peak[rowName(p.labels)] = p.value
	}
	windowHours := time.Duration(q.window).Hours()
	for _, x := range sums {
		name := rowName(x.labels)
		h := x.value * hoursPerStep
		r.Rows = append(r.Rows, Row{Name: name, GPUHours: h, MeanGPUs: h / windowHours, PeakGPUs: peak[name], Cost: h * price})
		r.AllocatedGPUHours += h
	}
	for i := range r.Rows {
		if r.AllocatedGPUHours > 0 {
			r.Rows[i].Share = r.Rows[i].GPUHours / r.AllocatedGPUHours
		}
	}
	slices.SortFunc(r.Rows, func(a, b Row) int {
		return cmp.Or(cmp.Compare(b.GPUHours, a.GPUHours), cmp.Compare(a.Name, b.Name))
	})
	if len(idle) > 0 {
		r.IdleGPUHours = idle[0].value * hoursPerStep
	}
	if len(gpus) > 0 {
		r.CapacityGPUHours = gpus[0].value * hoursPerStep
	}
	return r, nil
}

// render writes the table, with the totals under it.
func (r *Report) render(out io.Writer, wide bool) error {
	tw := cliutil.NewTable(out)
	head := []string{strings.ToUpper(r.By), "GPU-HOURS", "SHARE"}
	if wide {
		head = append(head, "MEAN GPUS", "PEAK GPUS")
	}
	if r.PricePerGPUHour > 0 {
		head = append(head, "COST")
	}
	fmt.Fprintln(tw, strings.Join(head, "\t"))
	line := func(name string, hours float64, share string, mean, peak string, cost float64) {
		cols := []string{name, fmt.Sprintf("%.2f", hours), share}
		if wide {
			cols = append(cols, mean, peak)
		}
		if r.PricePerGPUHour > 0 {
			cols = append(cols, fmt.Sprintf("%.2f", cost))
		}
		fmt.Fprintln(tw, strings.Join(cols, "\t"))
	}
	for _, x := range r.Rows {
		name := x.Name
		if name == "" {
			name = "(none)"
		}
		line(name, x.GPUHours, fmt.Sprintf("%.1f%%", 100*x.Share), fmt.Sprintf("%.2f", x.MeanGPUs), fmt.Sprintf("%.2f", x.PeakGPUs), x.Cost)
	}
	price := r.PricePerGPUHour
	line("(allocated)", r.AllocatedGPUHours, "", "", "", r.AllocatedGPUHours*price)
	line("(idle)", r.IdleGPUHours, "", "", "", r.IdleGPUHours*price)
	util := ""
	if r.CapacityGPUHours > 0 {
		util = fmt.Sprintf("%.1f%% held", 100*r.AllocatedGPUHours/r.CapacityGPUHours)
	}
	line("(capacity)", r.CapacityGPUHours, util, "", "", r.CapacityGPUHours*price)
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintf(out, "\n%s to %s, sampled every %s\n", r.Start.Format(time.RFC3339), r.End.Format(time.RFC3339), r.Resolution)
	return err
}

// Query is one cost report to compute, as the cost command's flags give
// it: Prometheus's base URL, the window before now in Prometheus's units,
// the rows (namespace, queue, pod or node) and the price of a GPU-hour.
type Query struct {
	Prometheus string
	Window     string
	By         string
	Price      float64
	Timeout    time.Duration
}

// Compute runs q against Prometheus as `gpuplane cost` does, for a
// program that shows the report its own way (gpuplane ui); a bad field
// is an error naming the flag that sets it.
func Compute(ctx context.Context, q Query) (*Report, error) {
	table := cliutil.Table
	o := &options{output: &table, prometheus: q.Prometheus, window: q.Window, end: "now", by: q.By, price: q.Price, timeout: q.Timeout, now: time.Now}
	_, pq, err := o.parse()
	if err != nil {
		return nil, err
	}
	c, err := newClient(o.prometheus, o.timeout)
	if err != nil {
		return nil, err
	}
	return report(ctx, c, o.by, pq, o.price)
}
