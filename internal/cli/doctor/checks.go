package doctor

import "strings"

// checkDoc is one check doctor runs, as its help lists it: the name it
// prints in CHECK and what it looks at. A check the code adds is listed
// here too (TestHelpListsEveryCheck fails otherwise).
type checkDoc struct {
	name, what string
}

// podChecks are the checks of a pod, in the order they print.
var podChecks = []checkDoc{
	{"GPU request", "the nvidia.com/ resources its containers ask for, a part of a GPU by annotation (and whether a GPU device backs it), HAMi's resources"},
	{"scheduler", "which scheduler places it: gpuplane-scheduler, another one, or one that does not run here (KAI's, HAMi's)"},
	{"placement", "the node it is on and whether the node gave the GPUs gpuplane-scheduler chose (gpuplane.io/gpus against gpuplane.io/gpus-held), or why it waits (its PodScheduled condition, in the scheduler's words)"},
	{"admission", "whether the kubelet refused it (a Failed pod with a reason)"},
	{"gang", "its PodGroup: that it exists, minMember, phase, where it was derived from, its Schedulable and Valid conditions"},
	{"queue", "its Queue: that it exists, its usage, guarantee and limit, waiting pod groups, its Valid condition"},
	{"event REASON", "its newest warning events (at most 5)"},
}

// nodeChecks are the checks of a node, in the order they print.
var nodeChecks = []checkDoc{
	{"ready", "the Ready condition"},
	{"cordon", "whether it is cordoned (spec.unschedulable)"},
	{"agent", "gpuplane-agent's GPUReady condition, with the fix it gives"},
	{"quarantine", "GPUs the agent took out of service (the GPUQuarantine condition; a fail when the gpuplane.io/gpu-fault taint makes it node-wide)"},
	{"GPU resources", "each nvidia.com/ resource it advertises, allocatable against capacity (GPUs withdrawn as unhealthy)"},
	{"taints", "NoSchedule and NoExecute taints pods must tolerate"},
	{"GPU labels", "the agent's feature labels: GPU model, count, memory, sharing and MIG strategy"},
	{"event REASON", "its newest warning events (at most 5), such as gpuplane-scheduler's InvalidGPUInfo"},
	{"GPU holders", "the pods that hold its GPUs, by the node's record (gpuplane.io/gpus-held) or the scheduler's choice"},
}

// documented reports whether a check name printed is one of docs.
func documented(docs []checkDoc, name string) bool {
	for _, d := range docs {
		if d.name == name || (strings.HasSuffix(d.name, " REASON") && strings.HasPrefix(name, strings.TrimSuffix(d.name, "REASON"))) {
			return true
		}
	}
	return false
}

// checksHelp lists checks for --help.
func checksHelp(docs []checkDoc) string {
	var b strings.Builder
	for _, d := range docs {
		b.WriteString("  " + d.name + strings.Repeat(" ", max(1, 15-len(d.name))) + wrap(d.what, 17, 76) + "\n")
	}
	return b.String()
}

// wrap breaks s into lines of at most width columns, lines after the first
// indented by indent spaces.
func wrap(s string, indent, width int) string {
	var b strings.Builder
	col := indent
	for i, w := range strings.Fields(s) {
		if i > 0 && col+1+len(w) > width {
			b.WriteString("\n" + strings.Repeat(" ", indent))
			col = indent
		} else if i > 0 {
			b.WriteByte(' ')
			col++
		}
		b.WriteString(w)
		col += len(w)
	}
	return b.String()
}
