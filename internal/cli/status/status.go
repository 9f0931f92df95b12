package status

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/gpuplane/gpuplane/api/gpunode"
	"github.com/gpuplane/gpuplane/api/gpupod"
	"github.com/gpuplane/gpuplane/api/scheduling/v1alpha1"
	"github.com/gpuplane/gpuplane/internal/cliutil"
	"github.com/gpuplane/gpuplane/internal/cliutil/clusterflags"
)

// Status is what `gpuplane status` shows; -o json and -o yaml print it as
// is.
type Status struct {
	Nodes  []Node  `json:"nodes"`
	Queues []Queue `json:"queues"`
	// Waiting lists what gpuplane-scheduler has not placed, with why: pod
	// groups, and pods without a group, counted per owner and reason.
	Waiting []Gang `json:"waiting"`
}

// Node is one node's GPUs.
type Node struct {
	Name        string `json:"name"`
	Ready       bool   `json:"ready"`
	Model       string `json:"model,omitempty"`
	MemoryMiB   int64  `json:"memoryMiB,omitempty"`
	Capacity    int64  `json:"capacity"`
	Allocatable int64  `json:"allocatable"`
	// Used counts the GPUs that pods on the node ask for.
	Used int64 `json:"used"`
	// MIG is the MIG strategy and the MIG devices the node offers.
	MIG string `json:"mig,omitempty"`
	// Sharing is the sharing strategy and replicas per GPU.
	Sharing string   `json:"sharing,omitempty"`
	Holders []Holder `json:"holders,omitempty"`
}

// Holder is a pod and the GPUs it holds.
type Holder struct {
	Pod  string `json:"pod"`
	GPUs string `json:"gpus"`
	// Part is the part of a GPU the pod asked for ("0.5 GPU, 30Gi"), when
	// it asked for part of one.
	Part string `json:"part,omitempty"`
	// Source says where GPUs came from: "node" (the node's record of what
	// its kubelet gave, gpuplane.io/gpus-held), "allocation" (the devices a
	// simulated node gave), "scheduler" (the indexes gpuplane-scheduler
	// chose) or "request" (only the count the pod asks for is known).
	Source string `json:"source"`
}

// Queue is one scheduling queue's GPU share.
type Queue struct {
	Name       string `json:"name"`
	Parent     string `json:"parent,omitempty"`
	Usage      string `json:"usage"`
	Guaranteed string `json:"guaranteed,omitempty"`
	Limit      string `json:"limit,omitempty"`
	FairShare  string `json:"fairShare"`
	Pending    int32  `json:"pending"`
	Admitted   int32  `json:"admitted"`
	// Problem is the Valid condition's message when the queue is invalid.
	Problem string `json:"problem,omitempty"`
}

// Gang is a pod group that waits, or pods without a group that wait for
// the same reason (Kind "Pods": Name is their owner, or the pod when it
// has none, and Count how many).
type Gang struct {
	Kind      string `json:"kind"`
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	Queue     string `json:"queue,omitempty"`
	Phase     string `json:"phase"`
	MinMember int32  `json:"minMember"`
	Scheduled int32  `json:"scheduled"`
	Count     int32  `json:"count,omitempty"`
	Why       string `json:"why,omitempty"`
	// DerivedFrom, for a PodGroup gpuplane-scheduler made, names the
	// workload and says where minMember and the queue came from.
	DerivedFrom string `json:"derivedFrom,omitempty"`
}

// Kinds of waiting entries.
const (
	KindPodGroup = "PodGroup"
	KindPods     = "Pods"
)

type options struct {
	output        *cliutil.Format
	cluster       *clusterflags.Cluster
	schedulerName string
}

// NewCommand returns the status command.
func NewCommand() *cobra.Command {
	o := &options{}
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show the cluster's GPUs, who holds them, queues and waiting gangs",
		Long: `status reads the cluster through the API server and shows:

  NODES    each node's GPU model, GPUs used/allocatable/capacity, MIG and
           sharing (from the feature labels) and readiness;
  GPU HOLDERS  with -o wide, which pod holds which GPU on each node and
           the part of a GPU it asked for: the GPUs the node recorded
           (gpuplane.io/gpus-held; a simulated node's gpuplane.io/allocation),
           else the indexes gpuplane-scheduler chose, else the pod's GPU
           count; FROM says which;
  QUEUES   each Queue's GPU usage against its guarantee, limit and fair
           share, with pending and admitted pod groups (from Queue status);
  WAITING  pod groups that are not placed and why (their Schedulable
           condition, e.g. "gang 2/8 placeable; 0/1000 nodes available"),
           and pods without a group that wait, per owner and reason (their
           PodScheduled condition). With -o wide, a pod group the scheduler
           derived from a workload (a Job, JobSet, PyTorchJob, ...) says
           which, and where its minMember and queue came from (the rule and
           field, or the workload's label).

With -n NAMESPACE, GPU HOLDERS and WAITING list that namespace's pods and
pod groups only; NODES and QUEUES stay cluster-wide.

The Queue and PodGroup sections are empty when the CRDs are not installed.`,
		Example: `  gpuplane status
  gpuplane status -o wide -n ml-team
  gpuplane status -o json --kubeconfig ~/.kube/config --context prod`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			rc, err := o.cluster.RESTConfig()
			if err != nil {
				return err
			}
			ns, explicit, err := o.cluster.Namespace()
			if err != nil {
				return err
			}
			if !explicit {
				ns = ""
			}
			st, err := Collect(cmd.Context(), rc, o.schedulerName)
			if err != nil {
				return err
			}
			st.Only(ns)
			if o.output.Data() {
				return cliutil.Encode(cmd.OutOrStdout(), *o.output, st)
			}
			return Print(cmd.OutOrStdout(), st, *o.output == cliutil.Wide)
		},
	}
	o.output = cliutil.AddOutputFlag(cmd, cliutil.Table, "wide adds GPU HOLDERS and where derived pod groups came from")
	o.cluster = clusterflags.Add(cmd, clusterflags.Namespaced)
	cmd.Flags().StringVar(&o.schedulerName, "scheduler-name", v1alpha1.SchedulerName, "the spec.schedulerName whose waiting pods are listed (gpuplane-scheduler's --scheduler-name)")
	return cmd
}

// Only keeps the GPU holders and waiting entries of namespace ns; ""
// keeps all.
func (st *Status) Only(ns string) {
	if ns == "" {
		return
	}
	for i := range st.Nodes {
		st.Nodes[i].Holders = slices.DeleteFunc(st.Nodes[i].Holders, func(h Holder) bool { return !strings.HasPrefix(h.Pod, ns+"/") })
	}
	st.Waiting = slices.DeleteFunc(st.Waiting, func(g Gang) bool { return g.Namespace != ns })
}

// Collect reads the cluster's status; schedulerName picks the waiting pods
// listed (gpuplane-scheduler's when empty).
func Collect(ctx context.Context, rc *rest.Config, schedulerName string) (*Status, error) {
	if schedulerName == "" {
		schedulerName = v1alpha1.SchedulerName
	}
	client, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("creating an API client: %w", err)
	}
	dyn, err := dynamic.NewForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("creating an API client: %w", err)
	}
	nodes, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("listing nodes: %w", err)
	}
	pods, err := client.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("listing pods: %w", err)
	}
	st := &Status{Nodes: []Node{}, Queues: []Queue{}, Waiting: []Gang{}}
	byNode := map[string][]*corev1.Pod{}
	for i := range pods.Items {
		p := &pods.Items[i]
		if p.Spec.NodeName != "" && p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed {
			byNode[p.Spec.NodeName] = append(byNode[p.Spec.NodeName], p)
		}
	}
	for i := range nodes.Items {
		if n := nodeStatus(&nodes.Items[i], byNode[nodes.Items[i].Name]); n.Capacity > 0 || n.MIG != "" {
			st.Nodes = append(st.Nodes, n)
		}
	}
	slices.SortFunc(st.Nodes, func(a, b Node) int { return cmp.Compare(a.Name, b.Name) })

	if ql, err := dyn.Resource(v1alpha1.QueuesResource).List(ctx, metav1.ListOptions{}); err == nil {
		for i := range ql.Items {
			var q v1alpha1.Queue
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(ql.Items[i].Object, &q); err != nil {
				return nil, fmt.Errorf("decoding queue %s: %w", ql.Items[i].GetName(), err)
			}
			st.Queues = append(st.Queues, QueueOf(&q))
		}
	} else if !meta.IsNoMatchError(err) && !apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("listing queues: %w", err)
	}
	slices.SortFunc(st.Queues, func(a, b Queue) int { return cmp.Compare(a.Name, b.Name) })
	if gl, err := dyn.Resource(v1alpha1.PodGroupsResource).List(ctx, metav1.ListOptions{}); err == nil {
		for i := range gl.Items {
			var g v1alpha1.PodGroup
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(gl.Items[i].Object, &g); err != nil {
				return nil, fmt.Errorf("decoding pod group %s: %w", gl.Items[i].GetName(), err)
			}
			if gang, waits := PodGroupWaiting(&g); waits {
				st.Waiting = append(st.Waiting, gang)
			}
		}
	} else if !meta.IsNoMatchError(err) && !apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("listing pod groups: %w", err)
	}
	ptrs := make([]*corev1.Pod, len(pods.Items))
	for i := range pods.Items {
		ptrs[i] = &pods.Items[i]
	}
	st.Waiting = append(st.Waiting, WaitingPods(ptrs, schedulerName)...)
	slices.SortFunc(st.Waiting, func(a, b Gang) int {
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name), cmp.Compare(a.Why, b.Why))
	})
	return st, nil
}

// PodGroupWaiting is g's WAITING entry, and whether g waits at all (a
// pod group running, scheduled or finished does not): its phase, its
// members and why, as the scheduler wrote it in the Schedulable
// condition.
func PodGroupWaiting(g *v1alpha1.PodGroup) (Gang, bool) {
	switch g.Status.Phase {
	case v1alpha1.PodGroupRunning, v1alpha1.PodGroupScheduled, v1alpha1.PodGroupSucceeded, v1alpha1.PodGroupFailed:
		return Gang{}, false
	}
	gang := Gang{Kind: KindPodGroup, Namespace: g.Namespace, Name: g.Name, Queue: g.Spec.Queue, Phase: string(g.Status.Phase),
		MinMember: g.Spec.MinMember, Scheduled: g.Status.Scheduled, DerivedFrom: g.Annotations[v1alpha1.DerivedFromAnnotation]}
	if gang.Phase == "" {
		gang.Phase = "Unknown"
	}
	if c := meta.FindStatusCondition(g.Status.Conditions, v1alpha1.ConditionSchedulable); c != nil {
		gang.Why = c.Message
	}
	return gang, true
}

// WaitingPods counts the scheduler's pending pods that belong to no pod
// group (gangs are listed through their PodGroup) per namespace, owner,
// queue and reason: a Deployment's fifty waiting replicas are one row.
func WaitingPods(pods []*corev1.Pod, schedulerName string) []Gang {
	type key struct{ ns, owner, queue, why string }
	counts := map[key]int32{}
	for _, p := range pods {
		if p.Spec.SchedulerName != schedulerName || p.Spec.NodeName != "" || p.Status.Phase != corev1.PodPending || p.DeletionTimestamp != nil ||
			podGroupOf(p) != "" {
			continue
		}
		q, _ := v1alpha1.PodQueueName(p.Labels, p.Annotations)
		k := key{ns: p.Namespace, owner: p.Name, queue: q.Value}
		if ref := metav1.GetControllerOf(p); ref != nil {
			k.owner = strings.ToLower(ref.Kind) + "/" + ref.Name
		}
		// gpuplane's own gate holds a pod while the scheduler says why it
		// waits (its quota, its gang, its victims); another gate is
		// another controller's, and nothing is scheduled before it goes.
		for _, g := range p.Spec.SchedulingGates {
			if g.Name != v1alpha1.SchedulingGate {
				k.why = "scheduling gates: " + g.Name
				break
			}
		}
		if k.why == "" {
			for _, c := range p.Status.Conditions {
				if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason != corev1.PodReasonSchedulingGated {
					k.why = c.Message
				}
			}
		}
		if k.why == "" {
			k.why = "not seen by the scheduler yet"
		}
		counts[k]++
	}
	out := make([]Gang, 0, len(counts))
	for k, n := range counts {
		out = append(out, Gang{Kind: KindPods, Namespace: k.ns, Name: k.owner, Queue: k.queue, Phase: string(corev1.PodPending), MinMember: 1, Count: n, Why: k.why})
	}
	return out
}

func nodeStatus(n *corev1.Node, pods []*corev1.Pod) Node {
	out := Node{Name: n.Name, Model: n.Labels[gpunode.LabelGPUProduct]}
	out.MemoryMiB, _ = strconv.ParseInt(n.Labels[gpunode.LabelGPUMemory], 10, 64)
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			out.Ready = c.Status == corev1.ConditionTrue
		}
	}
	capQ := n.Status.Capacity[gpunode.ResourceGPU]
	allocQ := n.Status.Allocatable[gpunode.ResourceGPU]
	out.Capacity, out.Allocatable = capQ.Value(), allocQ.Value()
	var mig []string
	for name, q := range n.Status.Allocatable {
		if p, ok := strings.CutPrefix(string(name), gpunode.MIGResourcePrefix); ok && !q.IsZero() {
			mig = append(mig, fmt.Sprintf("%s x%d", p, q.Value()))
		}
	}
	slices.Sort(mig)
	if s := n.Labels[gpunode.LabelMIGStrategy]; s != "" || len(mig) > 0 {
		out.MIG = strings.TrimSpace(s + " " + strings.Join(mig, ", "))
	}
	if s := n.Labels[gpunode.LabelGPUSharingStrategy]; s != "" && s != "none" {
		out.Sharing = s
		if r := n.Labels[gpunode.LabelGPUReplicas]; r != "" {
			out.Sharing += " x" + r
		}
	}
	slices.SortFunc(pods, func(a, b *corev1.Pod) int { return cmp.Compare(a.Namespace+"/"+a.Name, b.Namespace+"/"+b.Name) })
	for _, p := range pods {
		count := gpuRequest(p)
		if count == 0 {
			continue
		}
		out.Used += count
		h := Holder{Pod: p.Namespace + "/" + p.Name, GPUs: strconv.FormatInt(count, 10) + " GPU(s)", Source: "request", Part: partOf(p)}
		if s := p.Annotations[gpupod.HeldAnnotation]; s != "" {
			h.GPUs, h.Source = "GPU "+s, "node"
		} else if a, err := gpupod.ReadAllocation(p); err == nil && a != nil {
			var ids []string
			for _, c := range a.Containers {
				for res, devs := range c.Devices {
					if strings.HasPrefix(res, "nvidia.com/") {
						ids = append(ids, devs...)
					}
				}
			}
			if len(ids) > 0 {
				h.GPUs, h.Source = strings.Join(ids, ","), "allocation"
			}
		} else if s := p.Annotations[gpupod.GPUsAnnotation]; s != "" {
			h.GPUs, h.Source = "GPU "+s, "scheduler"
		}
		out.Holders = append(out.Holders, h)
	}
	return out
}

// partOf describes the part of a GPU a pod asked for, "" when none.
func partOf(p *corev1.Pod) string {
	limits := corev1.ResourceList{}
	for _, c := range p.Spec.Containers {
		for name, q := range c.Resources.Limits {
			sum := limits[name]
			sum.Add(q)
			limits[name] = sum
		}
	}
	f, ok, err := gpupod.ReadFraction(p.Annotations, limits)
	switch {
	case err != nil:
		return "invalid: " + err.Error()
	case !ok:
		return ""
	}
	var parts []string
	if f.Milli > 0 {
		parts = append(parts, strconv.FormatFloat(float64(f.Milli)/1000, 'f', -1, 64)+" GPU")
	}
	if f.MemoryMiB > 0 {
		parts = append(parts, resource.NewQuantity(f.MemoryMiB<<20, resource.BinarySI).String())
	}
	return strings.Join(parts, ", ")
}

func gpuRequest(p *corev1.Pod) int64 {
	var n int64
	for _, c := range p.Spec.Containers {
		if q, ok := c.Resources.Limits[gpunode.ResourceGPU]; ok {
			n += q.Value()
		}
	}
	return n
}

// QueueOf is q's QUEUES row: its GPU usage and fair share from its
// status, its guarantee and limit from its spec, and its Valid
// condition's message when it is invalid.
func QueueOf(q *v1alpha1.Queue) Queue {
	out := Queue{Name: q.Name, Parent: q.Spec.Parent, Pending: q.Status.Pending, Admitted: q.Status.Admitted,
		Usage: gpus(q.Status.Usage), FairShare: gpus(q.Status.FairShare)}
	for _, r := range q.Spec.Resources {
		if corev1.ResourceName(r.Name) != gpunode.ResourceGPU {
			continue
		}
		if r.Guaranteed != nil {
			out.Guaranteed = r.Guaranteed.String()
		}
		if r.Limit != nil {
			out.Limit = r.Limit.String()
		}
	}
	if c := meta.FindStatusCondition(q.Status.Conditions, v1alpha1.ConditionValid); c != nil && c.Status == metav1.ConditionFalse {
		out.Problem = c.Message
	}
	return out
}

func gpus(rl corev1.ResourceList) string {
	q, ok := rl[gpunode.ResourceGPU]
	if !ok {
		return "0"
	}
	return q.String()
}

// Print writes the human tables; wide adds the GPU holders.
func Print(w io.Writer, st *Status, wide bool) error {
	fmt.Fprintln(w, "NODES")
	t := cliutil.NewTable(w)
	fmt.Fprintln(t, "NAME\tREADY\tMODEL\tGPUS USED/ALLOC/CAP\tMIG\tSHARING")
	for _, n := range st.Nodes {
		model := n.Model
		if n.MemoryMiB > 0 {
			model += " (" + resource.NewQuantity(n.MemoryMiB<<20, resource.BinarySI).String() + ")"
		}
		fmt.Fprintf(t, "%s\t%t\t%s\t%d/%d/%d\t%s\t%s\n", n.Name, n.Ready, dash(model), n.Used, n.Allocatable, n.Capacity, dash(n.MIG), dash(n.Sharing))
	}
	if err := t.Flush(); err != nil {
		return err
	}
	if wide {
		// One row per pod: a node's holders side by side would make the
		// node table too wide to read.
		fmt.Fprintln(w, "\nGPU HOLDERS")
		t = cliutil.NewTable(w)
		fmt.Fprintln(t, "NODE\tPOD\tGPUS\tPART\tFROM")
		for _, n := range st.Nodes {
			for _, h := range n.Holders {
				fmt.Fprintf(t, "%s\t%s\t%s\t%s\t%s\n", n.Name, h.Pod, h.GPUs, dash(h.Part), h.Source)
			}
		}
		if err := t.Flush(); err != nil {
			return err
		}
	}
	fmt.Fprintln(w, "\nQUEUES")
	t = cliutil.NewTable(w)
	fmt.Fprintln(t, "NAME\tPARENT\tGPU USAGE\tGUARANTEED\tLIMIT\tFAIR SHARE\tPENDING\tADMITTED\tPROBLEM")
	for _, q := range st.Queues {
		fmt.Fprintf(t, "%s\t%s\t%s\t%s\t%s\t%s\t%d\t%d\t%s\n", q.Name, dash(q.Parent), q.Usage, dash(q.Guaranteed), dash(q.Limit), q.FairShare, q.Pending, q.Admitted, dash(q.Problem))
	}
	if err := t.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w, "\nWAITING")
	t = cliutil.NewTable(w)
	header := "KIND\tNAMESPACE/NAME\tQUEUE\tPHASE\tPODS\tWHY"
	if wide {
		header += "\tDERIVED FROM"
	}
	fmt.Fprintln(t, header)
	for _, g := range st.Waiting {
		pods := fmt.Sprintf("%d/%d bound", g.Scheduled, g.MinMember)
		if g.Kind == KindPods {
			pods = fmt.Sprintf("%d waiting", g.Count)
		}
		fmt.Fprintf(t, "%s\t%s/%s\t%s\t%s\t%s\t%s", g.Kind, g.Namespace, g.Name, dash(g.Queue), g.Phase, pods, dash(g.Why))
		if wide {
			fmt.Fprintf(t, "\t%s", dash(g.DerivedFrom))
		}
		fmt.Fprintln(t)
	}
	return t.Flush()
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// podGroupOf is the PodGroup a pod names in any dialect gpuplane-scheduler
// reads; a pod whose dialects disagree is listed on its own, with the
// reason the scheduler gave it.
func podGroupOf(p *corev1.Pod) string {
	g, _ := v1alpha1.PodGroupName(p.Labels, p.Annotations)
	return g.Value
}
