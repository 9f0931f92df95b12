package version

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sort"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/gpuplane/gpuplane/api/buildinfo"
	"github.com/gpuplane/gpuplane/internal/cliutil"
	"github.com/gpuplane/gpuplane/internal/cliutil/clusterflags"
	"github.com/gpuplane/gpuplane/internal/version"
)

// Report is what `gpuplane version` prints.
type Report struct {
	Client buildinfo.Info `json:"client"`
	// Server is the API server's Kubernetes version; empty without a
	// cluster.
	Server string `json:"server,omitempty"`
	// Schedulers are the gpuplane-scheduler leader Leases found.
	Schedulers []Component `json:"schedulers,omitempty"`
	// Agents are the Nodes that carry an agent's build.
	Agents []Component `json:"agents,omitempty"`
}

// Component is one running part's build as the cluster reports it.
type Component struct {
	// Name is the Node's name, or the Lease's namespace/name.
	Name string `json:"name"`
	// Holder is the replica that holds a scheduler Lease.
	Holder string `json:"holder,omitempty"`
	// Build is nil when the annotation could not be read; Error says why.
	Build *buildinfo.Info `json:"build,omitempty"`
	Error string          `json:"error,omitempty"`
}

type options struct {
	output  *cliutil.Format
	cluster *clusterflags.Cluster
	client  bool
}

// NewCommand returns the version command.
func NewCommand() *cobra.Command {
	o := &options{}
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Show the CLI's version and those of the scheduler and agents in the cluster",
		Long: `version prints the CLI's build: version, commit, date, Go and client-go
versions and platform. With a cluster (--kubeconfig, $KUBECONFIG or
~/.kube/config; --client skips it) it also prints the API server's
Kubernetes version and the builds that run there:

  scheduler  the leading gpuplane-scheduler's, from the annotation
             ` + buildinfo.SchedulerAnnotation + ` on its leader Lease
             (not written when leader election is off);
  agents     each gpuplane-agent's, from the annotation
             ` + buildinfo.AgentAnnotation + ` on its Node.

An annotation that does not parse is shown as an error, not as a version.
Without a kubeconfig only the CLI's build is printed.`,
		Example: `  gpuplane version
  gpuplane version --client
  gpuplane version -o yaml --kubeconfig ~/.kube/config`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			format := *o.output
			r := &Report{Client: version.Get()}
			if !o.client && o.cluster.Configured() {
				_, client, _, err := o.cluster.Clients()
				if err != nil {
					return err
				}
				if err := Collect(cmd.Context(), client, r); err != nil {
					// What was read is printed before the error.
					_ = write(cmd.OutOrStdout(), format, r)
					return err
				}
			}
			return write(cmd.OutOrStdout(), format, r)
		},
	}
	o.output = cliutil.AddOutputFlag(cmd, cliutil.Table, "wide is the same table")
	o.cluster = clusterflags.Add(cmd, clusterflags.ClusterScoped)
	cmd.Flags().BoolVar(&o.client, "client", false, "print the CLI's build only, without reading a cluster")
	return cmd
}

// Collect adds the cluster's builds to r.
func Collect(ctx context.Context, client kubernetes.Interface, r *Report) error {
	sv, err := client.Discovery().ServerVersion()
	if err != nil {
		return fmt.Errorf("reading the API server's version: %w", err)
	}
	r.Server = sv.GitVersion
	var errs []error
	leases, err := client.CoordinationV1().Leases("").List(ctx, metav1.ListOptions{})
	if err != nil {
		errs = append(errs, fmt.Errorf("listing Leases for the scheduler's build: %w", err))
	} else {
		for i := range leases.Items {
			l := &leases.Items[i]
			v, ok := l.Annotations[buildinfo.SchedulerAnnotation]
			if !ok {
				continue
			}
			c := component(l.Namespace+"/"+l.Name, buildinfo.SchedulerAnnotation, v)
			if l.Spec.HolderIdentity != nil {
				c.Holder = *l.Spec.HolderIdentity
			}
			r.Schedulers = append(r.Schedulers, c)
		}
	}
	opts := metav1.ListOptions{Limit: 500}
	for {
		nodes, err := client.CoreV1().Nodes().List(ctx, opts)
		if err != nil {
			errs = append(errs, fmt.Errorf("listing Nodes for the agents' builds: %w", err))
			break
		}
		for i := range nodes.Items {
			n := &nodes.Items[i]
			if v, ok := n.Annotations[buildinfo.AgentAnnotation]; ok {
				r.Agents = append(r.Agents, component(n.Name, buildinfo.AgentAnnotation, v))
			}
		}
		if opts.Continue = nodes.Continue; opts.Continue == "" {
			break
		}
	}
	sort.Slice(r.Schedulers, func(i, j int) bool { return r.Schedulers[i].Name < r.Schedulers[j].Name })
	sort.Slice(r.Agents, func(i, j int) bool { return r.Agents[i].Name < r.Agents[j].Name })
	return errors.Join(errs...)
}

func component(name, key, value string) Component {
	i, err := buildinfo.Parse(key, value)
	if err != nil {
		return Component{Name: name, Error: err.Error()}
	}
	return Component{Name: name, Build: &i}
}

func write(w io.Writer, f cliutil.Format, r *Report) error {
	if f == cliutil.JSON || f == cliutil.YAML {
		return cliutil.Encode(w, f, r)
	}
	t := cliutil.NewTable(w)
	fmt.Fprintln(t, "COMPONENT\tNAME\tVERSION\tCOMMIT\tDATE\tGO\tCLIENT-GO\tPLATFORM")
	var invalid []string
	row := func(kind, name string, b *buildinfo.Info, errText string) {
		if b == nil {
			fmt.Fprintf(t, "%s\t%s\tinvalid\t-\t-\t-\t-\t-\n", kind, name)
			invalid = append(invalid, kind+" "+name+": "+errText)
			return
		}
		fmt.Fprintf(t, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", kind, name, b.Version, dash(short(b.Commit)), dash(b.Date), b.GoVersion, dash(b.KubernetesClient), dash(b.Platform))
	}
	row("client", "gpuplane", &r.Client, "")
	for _, c := range r.Schedulers {
		name := c.Name
		if c.Holder != "" {
			name += " (" + c.Holder + ")"
		}
		row("scheduler", name, c.Build, c.Error)
	}
	for _, c := range r.Agents {
		row("agent", c.Name, c.Build, c.Error)
	}
	if err := t.Flush(); err != nil {
		return err
	}
	for _, s := range invalid {
		fmt.Fprintln(w, s)
	}
	if r.Server != "" {
		fmt.Fprintf(w, "\nKubernetes API server: %s\n", r.Server)
		if len(r.Schedulers) == 0 {
			fmt.Fprintf(w, "No gpuplane-scheduler build found (no Lease has %s: not installed, not started, or leader election off).\n", buildinfo.SchedulerAnnotation)
		}
		if len(r.Agents) == 0 {
			fmt.Fprintf(w, "No gpuplane-agent build found (no Node has %s).\n", buildinfo.AgentAnnotation)
		}
	}
	return nil
}

// short cuts a commit hash to 12 characters, keeping a -dirty suffix.
func short(commit string) string {
	const n = 12
	hash, dirty := commit, ""
	if len(commit) > 6 && commit[len(commit)-6:] == "-dirty" {
		hash, dirty = commit[:len(commit)-6], "-dirty"
	}
	if len(hash) > n {
		hash = hash[:n]
	}
	return hash + dirty
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
