package simulator

// EventSummary aggregates the event runs of one policy (or scheduler
// configuration) over seeds: every number is the mean over the runs.
type EventSummary struct {
	Policy            string  `json:"policy"`
	Runs              int     `json:"runs"`
	Jobs              float64 `json:"jobs"`
	JobsCompleted     float64 `json:"jobsCompleted"`
	JCTMean           float64 `json:"jctMean"`
	JCTP50            float64 `json:"jctP50"`
	JCTP95            float64 `json:"jctP95"`
	WaitP50           float64 `json:"waitP50"`
	WaitP95           float64 `json:"waitP95"`
	WholeNodeJobs     float64 `json:"wholeNodeJobs"`
	WholeNodeWaitP50  float64 `json:"wholeNodeWaitP50"`
	WholeNodeWaitP95  float64 `json:"wholeNodeWaitP95"`
	FairnessDeviation float64 `json:"fairnessDeviation"`
	JainOverTime      float64 `json:"jainOverTime"`
	LostGPUHours      float64 `json:"lostGpuHours"`
	LostGPUHoursMoves float64 `json:"lostGpuHoursMoves"`
	Preemptions       float64 `json:"preemptions"`
	Moves             float64 `json:"moves"`
	MeanUtilization   float64 `json:"meanUtilization"`
	GPUHours          float64 `json:"gpuHours"`
	// Node loss (EventStats): nodes reclaimed, pods and groups hit,
	// elastic groups that shrank, GPU-hours lost to it.
	NodesLost            float64 `json:"nodesLost,omitempty"`
	NodeLossPods         float64 `json:"nodeLossPods,omitempty"`
	NodeLossGangs        float64 `json:"nodeLossGangs,omitempty"`
	NodeLossShrunk       float64 `json:"nodeLossShrunk,omitempty"`
	LostGPUHoursNodeLoss float64 `json:"lostGpuHoursNodeLoss,omitempty"`
	// Queues are the per-queue means, in the runs' queue order.
	Queues []QueueStats `json:"queues"`
}

// SummarizeEvent groups event results by policy, in the order policies
// first appear, and averages them over seeds. Per-queue means cover the
// queues of the policy's first run; count fields are rounded down.
func SummarizeEvent(results []*Result) []EventSummary {
	var order []string
	by := map[string][]*Result{}
	for _, r := range results {
		if r.Event == nil {
			continue
		}
		k := r.Policy
		if r.TopologyPolicy != "" {
			k += "/" + r.TopologyPolicy
		}
		if _, ok := by[k]; !ok {
			order = append(order, k)
		}
		by[k] = append(by[k], r)
	}
	out := make([]EventSummary, 0, len(order))
	for _, k := range order {
		rs := by[k]
		n := float64(len(rs))
		s := EventSummary{Policy: k, Runs: len(rs)}
		for _, r := range rs {
			e := r.Event
			s.Jobs += float64(e.Jobs) / n
			s.JobsCompleted += float64(e.JobsCompleted) / n
			s.JCTMean += e.JCTMean / n
			s.JCTP50 += e.JCTP50 / n
			s.JCTP95 += e.JCTP95 / n
			s.WaitP50 += e.WaitP50 / n
			s.WaitP95 += e.WaitP95 / n
			s.WholeNodeJobs += float64(e.WholeNodeJobs) / n
			s.WholeNodeWaitP50 += e.WholeNodeWaitP50 / n
			s.WholeNodeWaitP95 += e.WholeNodeWaitP95 / n
			s.FairnessDeviation += e.FairnessDeviation / n
			s.JainOverTime += e.JainOverTime / n
			s.LostGPUHours += e.LostGPUHours / n
			s.LostGPUHoursMoves += e.LostGPUHoursMoves / n
			s.Preemptions += float64(e.Preemptions) / n
			s.Moves += float64(e.Moves) / n
			s.MeanUtilization += e.MeanUtilization / n
			s.GPUHours += e.GPUHours / n
			s.NodesLost += float64(e.NodesLost) / n
			s.NodeLossPods += float64(e.NodeLossPods) / n
			s.NodeLossGangs += float64(e.NodeLossGangs) / n
			s.NodeLossShrunk += float64(e.NodeLossShrunk) / n
			s.LostGPUHoursNodeLoss += e.LostGPUHoursNodeLoss / n
		}
		for _, q0 := range rs[0].Event.Queues {
			m := QueueStats{Queue: q0.Queue}
			var pods, jobs, done, pre float64
			for _, r := range rs {
				for _, q := range r.Event.Queues {
					if q.Queue != q0.Queue {
						continue
					}
					pods += float64(q.Pods) / n
					jobs += float64(q.Jobs) / n
					done += float64(q.JobsCompleted) / n
					pre += float64(q.Preemptions) / n
					m.JCTMean += q.JCTMean / n
					m.JCTP50 += q.JCTP50 / n
					m.JCTP95 += q.JCTP95 / n
					m.WaitP50 += q.WaitP50 / n
					m.WaitP95 += q.WaitP95 / n
					m.Share += q.Share / n
					m.Entitlement += q.Entitlement / n
					m.FairnessDeviation += q.FairnessDeviation / n
					m.LostGPUHours += q.LostGPUHours / n
				}
			}
			m.Pods, m.Jobs, m.JobsCompleted, m.Preemptions = int(pods), int(jobs), int(done), int(pre)
			s.Queues = append(s.Queues, m)
		}
		out = append(out, s)
	}
	return out
}
