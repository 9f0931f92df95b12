package doctor

import (
	"context"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"

	"github.com/gpuplane/gpuplane/api/gpunode"
	"github.com/gpuplane/gpuplane/api/gpupod"
)

// node diagnoses a node.
func (d *doctor) node(ctx context.Context, n *corev1.Node) *Report {
	r := &Report{Kind: "Node", Name: n.Name}
	ready := false
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			ready = c.Status == corev1.ConditionTrue
			if !ready {
				r.add("ready", Fail, fmt.Sprintf("not Ready: %s: %s", c.Reason, c.Message), "look at the node's kubelet: journalctl -u kubelet on "+n.Name)
			}
		}
	}
	if ready {
		r.add("ready", OK, "Ready", "")
	}
	if n.Spec.Unschedulable {
		r.add("cordon", Fail, "cordoned: no new pods are placed on it", "kubectl uncordon "+n.Name)
	}
	// The agent's own word on the node (its GPUReady condition): the
	// message carries the fix after "Fix:".
	agentSaid := false
	for _, c := range n.Status.Conditions {
		if c.Type != gpunode.ConditionGPUReady {
			continue
		}
		agentSaid = true
		detail, fix, _ := strings.Cut(c.Message, " Fix: ")
		if c.Status == corev1.ConditionTrue {
			r.add("agent", OK, detail, "")
		} else {
			r.addReason(c.Reason, "agent", Fail, c.Reason+": "+detail, fix)
		}
	}
	if !agentSaid {
		r.add("agent", Warn, "no "+gpunode.ConditionGPUReady+" condition: gpuplane-agent does not run here, has no API access, or runs with --node-condition=false",
			"kubectl -n gpuplane-system get pods -o wide --field-selector spec.nodeName="+n.Name)
	}

	// The agent's quarantine of failed GPUs (its GPUQuarantine condition).
	for _, c := range n.Status.Conditions {
		if c.Type != gpunode.ConditionGPUQuarantine || c.Status != corev1.ConditionTrue {
			continue
		}
		res, fix := Warn, "the agent returns the GPU once it passes revalidation; 'kubectl describe node "+n.Name+"' shows each step as an event"
		if c.Reason == gpunode.ReasonGPUHeld {
			fix = "the agent resets and revalidates a held GPU again after health.quarantine.retryHeldAfter; a GPU it cannot reset can be reset by hand on the node (nvidia-smi --gpu-reset -i INDEX) and then returns at that retry"
		}
		if slices.ContainsFunc(n.Spec.Taints, func(t corev1.Taint) bool { return t.Key == gpunode.TaintGPUFault }) {
			res = Fail // node-wide: nothing new is placed here
		}
		r.addReason(c.Reason, "quarantine", res, c.Reason+": "+c.Message, fix)
	}

	// GPU resources the agent advertises, against their capacity.
	var names []corev1.ResourceName
	for name := range n.Status.Capacity {
		if strings.HasPrefix(string(name), gpunode.LabelPrefix) {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	if len(names) == 0 {
		r.add("GPU resources", Fail, "advertises no nvidia.com/ resource: the device plugin is not running or not registered with the kubelet",
			"kubectl -n gpuplane-system get pods -o wide --field-selector spec.nodeName="+n.Name+"; the agent's /readyz says what it waits for")
	}
	for _, name := range names {
		capQ, allocQ := n.Status.Capacity[name], n.Status.Allocatable[name]
		c, a := capQ.Value(), allocQ.Value()
		switch {
		case a < c:
			r.add("GPU resources", Warn, fmt.Sprintf("%s: %d of %d allocatable: %d withdrawn as unhealthy", name, a, c, c-a),
				"the agent's gpuplane_device_healthy series and its log name the GPUs and the XID or check that failed")
		default:
			r.add("GPU resources", OK, fmt.Sprintf("%s: %d", name, a), "")
		}
	}

	var taints []string
	for _, t := range n.Spec.Taints {
		if t.Key == gpunode.TaintGPUFault {
			continue // the quarantine check above says what lifts it
		}
		if t.Effect == corev1.TaintEffectNoSchedule || t.Effect == corev1.TaintEffectNoExecute {
			taints = append(taints, fmt.Sprintf("%s=%s:%s", t.Key, t.Value, t.Effect))
		}
	}
	if len(taints) > 0 {
		r.add("taints", Info, "pods must tolerate "+strings.Join(taints, ", "),
			"add tolerations to the pods, or remove a taint: kubectl taint nodes "+n.Name+" KEY:EFFECT-")
	}

	l := n.Labels
	if p := l[gpunode.LabelGPUProduct]; p != "" {
		detail := fmt.Sprintf("%s x %s", l[gpunode.LabelGPUCount], p)
		if m := l[gpunode.LabelGPUMemory]; m != "" {
			detail += ", " + m + " MiB each"
		}
		if s := l[gpunode.LabelGPUSharingStrategy]; s != "" && s != "none" {
			detail += fmt.Sprintf("; shared by %s, %s replicas per GPU", s, l[gpunode.LabelGPUReplicas])
		}
		if s := l[gpunode.LabelMIGStrategy]; s != "" && s != "none" {
			detail += "; MIG strategy " + s
		}
		r.add("GPU labels", OK, detail, "")
	} else if len(names) > 0 {
		r.add("GPU labels", Warn, "no nvidia.com/gpu.product label: pods that select on GPU model or memory find no match here",
			"the agent writes the labels; its log says why it did not (it needs --kubeconfig or in-cluster credentials)")
	}

	// What gpuplane-scheduler said of the node.
	for _, e := range d.warnings(ctx, metav1.NamespaceDefault, "Node", n.Name, 5) {
		fix := ""
		if e.Reason == "InvalidGPUInfo" {
			fix = "gpuplane-scheduler leaves the node out until the value is fixed: correct the label or annotation it names, or restart the node's agent, which writes them"
		}
		res := Warn
		if fix != "" {
			res = Fail
		}
		r.addReason(e.Reason, "event "+e.Reason, res, e.Message, fix)
	}

	d.holders(ctx, r, n)
	r.Summary = "offers GPUs"
	if r.Failed() {
		r.Summary = "offers no GPU to new pods"
	}
	return r
}

// holders lists the pods that hold the node's GPUs, from the node's
// record of what each was given.
func (d *doctor) holders(ctx context.Context, r *Report, n *corev1.Node) {
	list, err := d.client.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("spec.nodeName", n.Name).String()})
	if err != nil {
		return
	}
	var held []string
	for i := range list.Items {
		p := &list.Items[i]
		if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		g := p.Annotations[gpupod.HeldAnnotation]
		if g == "" {
			g = p.Annotations[gpupod.GPUsAnnotation]
		}
		if g != "" {
			held = append(held, fmt.Sprintf("%s/%s (GPU %s)", p.Namespace, p.Name, g))
		}
	}
	if len(held) == 0 {
		r.add("GPU holders", Info, "no pod holds a GPU here", "")
		return
	}
	slices.Sort(held)
	r.add("GPU holders", Info, strings.Join(held, ", "), "")
}
