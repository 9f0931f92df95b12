package simulator

import (
	"cmp"
	"encoding/csv"
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"strconv"
)

// Summary aggregates the runs of one policy over seeds.
type Summary struct {
	Policy string `json:"policy"`
	Runs   int    `json:"runs"`
	// Mean and median of the final ratios over seeds; failed pods and
	// wall time are means.
	MeanMilliGPUAllocationRatio   float64 `json:"meanMilliGpuAllocationRatio"`
	MedianMilliGPUAllocationRatio float64 `json:"medianMilliGpuAllocationRatio"`
	MeanGPUAllocationRatio        float64 `json:"meanGpuAllocationRatio"`
	MeanFragmentation             float64 `json:"meanFragmentation"`
	MeanFailedPods                float64 `json:"meanFailedPods"`
	MeanWallSeconds               float64 `json:"meanWallSeconds"`
}

// Summarize groups results by policy, in the order policies first appear.
func Summarize(results []*Result) []Summary {
	var order []string
	by := map[string][]*Result{}
	for _, r := range results {
		if _, ok := by[r.Policy]; !ok {
			order = append(order, r.Policy)
		}
		by[r.Policy] = append(by[r.Policy], r)
	}
	out := make([]Summary, 0, len(order))
	for _, p := range order {
		rs := by[p]
		s := Summary{Policy: p, Runs: len(rs)}
		var ratios []float64
		for _, r := range rs {
			s.MeanMilliGPUAllocationRatio += r.MilliGPUAllocationRatio
			s.MeanGPUAllocationRatio += r.GPUAllocationRatio
			s.MeanFragmentation += r.Fragmentation
			s.MeanFailedPods += float64(r.FailedPods)
			s.MeanWallSeconds += r.WallSeconds
			ratios = append(ratios, r.MilliGPUAllocationRatio)
		}
		n := float64(len(rs))
		s.MeanMilliGPUAllocationRatio /= n
		s.MeanGPUAllocationRatio /= n
		s.MeanFragmentation /= n
		s.MeanFailedPods /= n
		s.MeanWallSeconds /= n
		s.MedianMilliGPUAllocationRatio = median(ratios)
		out = append(out, s)
	}
	return out
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// WriteResultsCSV writes one row per (policy, seed) with the final numbers.
func WriteResultsCSV(w io.Writer, results []*Result) error {
	cw := csv.NewWriter(w)
	_ = cw.Write([]string{"policy", "seed", "pods", "failedPods", "milliGpuAllocationRatio", "gpuAllocationRatio", "fragmentation", "arrivedDemand", "wallSeconds", "topologyPolicy"})
	for _, r := range results {
		_ = cw.Write([]string{r.Policy, strconv.FormatUint(r.Seed, 10), strconv.Itoa(r.Pods), strconv.Itoa(r.FailedPods),
			f6(r.MilliGPUAllocationRatio), f6(r.GPUAllocationRatio), f6(r.Fragmentation), f6(r.ArrivedDemand), f6(r.WallSeconds), r.TopologyPolicy})
	}
	cw.Flush()
	if err := cw.Error(); err != nil {
		return fmt.Errorf("writing results csv: %w", err)
	}
	return nil
}

// WriteCurveCSV writes every curve point of every run.
func WriteCurveCSV(w io.Writer, results []*Result) error {
	cw := csv.NewWriter(w)
	_ = cw.Write([]string{"policy", "seed", "arrivedDemand", "milliGpuAllocationRatio", "gpuAllocationRatio", "fragmentation", "failedPods"})
	for _, r := range results {
		for _, p := range r.Curve {
			_ = cw.Write([]string{r.Policy, strconv.FormatUint(r.Seed, 10), f6(p.ArrivedDemand), f6(p.MilliGPUAllocationRatio),
				f6(p.GPUAllocationRatio), f6(p.Fragmentation), strconv.Itoa(p.FailedPods)})
		}
	}
	cw.Flush()
	if err := cw.Error(); err != nil {
		return fmt.Errorf("writing curve csv: %w", err)
	}
	return nil
}

func f6(v float64) string { return strconv.FormatFloat(v, 'f', 6, 64) }

// MeanCurve averages a policy's curves over seeds point by point (curves
// are sampled at the same arrived-demand steps; the shortest one bounds
// the result).
func MeanCurve(results []*Result, policy string) []Point {
	var curves [][]Point
	for _, r := range results {
		if r.Policy == policy && len(r.Curve) > 0 {
			curves = append(curves, r.Curve)
		}
	}
	if len(curves) == 0 {
		return nil
	}
	n := slices.MinFunc(curves, func(a, b []Point) int { return cmp.Compare(len(a), len(b)) })
	out := make([]Point, len(n))
	for i := range out {
		for _, c := range curves {
			out[i].ArrivedDemand += c[i].ArrivedDemand
			out[i].MilliGPUAllocationRatio += c[i].MilliGPUAllocationRatio
			out[i].GPUAllocationRatio += c[i].GPUAllocationRatio
			out[i].Fragmentation += c[i].Fragmentation
		}
		k := float64(len(curves))
		out[i].ArrivedDemand /= k
		out[i].MilliGPUAllocationRatio /= k
		out[i].GPUAllocationRatio /= k
		out[i].Fragmentation /= k
		if math.IsNaN(out[i].ArrivedDemand) {
			out[i].ArrivedDemand = 0
		}
	}
	return out
}

// WriteEventCSV writes event-mode per-queue numbers, one row per (policy,
// seed, queue).
func WriteEventCSV(w io.Writer, results []*Result) error {
	cw := csv.NewWriter(w)
	_ = cw.Write([]string{"policy", "seed", "queue", "pods", "started", "completed", "waitP50", "waitP90", "waitP99", "jctP50", "jctP90", "jctP99", "share", "entitlement", "preemptions", "topologyPolicy",
		"jobs", "jobsCompleted", "waitP95", "jctMean", "jctP95", "fairnessDeviation", "lostGpuHours"})
	for _, r := range results {
		if r.Event == nil {
			continue
		}
		for _, q := range r.Event.Queues {
			_ = cw.Write([]string{r.Policy, strconv.FormatUint(r.Seed, 10), q.Queue, strconv.Itoa(q.Pods), strconv.Itoa(q.Started), strconv.Itoa(q.Completed),
				f6(q.WaitP50), f6(q.WaitP90), f6(q.WaitP99), f6(q.JCTP50), f6(q.JCTP90), f6(q.JCTP99), f6(q.Share), f6(q.Entitlement), strconv.Itoa(q.Preemptions), r.TopologyPolicy,
				strconv.Itoa(q.Jobs), strconv.Itoa(q.JobsCompleted), f6(q.WaitP95), f6(q.JCTMean), f6(q.JCTP95), f6(q.FairnessDeviation), f6(q.LostGPUHours)})
		}
	}
	cw.Flush()
	if err := cw.Error(); err != nil {
		return fmt.Errorf("writing queue csv: %w", err)
	}
	return nil
}

// WriteUtilizationCSV writes event-mode utilization over virtual time:
// the cluster's (queue empty) and, with several queues, each queue's part.
func WriteUtilizationCSV(w io.Writer, results []*Result) error {
	cw := csv.NewWriter(w)
	_ = cw.Write([]string{"policy", "seed", "time", "milliGpuAllocationRatio", "topologyPolicy", "queue"})
	for _, r := range results {
		if r.Event == nil {
			continue
		}
		for _, p := range r.Event.Utilization {
			_ = cw.Write([]string{r.Policy, strconv.FormatUint(r.Seed, 10), strconv.FormatInt(p.Time, 10), f6(p.MilliGPUAllocationRatio), r.TopologyPolicy, ""})
			for _, q := range slices.Sorted(maps.Keys(p.ByQueue)) {
				_ = cw.Write([]string{r.Policy, strconv.FormatUint(r.Seed, 10), strconv.FormatInt(p.Time, 10), f6(p.ByQueue[q]), r.TopologyPolicy, q})
			}
		}
	}
	cw.Flush()
	if err := cw.Error(); err != nil {
		return fmt.Errorf("writing utilization csv: %w", err)
	}
	return nil
}

// WriteTopologyCSV writes, one row per event run with gangs placed by the
// network, where they landed (TopologyStats).
func WriteTopologyCSV(w io.Writer, results []*Result) error {
	cw := csv.NewWriter(w)
	_ = cw.Write([]string{"policy", "topologyPolicy", "seed", "gangs", "started", "requiredLevel", "requiredGangs", "requiredInOne",
		"preferredLevel", "preferredGangs", "preferredInOne", "preferredCanFit", "preferredCanFitInOne", "preferredFitAtStart", "preferredFitAtStartInOne", "preferredMeanDomains",
		"preferredMaxDomains", "meanUtilization", "gangWindowGpuAllocation", "gangWaitMean", "gangWaitP50", "gangWaitP90"})
	for _, r := range results {
		s := r.Topology
		if s == nil || r.Event == nil {
			continue
		}
		_ = cw.Write([]string{r.Policy, r.TopologyPolicy, strconv.FormatUint(r.Seed, 10), strconv.Itoa(s.Gangs), strconv.Itoa(s.Started),
			s.Required.Level, strconv.Itoa(s.Required.Gangs), strconv.Itoa(s.Required.InOne),
			s.Preferred.Level, strconv.Itoa(s.Preferred.Gangs), strconv.Itoa(s.Preferred.InOne), strconv.Itoa(s.Preferred.CanFit),
			strconv.Itoa(s.Preferred.CanFitInOne), strconv.Itoa(s.Preferred.FitAtStart), strconv.Itoa(s.Preferred.FitAtStartInOne), f6(s.Preferred.MeanDomains), strconv.Itoa(s.Preferred.MaxDomains),
			f6(r.Event.MeanUtilization), f6(s.GPUAllocation), f6(s.WaitMean), f6(s.WaitP50), f6(s.WaitP90)})
	}
	cw.Flush()
	if err := cw.Error(); err != nil {
		return fmt.Errorf("writing topology csv: %w", err)
	}
	return nil
}
