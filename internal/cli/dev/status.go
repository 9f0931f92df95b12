package dev

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/gpuplane/gpuplane/api/gpupod"
	"github.com/gpuplane/gpuplane/internal/cliutil"
)

// Status is what `dev status` reports.
type Status struct {
	Running    bool   `json:"running"`
	Phase      string `json:"phase,omitempty"`
	StateDir   string `json:"stateDir"`
	Pid        int    `json:"pid,omitempty"`
	Kubeconfig string `json:"kubeconfig,omitempty"`
	APIServer  string `json:"apiServer,omitempty"`
	// APIServerReady says whether the API server answered /readyz.
	APIServerReady bool              `json:"apiServerReady"`
	Components     []ComponentStatus `json:"components,omitempty"`
	Nodes          []NodeStatus      `json:"nodes,omitempty"`
	// Allocations are filled with --allocations.
	Allocations []AllocationRow `json:"allocations,omitempty"`
}

// ComponentStatus is one process of the cluster.
type ComponentStatus struct {
	Name    string `json:"name"`
	Pid     int    `json:"pid"`
	Running bool   `json:"running"`
	Log     string `json:"log,omitempty"`
}

// NodeStatus is one node and its GPU resources.
type NodeStatus struct {
	Name      string           `json:"name"`
	Kind      string           `json:"kind"`
	Profile   string           `json:"profile,omitempty"`
	Ready     bool             `json:"ready"`
	Resources []ResourceStatus `json:"resources"`
	Metrics   string           `json:"metrics,omitempty"`
}

// ResourceStatus is a device-plugin resource of a node.
type ResourceStatus struct {
	Name        string `json:"name"`
	Capacity    int64  `json:"capacity"`
	Allocatable int64  `json:"allocatable"`
}

// AllocationRow is one pod's devices of one resource.
type AllocationRow struct {
	Pod       string   `json:"pod"`
	Phase     string   `json:"phase"`
	Node      string   `json:"node"`
	Container string   `json:"container"`
	Resource  string   `json:"resource"`
	Devices   []string `json:"devices"`
}

func newStatusCommand(resolve func() (stateDir, error)) *cobra.Command {
	var output *cliutil.Format
	var allocations bool
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show whether the local cluster runs, its nodes' GPUs and its components",
		Long: `status shows whether the dev cluster runs, each node with its GPU resources
(capacity/allocatable), each process with its pid and whether it is alive,
and with --allocations which pod holds which devices (from the
gpuplane.io/allocation annotation the simulated nodes write).`,
		Example: `  gpuplane dev status
  gpuplane dev status --allocations
  gpuplane dev status -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			format := *output
			dir, err := resolve()
			if err != nil {
				return err
			}
			st, err := collectStatus(cmd.Context(), dir, allocations)
			if err != nil {
				return err
			}
			if format.Data() {
				return cliutil.Encode(cmd.OutOrStdout(), format, st)
			}
			return printStatus(cmd.OutOrStdout(), st, allocations, format == cliutil.Wide)
		},
	}
	output = cliutil.AddOutputFlag(cmd, cliutil.Table, "wide adds each simulated node's agent metrics address")
	cmd.Flags().BoolVar(&allocations, "allocations", false, "also list which pod got which devices")
	return cmd
}

func collectStatus(ctx context.Context, dir stateDir, allocations bool) (*Status, error) {
	st := &Status{StateDir: string(dir)}
	pid, err := dir.readPid()
	if err != nil {
		return nil, err
	}
	if !supervisorAlive(pid) {
		return st, nil
	}
	st.Running, st.Pid = true, pid
	state, err := dir.readState()
	if err != nil {
		st.Phase = PhaseStarting
		return st, nil //nolint:nilerr // the supervisor has not written its state yet: starting.
	}
	st.Phase, st.Kubeconfig, st.APIServer = state.Phase, state.Kubeconfig, state.APIServer
	st.Components = append(st.Components, ComponentStatus{Name: "supervisor", Pid: pid, Running: true, Log: dir.path(supervisorLog)})
	names := make([]string, 0, len(state.Pids))
	for n := range state.Pids {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		st.Components = append(st.Components, ComponentStatus{Name: n, Pid: state.Pids[n], Running: processAlive(state.Pids[n]), Log: state.Logs[n]})
	}
	if st.Kubeconfig == "" {
		return st, nil
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", st.Kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("reading the dev cluster's kubeconfig: %w", err)
	}
	cfg.Timeout = 10 * time.Second
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("creating a client for the dev cluster: %w", err)
	}
	_, err = client.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
	st.APIServerReady = err == nil
	nodes, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("listing the dev cluster's nodes: %w", err)
	}
	for i := range nodes.Items {
		st.Nodes = append(st.Nodes, nodeStatus(&nodes.Items[i], state.Metrics))
	}
	if allocations {
		if st.Allocations, err = listAllocations(ctx, client); err != nil {
			return nil, err
		}
	}
	return st, nil
}

func nodeStatus(n *corev1.Node, metrics map[string]string) NodeStatus {
	ns := NodeStatus{Name: n.Name, Kind: n.Labels[NodeKindLabel], Profile: n.Labels[ProfileLabel], Ready: nodeReady(n), Metrics: metrics[n.Name]}
	if ns.Kind == "" {
		ns.Kind = "other"
	}
	for name, q := range n.Status.Capacity {
		if !strings.Contains(string(name), "/") {
			continue
		}
		a := n.Status.Allocatable[name]
		ns.Resources = append(ns.Resources, ResourceStatus{Name: string(name), Capacity: q.Value(), Allocatable: a.Value()})
	}
	sort.Slice(ns.Resources, func(i, j int) bool { return ns.Resources[i].Name < ns.Resources[j].Name })
	return ns
}

// listAllocations reads the allocation annotation of every pod.
func listAllocations(ctx context.Context, client kubernetes.Interface) ([]AllocationRow, error) {
	pods, err := client.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("listing pods: %w", err)
	}
	var rows []AllocationRow
	for i := range pods.Items {
		p := &pods.Items[i]
		a, err := gpupod.ReadAllocation(p)
		if err != nil || a == nil {
			continue
		}
		for _, c := range a.Containers {
			resources := make([]string, 0, len(c.Devices))
			for r := range c.Devices {
				resources = append(resources, r)
			}
			sort.Strings(resources)
			for _, r := range resources {
				rows = append(rows, AllocationRow{
					Pod: p.Namespace + "/" + p.Name, Phase: string(p.Status.Phase), Node: a.Node,
					Container: c.Name, Resource: r, Devices: c.Devices[r],
				})
			}
		}
	}
	sort.Slice(rows, func(i, j int) bool {
		if rows[i].Pod != rows[j].Pod {
			return rows[i].Pod < rows[j].Pod
		}
		return rows[i].Resource < rows[j].Resource
	})
	return rows, nil
}

func printStatus(w io.Writer, st *Status, allocations, wide bool) error {
	if !st.Running {
		_, err := fmt.Fprintf(w, "no dev cluster is running (state dir %s); start one with `gpuplane dev up`\n", st.StateDir)
		return err
	}
	fmt.Fprintf(w, "dev cluster %s (supervisor pid %d)\n", st.Phase, st.Pid)
	if st.Kubeconfig != "" {
		ready := "ready"
		if !st.APIServerReady {
			ready = "NOT ready"
		}
		fmt.Fprintf(w, "  export KUBECONFIG=%s   # API server %s (%s)\n", st.Kubeconfig, st.APIServer, ready)
	}
	fmt.Fprintln(w)
	tw := cliutil.NewTable(w)
	head := "NODE\tKIND\tPROFILE\tREADY\tGPU RESOURCES (allocatable/capacity)"
	if wide {
		head += "\tAGENT METRICS"
	}
	fmt.Fprintln(tw, head)
	kwok := NodeStatus{Kind: "kwok"}
	kwokCount, kwokReady := 0, 0
	for _, n := range st.Nodes {
		if n.Kind == "kwok" {
			kwokCount++
			if n.Ready {
				kwokReady++
			}
			kwok.Resources = addResources(kwok.Resources, n.Resources)
			continue
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%v\t%s", n.Name, n.Kind, n.Profile, n.Ready, resourceSummary(n.Resources))
		if wide {
			metrics := n.Metrics
			if metrics == "" {
				metrics = "-"
			}
			fmt.Fprintf(tw, "\t%s", metrics)
		}
		fmt.Fprintln(tw)
	}
	if kwokCount > 0 {
		fmt.Fprintf(tw, "kwok-gpu-* (%d)\tkwok\t\t%d/%d\t%s", kwokCount, kwokReady, kwokCount, resourceSummary(kwok.Resources))
		if wide {
			fmt.Fprint(tw, "\t-")
		}
		fmt.Fprintln(tw)
	}
	fmt.Fprintln(tw)
	fmt.Fprintln(tw, "COMPONENT\tPID\tRUNNING\tLOG")
	for _, c := range st.Components {
		fmt.Fprintf(tw, "%s\t%d\t%v\t%s\n", c.Name, c.Pid, c.Running, c.Log)
	}
	if allocations {
		fmt.Fprintln(tw)
		fmt.Fprintln(tw, "POD\tPHASE\tNODE\tRESOURCE\tDEVICES")
		for _, a := range st.Allocations {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", a.Pod, a.Phase, a.Node, a.Resource, strings.Join(a.Devices, ","))
		}
	}
	return tw.Flush()
}

func addResources(sum, add []ResourceStatus) []ResourceStatus {
	for _, r := range add {
		found := false
		for i := range sum {
			if sum[i].Name == r.Name {
				sum[i].Capacity += r.Capacity
				sum[i].Allocatable += r.Allocatable
				found = true
			}
		}
		if !found {
			sum = append(sum, r)
		}
	}
	return sum
}

func resourceSummary(rs []ResourceStatus) string {
	parts := make([]string, 0, len(rs))
	for _, r := range rs {
		parts = append(parts, fmt.Sprintf("%s %d/%d", r.Name, r.Allocatable, r.Capacity))
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, ", ")
}
