package simulator

// QueueStats are one queue's event-mode numbers; times are in trace
// seconds. A job is a pod group, a pod without one is a job alone: its
// wait runs from its creation to its first pod's first start, its
// completion time (JCT) from its creation to its last pod's finish.
type QueueStats struct {
	Queue string `json:"queue"`
	Pods  int    `json:"pods"`
	// Started pods ran at least once; Completed pods finished.
	Started   int `json:"started"`
	Completed int `json:"completed"`
	// Jobs arrived; JobsCompleted finished (every pod).
	Jobs          int `json:"jobs"`
	JobsCompleted int `json:"jobsCompleted"`
	// Queueing delay and completion time over the queue's jobs: those
	// that started, those that finished.
	WaitP50 float64 `json:"waitP50"`
	WaitP90 float64 `json:"waitP90"`
	WaitP95 float64 `json:"waitP95"`
	WaitP99 float64 `json:"waitP99"`
	JCTMean float64 `json:"jctMean"`
	JCTP50  float64 `json:"jctP50"`
	JCTP90  float64 `json:"jctP90"`
	JCTP95  float64 `json:"jctP95"`
	JCTP99  float64 `json:"jctP99"`
	// Share is the queue's time-averaged share of allocated milli-GPU and
	// Entitlement its share of guaranteed milli-GPU among queues.
	Share       float64 `json:"share"`
	Entitlement float64 `json:"entitlement"`
	// FairnessDeviation is the time average of |GPUs used - GPUs
	// entitled| over the cluster's GPUs (fairness.go).
	FairnessDeviation float64 `json:"fairnessDeviation"`
	// Preemptions counts the queue's pods evicted, moves aside.
	Preemptions int `json:"preemptions"`
	// LostGPUHours is GPUs x time since the last checkpoint, summed over
	// the queue's evicted pods (moves included).
	LostGPUHours float64 `json:"lostGpuHours"`
}

// UtilPoint is the cluster's milli-GPU allocation at a virtual time.
type UtilPoint struct {
	Time                    int64   `json:"time"`
	MilliGPUAllocationRatio float64 `json:"milliGpuAllocationRatio"`
	// ByQueue is each queue's part of it, with more than one queue.
	ByQueue map[string]float64 `json:"byQueue,omitempty"`
}

// EventStats are the event-mode results.
type EventStats struct {
	Queues      []QueueStats `json:"queues"`
	Utilization []UtilPoint  `json:"utilization,omitempty"`
	// MeanUtilization is the time-averaged milli-GPU allocation ratio;
	// GPUHours the GPU-hours allocated over the run, the measure that
	// work lost to evictions is a part of.
	MeanUtilization float64 `json:"meanUtilization"`
	GPUHours        float64 `json:"gpuHours"`
	// Jobs and JobsCompleted over all queues; the wait and completion
	// times as QueueStats counts them, over every queue's jobs.
	Jobs          int     `json:"jobs"`
	JobsCompleted int     `json:"jobsCompleted"`
	JCTMean       float64 `json:"jctMean"`
	JCTP50        float64 `json:"jctP50"`
	JCTP95        float64 `json:"jctP95"`
	WaitP50       float64 `json:"waitP50"`
	WaitP95       float64 `json:"waitP95"`
	// WholeNodeJobs need a whole node for a pod (one that asks for every
	// GPU of any node it fits), the jobs defragmentation serves; their
	// queueing delay as WaitP50 and WaitP95 count it.
	WholeNodeJobs    int     `json:"wholeNodeJobs"`
	WholeNodeWaitP50 float64 `json:"wholeNodeWaitP50"`
	WholeNodeWaitP95 float64 `json:"wholeNodeWaitP95"`
	// Preemptions counts evicted pods, moves aside; Moves counts groups
	// evicted and placed again by the same cycle (defragmentation).
	Preemptions int `json:"preemptions"`
	Moves       int `json:"moves"`
	// LostGPUHours is GPUs x time since the last checkpoint, summed over
	// every pod evicted by preemption, reclaim or a move (node loss apart).
	// LostGPUHoursMoves is the part of it that moves lost: what
	// defragmentation itself cost the work it moved.
	LostGPUHours      float64 `json:"lostGpuHours"`
	LostGPUHoursMoves float64 `json:"lostGpuHoursMoves"`
	Cycles            int     `json:"cycles"`
	// JainFairness is Jain's index over queues of share/entitlement.
	JainFairness float64 `json:"jainFairness"`
	// FairnessDeviation is the queues' mean absolute deviation of GPUs
	// used from GPUs entitled over time, a share of the cluster's GPUs;
	// JainOverTime is Jain's index of used/entitled, averaged over time
	// (fairness.go).
	FairnessDeviation float64 `json:"fairnessDeviation"`
	JainOverTime      float64 `json:"jainOverTime"`
	// LayoutsProposed counts the MIG layouts the core proposed for nodes
	// that follow demand; LayoutsApplied those the nodes then applied.
	LayoutsProposed int `json:"layoutsProposed,omitempty"`
	LayoutsApplied  int `json:"layoutsApplied,omitempty"`
	// Node loss (EventConfig.NodeLoss): SpotNodes are the spot nodes,
	// NodesLost the times one was reclaimed and went; NodeLossPods counts
	// the pods its notice evicted or that went with it, NodeLossGangs
	// their groups (once per cycle that hit them) and NodeLossShrunk the
	// elastic groups among them that ran on without those pods.
	// LostGPUHoursNodeLoss is GPUs x time since the last checkpoint over
	// those pods, apart from LostGPUHours (preemption and moves).
	SpotNodes            int     `json:"spotNodes,omitempty"`
	NodesLost            int     `json:"nodesLost,omitempty"`
	NodeLossPods         int     `json:"nodeLossPods,omitempty"`
	NodeLossGangs        int     `json:"nodeLossGangs,omitempty"`
	NodeLossShrunk       int     `json:"nodeLossShrunk,omitempty"`
	LostGPUHoursNodeLoss float64 `json:"lostGpuHoursNodeLoss,omitempty"`
}
