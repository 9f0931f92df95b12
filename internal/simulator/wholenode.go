package simulator

import (
	"github.com/gpuplane/gpuplane/internal/scheduler/model"
	"github.com/gpuplane/gpuplane/internal/scheduler/placement"
)

// needsWholeNode reports whether a pod can only run by taking every GPU
// of a node: it asks for whole GPUs, some node holds it, and no node with
// more GPUs than it asks for does. Such pods wait for a node to empty,
// which scattered free GPUs never give them.
func needsWholeNode(nodes []model.Node, req *model.Request) bool {
	if req.GPUs <= 0 || len(req.FirstOf) > 0 {
		return false
	}
	fits := false
	for i := range nodes {
		n := &nodes[i]
		if len(n.GPUs) < req.GPUs || !placement.StaticFits(n, req) {
			continue
		}
		if len(n.GPUs) > req.GPUs {
			return false
		}
		fits = true
	}
	return fits
}

// wholeNodeWaits fills the event stats of the jobs that need whole nodes
// (a job does when one of its pods does, needsWholeNode): how many there
// are and their queueing delay, creation to first start, over those that
// started.
func wholeNodeWaits(nodes []model.Node, pods []*simPod, ev *EventStats) {
	type job struct {
		whole            bool
		created, started int64
	}
	jobs := map[string]*job{}
	var order []string
	for _, p := range pods {
		j := jobs[p.group]
		if j == nil {
			j = &job{created: p.tp.CreatedAt, started: -1}
			jobs[p.group] = j
			order = append(order, p.group)
		}
		j.created = min(j.created, p.tp.CreatedAt)
		if p.started >= 0 && (j.started < 0 || p.started < j.started) {
			j.started = p.started
		}
		j.whole = j.whole || needsWholeNode(nodes, &p.tp.Request)
	}
	var waits []float64
	for _, g := range order {
		j := jobs[g]
		if !j.whole {
			continue
		}
		ev.WholeNodeJobs++
		if j.started >= 0 {
			waits = append(waits, float64(j.started-j.created))
		}
	}
	ev.WholeNodeWaitP50, ev.WholeNodeWaitP95 = percentile(waits, 0.5), percentile(waits, 0.95)
}
