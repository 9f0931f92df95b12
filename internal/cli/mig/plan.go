package mig

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/gpuplane/gpuplane/api/gpunode"
	"github.com/gpuplane/gpuplane/api/gpupod"
	"github.com/gpuplane/gpuplane/internal/cliutil"
	"github.com/gpuplane/gpuplane/internal/cliutil/clusterflags"
	"github.com/gpuplane/gpuplane/internal/mig"
)

// DefaultConfigMap is where the Helm chart puts mig-parted's default
// configs (agent.mig), for its default namespace.
const DefaultConfigMap = "gpuplane-system/default-mig-parted-config"

// NewCommand returns the mig command.
func NewCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "mig",
		Short: "Show what a MIG config would change on a node",
		Args:  cobra.NoArgs,
	}
	cmd.AddCommand(newPlanCommand())
	return cmd
}

type planOptions struct {
	output         *cliutil.Format
	cluster        *clusterflags.Cluster
	configMap, key string
}

func newPlanCommand() *cobra.Command {
	o := &planOptions{}
	cmd := &cobra.Command{
		Use:   "plan NODE CONFIG-NAME",
		Short: "Show the per-GPU MIG changes a config would make on a node, and the pods that would move",
		Long: `plan reads the node's GPUs and their MIG layouts (the gpuplane.io/mig-layout
annotation its gpuplane-agent publishes), the mig-parted ConfigMap, and the
pods bound to the node, and shows, per GPU, the layout now and the layout the
config gives it, and the pods that hold each GPU that would change: labelling
the node nvidia.com/mig.config=CONFIG-NAME evicts those pods and no others.

It validates the config against each GPU's MIG profiles and placements as the
agent does, and exits 1 naming the field when the config does not fit the node.
It changes nothing. --mig-config-map and --mig-config-key are the agent's
flags of the same names (--configmap and --key are their deprecated names).`,
		Example: `  gpuplane mig plan gpu-node-7 all-balanced
  gpuplane mig plan gpu-node-7 all-1g.10gb --mig-config-map gpuplane-system/my-mig-configs -o json`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			ns, name, ok := strings.Cut(o.configMap, "/")
			if !ok || ns == "" || name == "" {
				return cliutil.Usagef("--mig-config-map: %q: want NAMESPACE/NAME", o.configMap)
			}
			if o.key == "" {
				return cliutil.Usagef("--mig-config-key: must not be empty (the GPU Operator's ConfigMaps use config.yaml)")
			}
			rc, err := o.cluster.RESTConfig()
			if err != nil {
				return err
			}
			res, err := Plan(cmd.Context(), rc, args[0], args[1], ns, name, o.key)
			if err != nil {
				return err
			}
			if o.output.Data() {
				return cliutil.Encode(cmd.OutOrStdout(), *o.output, res)
			}
			return Print(cmd.OutOrStdout(), res, *o.output == cliutil.Wide)
		},
	}
	o.output = cliutil.AddOutputFlag(cmd, cliutil.Table, "wide adds each changing GPU's UUID, the config entry that chose its layout and the MIG devices it gets, placed")
	o.cluster = clusterflags.Add(cmd, clusterflags.ClusterScoped)
	f := cmd.Flags()
	f.StringVar(&o.configMap, "mig-config-map", DefaultConfigMap, "NAMESPACE/NAME of the mig-parted ConfigMap the node's agent reads (the agent's --mig-config-map)")
	f.StringVar(&o.key, "mig-config-key", "config.yaml", "the ConfigMap's key holding the mig-parted config (the agent's --mig-config-key)")
	f.StringVar(&o.configMap, "configmap", DefaultConfigMap, "")
	f.StringVar(&o.key, "key", "config.yaml", "")
	_ = f.MarkDeprecated("configmap", "use --mig-config-map, the agent's name")
	_ = f.MarkDeprecated("key", "use --mig-config-key, the agent's name")
	return cmd
}

// Result is what plan reports.
type Result struct {
	Node   string    `json:"node"`
	Config string    `json:"config"`
	GPUs   []GPURow  `json:"gpus"`
	Plan   *mig.Plan `json:"plan"`
}

// GPURow is one GPU's line: its layouts and the pods that would move.
type GPURow struct {
	Index   int      `json:"index"`
	Name    string   `json:"name"`
	From    string   `json:"from"`
	To      string   `json:"to"`
	Changes bool     `json:"changes"`
	Pods    []string `json:"pods,omitempty"`
}

// Plan reads the cluster and plans config on node.
func Plan(ctx context.Context, rc *rest.Config, node, config, cmNamespace, cmName, key string) (*Result, error) {
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("building the API client: %w", err)
	}
	n, err := cs.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("reading node %s: %w", node, err)
	}
	raw, ok := n.Annotations[gpunode.MIGLayoutAnnotation]
	if !ok {
		return nil, fmt.Errorf("node %s has no %s annotation: its gpuplane-agent publishes one when declarative MIG is on (--mig-config-map; the chart's agent.mig.enabled)", node, gpunode.MIGLayoutAnnotation)
	}
	layout, err := gpunode.ParseMIGLayout(raw)
	if err != nil {
		return nil, fmt.Errorf("node %s: %w", node, err)
	}
	gpus, err := mig.GPUsFromLayout(layout)
	if err != nil {
		return nil, fmt.Errorf("node %s: %w", node, err)
	}
	cm, err := cs.CoreV1().ConfigMaps(cmNamespace).Get(ctx, cmName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("the MIG ConfigMap %s/%s does not exist: give the one the node's agent reads with --mig-config-map", cmNamespace, cmName)
	}
	if err != nil {
		return nil, fmt.Errorf("reading the MIG ConfigMap %s/%s: %w", cmNamespace, cmName, err)
	}
	data, ok := cm.Data[key]
	if !ok {
		return nil, fmt.Errorf("the MIG ConfigMap %s/%s has no key %q: give its key with --mig-config-key", cmNamespace, cmName, key)
	}
	spec, err := mig.ParseBytes([]byte(data))
	if err != nil {
		return nil, fmt.Errorf("the MIG ConfigMap %s/%s: %w", cmNamespace, cmName, err)
	}
	plan, err := mig.NewPlan(spec, config, gpus)
	if err != nil {
		return nil, fmt.Errorf("config %s on node %s: %w", config, node, err)
	}
	pods, err := cs.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + node})
	if err != nil {
		return nil, fmt.Errorf("listing the pods on node %s: %w", node, err)
	}
	holders := podsByGPU(pods.Items, len(gpus))
	res := &Result{Node: node, Config: config, Plan: plan}
	for _, g := range gpus {
		row := GPURow{Index: g.Index, Name: g.Name, From: g.Current.String(), To: plan.Targets[g.Index].String(), Changes: plan.Changed(g.Index)}
		if row.Changes {
			row.Pods = holders[g.Index]
		}
		res.GPUs = append(res.GPUs, row)
	}
	return res, nil
}

// podsByGPU maps GPU index to the running pods holding it, by the GPUs the
// node recorded on each (gpuplane.io/gpus-held), else the ones
// gpuplane-scheduler chose (gpuplane.io/gpus).
func podsByGPU(pods []corev1.Pod, gpus int) map[int][]string {
	out := map[int][]string{}
	for i := range pods {
		p := &pods[i]
		if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		v, ok := p.Annotations[gpupod.HeldAnnotation]
		if !ok {
			v, ok = p.Annotations[gpupod.GPUsAnnotation]
		}
		if !ok {
			continue
		}
		choice, err := gpupod.ParseGPUs(v, gpus)
		if err != nil {
			continue
		}
		seen := map[int]bool{}
		for _, c := range choice {
			if !seen[c.Index] {
				seen[c.Index] = true
				out[c.Index] = append(out[c.Index], p.Namespace+"/"+p.Name)
			}
		}
	}
	for _, ps := range out {
		sort.Strings(ps)
	}
	return out
}

// Print writes the plan as a table; wide adds each changing GPU's UUID,
// the config entry that chose its layout and its MIG devices, placed.
func Print(w io.Writer, r *Result, wide bool) error {
	moving := 0
	for _, g := range r.GPUs {
		moving += len(g.Pods)
	}
	pods := "pods"
	if moving == 1 {
		pods = "pod"
	}
	fmt.Fprintf(w, "Config %s on node %s: %d of %d GPUs change, %d %s would be evicted.\n\n", r.Config, r.Node, len(r.Plan.Changes), len(r.GPUs), moving, pods)
	changes := map[int]mig.Change{}
	for _, c := range r.Plan.Changes {
		changes[c.Index] = c
	}
	tw := cliutil.NewTable(w)
	head := "GPU\tNAME\tNOW\tAFTER\tPODS THAT MOVE"
	if wide {
		head += "\tUUID\tENTRY\tMIG DEVICES (PROFILE@START)"
	}
	fmt.Fprintln(tw, head)
	for _, g := range r.GPUs {
		after := g.To
		if !g.Changes {
			after = "(unchanged)"
		}
		movers := "-"
		if len(g.Pods) > 0 {
			movers = strings.Join(g.Pods, ", ")
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s", g.Index, g.Name, g.From, after, movers)
		if wide {
			c, ok := changes[g.Index]
			uuid, entry, devices := "-", "-", "-"
			if ok {
				uuid, entry = dash(c.UUID), dash(c.Entry)
				var ds []string
				for _, in := range c.Instances {
					ds = append(ds, fmt.Sprintf("%s@%d", in.Profile, in.Placement.Start))
				}
				if len(ds) > 0 {
					devices = strings.Join(ds, ",")
				}
			}
			fmt.Fprintf(tw, "\t%s\t%s\t%s", uuid, entry, devices)
		}
		fmt.Fprintln(tw)
	}
	return tw.Flush()
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
