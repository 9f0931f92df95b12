package simulator

// QueueStats are one queue's event-mode numbers; times are in trace
// seconds.
type QueueStats struct {
	Queue string `json:"queue"`
	Pods  int    `json:"pods"`
	// Started pods ran at least once; Completed pods finished.
	Started   int `json:"started"`
	Completed int `json:"completed"`
	// Queueing delay (first start - creation) and job completion time
	// (finish - creation) percentiles over the queue's pods.
	WaitP50 float64 `json:"waitP50"`
	WaitP90 float64 `json:"waitP90"`
	WaitP99 float64 `json:"waitP99"`
	JCTP50  float64 `json:"jctP50"`
	JCTP90  float64 `json:"jctP90"`
	JCTP99  float64 `json:"jctP99"`
	// Share is the queue's time-averaged share of allocated milli-GPU and
	// Entitlement its share of guaranteed milli-GPU among queues.
	Share       float64 `json:"share"`
	Entitlement float64 `json:"entitlement"`
	Preemptions int     `json:"preemptions"`
}

// UtilPoint is the cluster's milli-GPU allocation at a virtual time.
type UtilPoint struct {
	Time                    int64   `json:"time"`
	MilliGPUAllocationRatio float64 `json:"milliGpuAllocationRatio"`
}

// EventStats are the event-mode results.
type EventStats struct {
	Queues      []QueueStats `json:"queues"`
	Utilization []UtilPoint  `json:"utilization,omitempty"`
	// MeanUtilization is the time-averaged milli-GPU allocation ratio.
	MeanUtilization float64 `json:"meanUtilization"`
	Preemptions     int     `json:"preemptions"`
	Cycles          int     `json:"cycles"`
	// JainFairness is Jain's index over queues of share/entitlement.
	JainFairness float64 `json:"jainFairness"`
	// LayoutsProposed counts the MIG layouts the core proposed for nodes
	// that follow demand; LayoutsApplied those the nodes then applied.
	LayoutsProposed int `json:"layoutsProposed,omitempty"`
	LayoutsApplied  int `json:"layoutsApplied,omitempty"`
}
