package doctor

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/gpuplane/gpuplane/api/gpunode"
	"github.com/gpuplane/gpuplane/api/gpupod"
	"github.com/gpuplane/gpuplane/api/reasons"
	"github.com/gpuplane/gpuplane/api/scheduling/v1alpha1"
	"github.com/gpuplane/gpuplane/internal/cliutil"
	"github.com/gpuplane/gpuplane/internal/cliutil/clusterflags"
)

// Results of a check.
const (
	OK   = "ok"
	Info = "info"
	Warn = "warn"
	Fail = "fail"
)

// Report is the diagnosis of one pod or node.
type Report struct {
	Kind    string  `json:"kind"`
	Name    string  `json:"name"`
	Summary string  `json:"summary"`
	Checks  []Check `json:"checks"`
}

// Check is one finding: what was looked at, how it stands, and the command
// or change that fixes it when it does not.
type Check struct {
	Name   string `json:"name"`
	Result string `json:"result"`
	Detail string `json:"detail"`
	Fix    string `json:"fix,omitempty"`
	// Docs is the troubleshooting entry of the reason the check found,
	// when gpuplane wrote it.
	Docs string `json:"docs,omitempty"`
}

func (r *Report) add(name, result, detail, fix string) {
	r.Checks = append(r.Checks, Check{Name: name, Result: result, Detail: detail, Fix: fix})
}

// addReason is add for a check that reports a reason gpuplane wrote (a
// condition's or an event's): the check links its troubleshooting entry.
func (r *Report) addReason(reason, name, result, detail, fix string) {
	c := Check{Name: name, Result: result, Detail: detail, Fix: fix}
	if reasons.Known(reason) {
		c.Docs = reasons.URL(reason)
	}
	r.Checks = append(r.Checks, c)
}

// Failed reports whether any check failed.
func (r *Report) Failed() bool {
	return slices.ContainsFunc(r.Checks, func(c Check) bool { return c.Result == Fail })
}

type options struct {
	output  *cliutil.Format
	cluster *clusterflags.Cluster
}

// NewCommand returns the doctor command.
func NewCommand() *cobra.Command {
	o := &options{}
	cmd := &cobra.Command{
		Use:   "doctor [pod] [NAMESPACE/]NAME | node NAME | cluster",
		Short: "Explain why a pod has no GPU, or why a node offers none, and how to fix it",
		Long: `doctor reads a pod or a node through the API server and goes through what
decides whether it gets (or offers) GPUs, one check a line, each failing
one with the command that fixes it. A bare NAME is a pod in --namespace
when one exists, else a node; NAMESPACE/NAME is a pod in NAMESPACE.

A pod's checks:
` + checksHelp(podChecks) + `
A node's checks:
` + checksHelp(nodeChecks) + `
The cluster's checks (doctor cluster): its Kubernetes version against the
supported range (1.34 to 1.37), and each optional API gpuplane uses (DRA,
the Workload API, MutatingAdmissionPolicy): served, or off and why.

Each check is ok, info, warn or fail; the exit status is 1 when one fails.`,
		Example: `  gpuplane doctor trainer-0 -n ml-team
  gpuplane doctor pod ml-team/trainer-0
  gpuplane doctor node gpu-node-3
  gpuplane doctor gpu-node-3 -o json
  gpuplane doctor cluster`,
		Args: cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			kind, name := "", args[0]
			if len(args) == 1 && name == "cluster" {
				kind = "cluster"
			}
			if len(args) == 2 {
				kind, name = args[0], args[1]
				if kind != "pod" && kind != "node" {
					return cliutil.Usagef("%q: want pod NAME or node NAME", kind)
				}
			}
			_, client, dyn, err := o.cluster.Clients()
			if err != nil {
				return err
			}
			ns, explicit, err := o.cluster.Namespace()
			if err != nil {
				return err
			}
			if pns, pname, ok := strings.Cut(name, "/"); ok && kind != "node" {
				switch {
				case pns == "" || pname == "" || strings.Contains(pname, "/"):
					return cliutil.Usagef("%q: want NAME or NAMESPACE/NAME", name)
				case explicit && pns != ns:
					return cliutil.Usagef("%q names namespace %s, --namespace %s: give one", name, pns, ns)
				}
				kind, ns, name = "pod", pns, pname
			}
			d := &doctor{client: client, dyn: dyn}
			rep, err := d.diagnose(cmd.Context(), kind, ns, name)
			if err != nil {
				return err
			}
			if o.output.Data() {
				err = cliutil.Encode(cmd.OutOrStdout(), *o.output, rep)
			} else {
				err = Print(cmd.OutOrStdout(), rep, *o.output == cliutil.Wide)
			}
			if err == nil && rep.Failed() {
				return errFailed
			}
			return err
		},
	}
	o.output = cliutil.AddOutputFlag(cmd, cliutil.Table, "wide puts each check's fix in a FIX column")
	o.cluster = clusterflags.Add(cmd, clusterflags.Namespaced)
	return cmd
}

// errFailed makes the exit status 1 once the report is printed.
var errFailed = &cliutil.SilentError{Err: errors.New("a check failed")}

type doctor struct {
	client kubernetes.Interface
	dyn    dynamic.Interface
}

// diagnose picks the pod or node and diagnoses it.
func (d *doctor) diagnose(ctx context.Context, kind, ns, name string) (*Report, error) {
	if kind == "cluster" {
		return d.cluster()
	}
	if kind != "node" {
		p, err := d.client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		switch {
		case err == nil:
			return d.pod(ctx, p), nil
		case kind == "pod" || !apierrors.IsNotFound(err):
			return nil, fmt.Errorf("reading pod %s/%s: %w", ns, name, err)
		}
	}
	n, err := d.client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) && kind == "" {
		return nil, fmt.Errorf("no pod %s in namespace %s and no node %s (give -n NAMESPACE for a pod elsewhere)", name, ns, name)
	}
	if err != nil {
		return nil, fmt.Errorf("reading node %s: %w", name, err)
	}
	return d.node(ctx, n), nil
}

// warnings returns the newest warning events of an object, at most n.
func (d *doctor) warnings(ctx context.Context, ns, kind, name string, n int) []corev1.Event {
	sel := fields.Set{"involvedObject.kind": kind, "involvedObject.name": name, "type": corev1.EventTypeWarning}.AsSelector().String()
	list, err := d.client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: sel})
	if err != nil {
		return nil
	}
	evs := list.Items
	slices.SortFunc(evs, func(a, b corev1.Event) int { return cmp.Compare(lastSeen(b), lastSeen(a)) })
	return evs[:min(n, len(evs))]
}

func lastSeen(e corev1.Event) int64 {
	t := e.LastTimestamp.Time
	if t.IsZero() {
		t = e.EventTime.Time
	}
	if t.IsZero() {
		t = e.CreationTimestamp.Time
	}
	return t.UnixNano()
}

// gpuResources sums the nvidia.com/ resources a pod's containers limit.
func gpuResources(p *corev1.Pod) map[corev1.ResourceName]int64 {
	out := map[corev1.ResourceName]int64{}
	for _, cs := range [][]corev1.Container{p.Spec.InitContainers, p.Spec.Containers} {
		for i := range cs {
			for name, q := range cs[i].Resources.Limits {
				if strings.HasPrefix(string(name), "nvidia.com/") {
					out[name] += q.Value()
				}
			}
		}
	}
	return out
}

func describeResources(rs map[corev1.ResourceName]int64) string {
	names := slices.Sorted(func(yield func(corev1.ResourceName) bool) {
		for k := range rs {
			if !yield(k) {
				return
			}
		}
	})
	parts := make([]string, len(names))
	for i, n := range names {
		parts[i] = fmt.Sprintf("%s: %d", n, rs[n])
	}
	return strings.Join(parts, ", ")
}

// isHAMi reports whether a pod asks in HAMi's resources.
func isHAMi(rs map[corev1.ResourceName]int64) bool {
	return slices.ContainsFunc([]corev1.ResourceName{gpupod.HAMiMemory, gpupod.HAMiMemoryPercentage, gpupod.HAMiCores}, func(n corev1.ResourceName) bool { return rs[n] > 0 })
}

// pod diagnoses a pod.
func (d *doctor) pod(ctx context.Context, p *corev1.Pod) *Report {
	r := &Report{Kind: "Pod", Name: p.Namespace + "/" + p.Name}
	rs := gpuResources(p)
	frac, asked, fracErr := gpupod.ReadFraction(p.Annotations, corev1.ResourceList{})
	devices := int64(0)
	for name, n := range rs {
		if name == gpunode.ResourceGPU || name == gpunode.ResourceGPUShared || strings.HasPrefix(string(name), gpunode.MIGResourcePrefix) {
			devices += n
		}
	}
	switch {
	case fracErr != nil:
		r.add("GPU request", Fail, fracErr.Error(), "correct the annotation")
	case asked && devices == 0:
		r.add("GPU request", Fail, fmt.Sprintf("asks for part of a GPU (%s) but for no GPU device, so the kubelet can give it no GPU", frac.Source),
			"kubectl apply -f deploy/admission/gpu-fraction-device.yaml, then recreate the pod (or add nvidia.com/gpu: 1 to the limits of the container that uses the GPU)")
	case len(rs) == 0 && !asked:
		r.add("GPU request", Info, "asks for no GPU: it gets none, and sees none where deploy/admission/hide-gpus.yaml is installed", "")
	default:
		detail := describeResources(rs)
		if asked {
			detail += fmt.Sprintf("; part of a GPU by %s", frac.Source)
		}
		r.add("GPU request", OK, detail, "")
	}

	sched := p.Spec.SchedulerName
	switch {
	case sched == v1alpha1.SchedulerName:
		r.add("scheduler", OK, sched, "")
	case p.Spec.NodeName != "":
		r.add("scheduler", Info, fmt.Sprintf("%s placed it; gpuplane's queues, gangs and GPU choice did not apply", sched), "")
	case sched == "kai-scheduler":
		r.add("scheduler", Fail, "written for KAI Scheduler (schedulerName kai-scheduler), which does not run here",
			"kubectl apply -f deploy/admission/kai-pods.yaml, then recreate the pod: it goes to gpuplane-scheduler")
	case (sched == corev1.DefaultSchedulerName || sched == "hami-scheduler") && isHAMi(rs):
		r.add("scheduler", Fail, fmt.Sprintf("asks in HAMi's resources, which no node offers, and names %s", sched),
			"kubectl apply -f deploy/admission/hami-pods.yaml, then recreate the pod: it goes to gpuplane-scheduler")
	default:
		r.add("scheduler", Info, fmt.Sprintf("%s places it: gpuplane's queues, gangs and GPU choice do not apply", sched),
			"set spec.schedulerName: gpuplane-scheduler for them")
	}

	d.placement(ctx, r, p)
	d.gang(ctx, r, p)
	d.queue(ctx, r, p)
	for _, e := range d.warnings(ctx, p.Namespace, "Pod", p.Name, 5) {
		r.addReason(e.Reason, "event "+e.Reason, Warn, e.Message, "")
	}
	r.Summary = summary(r, p)
	return r
}

func summary(r *Report, p *corev1.Pod) string {
	switch {
	case p.Spec.NodeName != "":
		return fmt.Sprintf("%s on %s", p.Status.Phase, p.Spec.NodeName)
	case r.Failed():
		return "not placed"
	}
	return "waiting"
}

// placement says where the pod went and whether the node gave it the GPUs
// the scheduler chose, or why it waits.
func (d *doctor) placement(ctx context.Context, r *Report, p *corev1.Pod) {
	if p.Spec.NodeName != "" {
		chosen, held := p.Annotations[gpupod.GPUsAnnotation], p.Annotations[gpupod.HeldAnnotation]
		detail := "on " + p.Spec.NodeName
		switch {
		case chosen != "" && held != "" && !sameGPUs(chosen, held):
			r.add("placement", Warn, fmt.Sprintf("%s: gpuplane-scheduler chose GPUs %s, the node gave %s (they were gone or taken; the scheduler follows the node)", detail, chosen, held), "")
		case held != "":
			r.add("placement", OK, fmt.Sprintf("%s, holding GPUs %s (the node's record)", detail, held), "")
		case chosen != "":
			r.add("placement", OK, fmt.Sprintf("%s, GPUs %s chosen by gpuplane-scheduler (the node has not recorded what it gave yet)", detail, chosen), "")
		default:
			r.add("placement", OK, detail, "")
		}
		if p.Status.Phase == corev1.PodFailed && p.Status.Reason != "" {
			r.add("admission", Fail, fmt.Sprintf("the kubelet refused it: %s: %s", p.Status.Reason, p.Status.Message),
				fmt.Sprintf("gpuplane doctor node %s", p.Spec.NodeName))
		}
		return
	}
	var cond *corev1.PodCondition
	for i := range p.Status.Conditions {
		if c := &p.Status.Conditions[i]; c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse {
			cond = c
		}
	}
	if cond == nil {
		fix := ""
		if p.Spec.SchedulerName == v1alpha1.SchedulerName {
			fix = "check that gpuplane-scheduler runs: kubectl -n gpuplane-system get pods -l app.kubernetes.io/name=gpuplane-scheduler"
		}
		r.add("placement", Warn, "not placed, and no scheduler has said why yet", fix)
		return
	}
	result, fix := Fail, fixFor(cond.Reason, p)
	switch cond.Reason {
	case "WaitingForPreemption", "QueueLimit", "NotEnoughPods":
		// Waiting its turn: nothing is wrong.
		result = Info
	}
	r.addReason(cond.Reason, "placement", result, fmt.Sprintf("not placed: %s: %s", cond.Reason, cond.Message), fix)
	if note := gateNote(p, cond.Reason); note != "" {
		r.add("autoscaling", Info, note, "")
	}
}

// gateNote says whether autoscalers would add nodes for a waiting pod:
// they skip pods held by a scheduling gate and buy only for pods whose
// PodScheduled reason is Unschedulable.
func gateNote(p *corev1.Pod, reason string) string {
	ours := slices.ContainsFunc(p.Spec.SchedulingGates, func(g corev1.PodSchedulingGate) bool { return g.Name == v1alpha1.SchedulingGate })
	switch {
	case ours && len(p.Spec.SchedulingGates) == 1:
		return "held by gpuplane's scheduling gate " + v1alpha1.SchedulingGate + ": autoscalers add no node for it, since more nodes would not start it; gpuplane-scheduler lifts the gate when it binds the pod or when only more nodes would"
	case len(p.Spec.SchedulingGates) > 0:
		for _, g := range p.Spec.SchedulingGates {
			if g.Name != v1alpha1.SchedulingGate {
				return fmt.Sprintf("held by scheduling gate %s, which another controller must lift first", g.Name)
			}
		}
	case reason == corev1.PodReasonUnschedulable:
		return "more nodes would start it: an autoscaler (Karpenter, Cluster Autoscaler) may add them"
	}
	return ""
}

// fixFor is the command that helps with a reason gpuplane-scheduler gave.
// The scheduler's messages for bad input already say what to change.
func fixFor(reason string, p *corev1.Pod) string {
	switch reason {
	case "DoesNotFit", corev1.PodReasonUnschedulable:
		return "gpuplane status -o wide shows each node's free GPUs; gpuplane doctor node NAME explains a node you expected it on"
	case "QueueLimit":
		return "kubectl get queues -o yaml: the queue's status has its usage against spec.resources[].limit; raise the limit or wait for its work to finish"
	case "ExceedsQueueLimit":
		return "waiting cannot help: lower the PodGroup's spec.minMember (or the workload's size it is derived from) or the pods' requests, or raise the queue's spec.resources[].limit (kubectl get queues -o yaml)"
	case "NotEnoughPods":
		return "kubectl get pods -l " + v1alpha1.PodGroupLabel + ": create the gang's missing pods, or lower the PodGroup's spec.minMember"
	case corev1.PodReasonSchedulingGated:
		return "check that gpuplane-scheduler runs (kubectl -n gpuplane-system get pods -l app.kubernetes.io/name=gpuplane-scheduler); it says why the pod waits within a cycle"
	case "ExceedsClusterCapacity":
		return "waiting cannot help until nodes are added: gpuplane status shows the cluster's GPUs; lower the gang's spec.minMember or the pods' requests"
	case "VictimsBelowMinRuntime":
		return "the pods it would preempt or reclaim have run less than their minimum runtime (their queue's spec.minRuntime or their priority class's annotation); it starts when the first reaches it, at the time the message gives"
	case "PreemptionDisabled", "ReclaimDisabled":
		return "the pod's queue forbids it (spec.preemption / spec.reclaim: Never); it waits for room to free up"
	case "UnknownQueue", "QueueNotLeaf":
		return "kubectl get queues; set the pod's " + v1alpha1.QueueLabel + " label to a leaf queue"
	case "QueueNotAllowed":
		return "kubectl get queues -o custom-columns=NAME:.metadata.name,NAMESPACES:.spec.namespaceSelector; submit to a queue that admits namespace " + p.Namespace
	case "GroupingFailed":
		return "kubectl get groupingrules; fix the workload's field, the rule's expression or the Volcano PodGroup's field the message names (the pod is placed once its group can be made)"
	case "InvalidTopology", "TopologyMismatch":
		return "kubectl get topologies.scheduling.gpuplane.io (and Kueue's or KAI's topologies); fix the PodGroup's spec.topology or the topology annotations the message names, so every pod asks the same levels of one Topology"
	case "ConflictingQueues", "ConflictingPodGroups", "QueueMismatch":
		return "kubectl get pod " + p.Name + " -n " + p.Namespace + " -o yaml: keep one queue (pod group) label or annotation, or make them agree"
	}
	return ""
}

// sameGPUs compares two GPU records by the GPU indexes they name.
func sameGPUs(a, b string) bool {
	x, err1 := gpupod.ParseGPUs(a, gpupod.MaxGPUsChosen)
	y, err2 := gpupod.ParseGPUs(b, gpupod.MaxGPUsChosen)
	if err1 != nil || err2 != nil || len(x) != len(y) {
		return a == b
	}
	for i := range x {
		if x[i].Index != y[i].Index {
			return false
		}
	}
	return true
}

// gang shows the pod's PodGroup, when it names one.
func (d *doctor) gang(ctx context.Context, r *Report, p *corev1.Pod) {
	named, err := v1alpha1.PodGroupName(p.Labels, p.Annotations)
	if err != nil {
		r.add("gang", Fail, err.Error(), "kubectl label/annotate the pod so that one pod group is named")
		return
	}
	name := named.Value
	if name == "" {
		return
	}
	u, err := d.dyn.Resource(v1alpha1.PodGroupsResource).Namespace(p.Namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		if apierrors.IsNotFound(err) || meta.IsNoMatchError(err) {
			r.add("gang", Fail, fmt.Sprintf("PodGroup %s (named by the pod's %s) does not exist", name, named.From), fmt.Sprintf("create PodGroup %s in namespace %s, or remove the pod's %s", name, p.Namespace, named.From))
		}
		return
	}
	var g v1alpha1.PodGroup
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &g); err != nil {
		return
	}
	detail := fmt.Sprintf("PodGroup %s: minMember %d, phase %s", name, g.Spec.MinMember, cmp.Or(string(g.Status.Phase), "Unknown"))
	if from := g.Annotations[v1alpha1.DerivedFromAnnotation]; from != "" {
		detail += "; derived from " + from
	}
	result := OK
	if c := meta.FindStatusCondition(g.Status.Conditions, v1alpha1.ConditionSchedulable); c != nil && c.Status == metav1.ConditionFalse {
		detail += "; " + c.Message
		result = Warn
	}
	if c := meta.FindStatusCondition(g.Status.Conditions, v1alpha1.ConditionValid); c != nil && c.Status == metav1.ConditionFalse {
		detail += "; invalid: " + c.Message
		result = Fail
	}
	r.add("gang", result, detail, "")
}

// queue shows the Queue the pod (or its PodGroup) names, with its usage.
func (d *doctor) queue(ctx context.Context, r *Report, p *corev1.Pod) {
	named, err := v1alpha1.PodQueueName(p.Labels, p.Annotations)
	if err != nil {
		r.add("queue", Fail, err.Error(), "kubectl label/annotate the pod so that one queue is named")
		return
	}
	name := named.Value
	if name == "" {
		return
	}
	u, err := d.dyn.Resource(v1alpha1.QueuesResource).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		if apierrors.IsNotFound(err) {
			r.add("queue", Fail, fmt.Sprintf("Queue %s (named by the pod's %s) does not exist", name, named.From), "kubectl get queues; create it or set the pod's "+v1alpha1.QueueLabel+" label to an existing one")
		}
		return
	}
	var q v1alpha1.Queue
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &q); err != nil {
		return
	}
	var used []string
	for _, name := range slices.Sorted(maps.Keys(q.Status.Usage)) {
		v := q.Status.Usage[name]
		used = append(used, fmt.Sprintf("%s %s used", name, v.String()))
	}
	if q.Status.Pending > 0 {
		used = append(used, fmt.Sprintf("%d pod groups waiting", q.Status.Pending))
	}
	for _, res := range q.Spec.Resources {
		if res.Guaranteed != nil {
			used = append(used, fmt.Sprintf("%s %s guaranteed", res.Name, res.Guaranteed.String()))
		}
		if res.Limit != nil {
			used = append(used, fmt.Sprintf("%s %s limit", res.Name, res.Limit.String()))
		}
	}
	detail := "Queue " + name
	if len(used) > 0 {
		detail += ": " + strings.Join(used, ", ")
	}
	result := OK
	if c := meta.FindStatusCondition(q.Status.Conditions, v1alpha1.ConditionValid); c != nil && c.Status == metav1.ConditionFalse {
		detail += "; invalid: " + c.Message
		result = Fail
	}
	r.add("queue", result, detail, "")
}

// Print writes a report as a table of checks, then the fixes; wide puts
// the fixes in a column of the table.
func Print(w io.Writer, r *Report, wide bool) error {
	fmt.Fprintf(w, "%s %s: %s\n\n", strings.ToUpper(r.Kind), r.Name, r.Summary)
	tw := cliutil.NewTable(w)
	if wide {
		fmt.Fprintln(tw, "CHECK\tRESULT\tDETAIL\tFIX")
	} else {
		fmt.Fprintln(tw, "CHECK\tRESULT\tDETAIL")
	}
	for _, c := range r.Checks {
		if wide {
			fix := "-"
			if c.Fix != "" && c.Result != OK {
				fix = c.Fix
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", c.Name, c.Result, c.Detail, fix)
			continue
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\n", c.Name, c.Result, c.Detail)
	}
	if err := tw.Flush(); err != nil || wide {
		return err
	}
	first := true
	for _, c := range r.Checks {
		if (c.Fix == "" && c.Docs == "") || c.Result == OK {
			continue
		}
		if first {
			fmt.Fprintln(w, "\nTO FIX")
			first = false
		}
		switch {
		case c.Fix == "":
			fmt.Fprintf(w, "  %s: see %s\n", c.Name, c.Docs)
		case c.Docs == "":
			fmt.Fprintf(w, "  %s: %s\n", c.Name, c.Fix)
		default:
			fmt.Fprintf(w, "  %s: %s\n    see %s\n", c.Name, c.Fix, c.Docs)
		}
	}
	return nil
}
