package adapter

import (
	"cmp"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
)

// Event reasons for what the scheduler finds wrong with a Node.
const (
	// ReasonInvalidGPUInfo: the Node states a GPU capacity the scheduler
	// refuses (out of bounds, unreadable); it is left out of scheduling
	// until fixed.
	ReasonInvalidGPUInfo = "InvalidGPUInfo"
	// ReasonGPUTopologyIgnored: the Node's topology annotation is unusable;
	// the node is scheduled without NVLink topology.
	ReasonGPUTopologyIgnored = "GPUTopologyIgnored"
)

// reportNodes says, once per node and message, which Nodes the scheduler
// leaves out or uses without topology and why: a log line and a Warning
// event on the Node naming the field, and the number left out as a gauge.
func (l *loop) reportNodes() {
	bad, warned := l.cache.problems()
	l.metrics.badNodes.Set(float64(len(bad)))
	if l.nodeReported == nil {
		l.nodeReported = map[string]string{}
	}
	seen := make(map[string]bool, len(bad)+len(warned))
	say := func(p nodeProblem, reason string) {
		seen[p.node.Name] = true
		key := reason + ": " + p.msg
		if l.nodeReported[p.node.Name] == key {
			return
		}
		l.nodeReported[p.node.Name] = key
		if reason == ReasonInvalidGPUInfo {
			l.log.Error(nil, "leaving a node out of scheduling until what it says is fixed", "node", klog.KObj(p.node), "problem", p.msg)
			l.status.event(p.node, corev1.EventTypeWarning, reason, "gpuplane-scheduler leaves this node out: "+p.msg)
			return
		}
		if reason == ReasonGPUsNotRegistered {
			l.log.Info("scheduling a node without the GPUs it offered", "node", klog.KObj(p.node), "problem", p.msg)
		} else {
			l.log.Info("scheduling a node without its GPU topology", "node", klog.KObj(p.node), "problem", p.msg)
		}
		l.status.event(p.node, corev1.EventTypeWarning, reason, p.msg)
	}
	for _, p := range bad {
		say(p, ReasonInvalidGPUInfo)
	}
	for _, p := range warned {
		say(p, cmp.Or(p.reason, ReasonGPUTopologyIgnored))
	}
	for name, msg := range l.cache.nodePoolProblems() {
		seen["nodepool/"+name] = true
		if l.nodeReported["nodepool/"+name] != msg {
			l.nodeReported["nodepool/"+name] = msg
			l.log.Info("a node pool is unreadable: counting it as unlimited and admitting every pod", "nodepool", name, "problem", msg)
		}
	}
	for name := range l.nodeReported {
		if !seen[name] {
			delete(l.nodeReported, name)
		}
	}
}
