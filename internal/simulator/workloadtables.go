package simulator

import (
	"bytes"
	"cmp"
	_ "embed" // the distilled tables ship inside the binary
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/gpuplane/gpuplane/internal/scheduler/model"
)

// The contended workload (contended.go) is drawn from three published
// traces. Tests and the CLI read a small distillation of them kept in the
// repository, workload_tables.json; `go generate` rebuilds it from
// ../shared/traces (internal/distill), and benchmarks distill the full
// traces directly (ReadWorkloadTables with every run time kept).

//go:generate go run ./internal/distill -traces ../../../shared/traces -o workload_tables.json

//go:embed workload_tables.json
var builtinTables []byte

// Trace files the distillation reads, relative to a traces directory.
const (
	PhillyRunTimeFile = "philly/philly_runtime.csv"
	AlibabaGPU2025    = "alibaba-gpu-2025/disaggregated_DLRM_trace.csv"
	openBAllNodesFile = "openb/openb_node_list_all_node.csv"
	openBDefaultPods  = "openb/openb_pod_list_default.csv"
)

// RDMAResource is the scalar resource the contended workload's pods ask
// for and its nodes offer: percent of one RDMA NIC's bandwidth, which the
// Alibaba 2025 trace uses as a density constraint.
const RDMAResource = "gpuplane.io/rdma"

// Bounds on the inputs the distillation accepts.
const (
	// maxRunTime is the longest run time accepted from a trace, a year
	// in seconds.
	maxRunTime = 365 * 24 * 3600
	// maxTraceTime bounds the Alibaba trace's clock, ten years in
	// seconds.
	maxTraceTime = 10 * 365 * 24 * 3600
	// maxInstanceCPU and maxInstanceMemoryGiB bound one instance's
	// requests (cores, GiB).
	maxInstanceCPU       = 4096
	maxInstanceMemoryGiB = 1 << 20
)

// PodShape is a pod's request and how often the source shows it.
type PodShape struct {
	MilliCPU  int64 `json:"milliCPU"`
	MemoryMiB int64 `json:"memoryMiB"`
	// GPUs whole GPUs, or GPUMilli thousandths of one.
	GPUs     int   `json:"gpus,omitempty"`
	GPUMilli int64 `json:"gpuMilli,omitempty"`
	// RDMA is percent of an RDMA NIC (RDMAResource).
	RDMA int64 `json:"rdma,omitempty"`
	// Priority is 1 for latency-sensitive pods (openb's QoS LS and
	// Guaranteed), else 0.
	Priority int32 `json:"priority,omitempty"`
	Count    int64 `json:"count"`
}

// GPUMilliTotal is the shape's milli-GPU.
func (s *PodShape) GPUMilliTotal() int64 {
	if s.GPUs > 0 {
		return int64(s.GPUs) * model.MilliPerGPU
	}
	return s.GPUMilli
}

// NodeShape is a machine type and how many the source has.
type NodeShape struct {
	MilliCPU  int64  `json:"milliCPU"`
	MemoryMiB int64  `json:"memoryMiB"`
	GPUs      int    `json:"gpus"`
	Model     string `json:"model,omitempty"`
	Count     int64  `json:"count"`
}

// GangShape is one batch of an Alibaba app's instances created at the
// same second: GPUPods of role HN and CPUPods of role CN.
type GangShape struct {
	GPUPods int   `json:"gpuPods"`
	CPUPods int   `json:"cpuPods"`
	Count   int64 `json:"count"`
}

// Weighted is a value and its count.
type Weighted struct {
	Value int64 `json:"value"`
	Count int64 `json:"count"`
}

// WorkloadTables are the distributions the contended workload is drawn
// from.
type WorkloadTables struct {
	// Sources says where each table came from and how it was made.
	Sources []string `json:"sources"`
	// GPUPods are openb default's GPU pods' shapes (pod shapes).
	GPUPods []PodShape `json:"gpuPods"`
	// CPUPods are the Alibaba 2025 trace's CN-role shapes (the CPU
	// members of a gang).
	CPUPods []PodShape `json:"cpuPods"`
	// GPURDMA is the RDMA share the trace's HN-role (GPU) instances ask.
	GPURDMA []Weighted `json:"gpuRdma"`
	// Nodes are openb's machine types, GPU-less ones included.
	Nodes []NodeShape `json:"nodes"`
	// Gangs are the Alibaba trace's batches that hold a GPU instance.
	Gangs []GangShape `json:"gangs"`
	// RunTimes are Philly's job run times in seconds, ascending, at
	// evenly spaced quantiles from the least (first) to the largest
	// (last), or every run time when read from the full trace.
	RunTimes []int64 `json:"runTimes"`
	// ArrivalsByHour counts the Alibaba trace's creations by hour of
	// day: the arrivals' daily profile.
	ArrivalsByHour [24]int64 `json:"arrivalsByHour"`
}

// BuiltinWorkloadTables are the tables distilled into the repository.
func BuiltinWorkloadTables() (*WorkloadTables, error) {
	var t WorkloadTables
	dec := json.NewDecoder(bytes.NewReader(builtinTables))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&t); err != nil {
		return nil, fmt.Errorf("reading the built-in workload tables: %w", err)
	}
	if err := t.Validate(); err != nil {
		return nil, fmt.Errorf("the built-in workload tables: %w", err)
	}
	return &t, nil
}

// Validate checks that every table has something to draw from.
func (t *WorkloadTables) Validate() error {
	switch {
	case len(t.GPUPods) == 0:
		return errors.New("gpuPods: empty")
	case len(t.CPUPods) == 0:
		return errors.New("cpuPods: empty")
	case len(t.GPURDMA) == 0:
		return errors.New("gpuRdma: empty")
	case len(t.Nodes) == 0:
		return errors.New("nodes: empty")
	case len(t.Gangs) == 0:
		return errors.New("gangs: empty")
	case len(t.RunTimes) < 2:
		return fmt.Errorf("runTimes: want at least 2 quantiles, got %d", len(t.RunTimes))
	case !slices.IsSorted(t.RunTimes) || t.RunTimes[0] < 0:
		return errors.New("runTimes: want non-negative values in ascending order")
	}
	for i, g := range t.Gangs {
		if g.GPUPods < 1 || g.CPUPods < 0 || g.Count < 1 {
			return fmt.Errorf("gangs[%d]: want gpuPods >= 1, cpuPods >= 0 and count >= 1", i)
		}
	}
	for i := range t.GPUPods {
		if s := &t.GPUPods[i]; s.GPUMilliTotal() <= 0 || s.Count < 1 {
			return fmt.Errorf("gpuPods[%d]: want a GPU request and count >= 1", i)
		}
	}
	var day int64
	for _, c := range t.ArrivalsByHour {
		if c < 0 {
			return errors.New("arrivalsByHour: negative count")
		}
		day += c
	}
	if day == 0 {
		return errors.New("arrivalsByHour: no arrivals")
	}
	return nil
}

// ReadWorkloadTables distills the tables from a traces directory
// (../shared/traces): openb's default pods and node list, Philly's run
// times and the Alibaba 2025 trace. quantiles > 0 keeps that many
// evenly spaced run-time quantiles (plus the least); 0 keeps every run
// time.
func ReadWorkloadTables(dir string, quantiles int) (*WorkloadTables, error) {
	open := func(rel string) (*os.File, string, error) {
		p := filepath.Join(dir, rel)
		f, err := os.Open(p)
		if err != nil {
			return nil, p, fmt.Errorf("distilling workload tables: %w", err)
		}
		return f, p, nil
	}
	f, p, err := open(openBDefaultPods)
	if err != nil {
		return nil, err
	}
	pods, err := ParseOpenBPods(p, f)
	f.Close()
	if err != nil {
		return nil, err
	}
	if f, p, err = open(openBAllNodesFile); err != nil {
		return nil, err
	}
	nodes, err := ParseOpenBNodes(p, f)
	f.Close()
	if err != nil {
		return nil, err
	}
	if f, p, err = open(PhillyRunTimeFile); err != nil {
		return nil, err
	}
	runs, err := ParsePhillyRunTimes(p, f)
	f.Close()
	if err != nil {
		return nil, err
	}
	if f, p, err = open(AlibabaGPU2025); err != nil {
		return nil, err
	}
	inst, err := ParseAlibabaGPU2025(p, f)
	f.Close()
	if err != nil {
		return nil, err
	}
	return Distill(pods, nodes, runs, inst, quantiles)
}

// Distill builds the tables from parsed traces.
func Distill(pods []TracePod, nodes []model.Node, runTimes []int64, inst []AlibabaInstance, quantiles int) (*WorkloadTables, error) {
	t := &WorkloadTables{}
	type shapeKey struct {
		cpu, mem, milli int64
		gpus            int
		prio            int32
	}
	shapes := map[shapeKey]int64{}
	for i := range pods {
		r := &pods[i].Request
		if !r.UsesGPU() {
			continue
		}
		var prio int32
		if q := pods[i].QoS; q == "LS" || q == "Guaranteed" {
			prio = 1
		}
		shapes[shapeKey{r.MilliCPU, r.MemoryMiB, r.GPUMilli, r.GPUs, prio}]++
	}
	for k, c := range shapes {
		t.GPUPods = append(t.GPUPods, PodShape{MilliCPU: k.cpu, MemoryMiB: k.mem, GPUs: k.gpus, GPUMilli: k.milli, Priority: k.prio, Count: c})
	}
	type nodeKey struct {
		cpu, mem int64
		gpus     int
		model    string
	}
	ns := map[nodeKey]int64{}
	for i := range nodes {
		n := &nodes[i]
		m := ""
		if len(n.GPUs) > 0 {
			m = n.GPUs[0].Model
		}
		ns[nodeKey{n.MilliCPU, n.MemoryMiB, len(n.GPUs), m}]++
	}
	for k, c := range ns {
		t.Nodes = append(t.Nodes, NodeShape{MilliCPU: k.cpu, MemoryMiB: k.mem, GPUs: k.gpus, Model: k.model, Count: c})
	}
	cpuShapes := map[shapeKey]int64{}
	rdma := map[int64]int64{}
	type batchKey struct {
		app string
		at  int64
	}
	batches := map[batchKey]*GangShape{}
	for i := range inst {
		in := &inst[i]
		if in.Role == RoleHN {
			rdma[in.RDMA]++
		} else {
			cpuShapes[shapeKey{cpu: in.MilliCPU, mem: in.MemoryMiB, milli: in.RDMA}]++
		}
		if in.CreatedAt < 0 {
			continue // existed before the trace began: no batch
		}
		t.ArrivalsByHour[in.CreatedAt/3600%24]++
		k := batchKey{in.App, in.CreatedAt}
		b := batches[k]
		if b == nil {
			b = &GangShape{}
			batches[k] = b
		}
		if in.Role == RoleHN {
			b.GPUPods++
		} else {
			b.CPUPods++
		}
	}
	for k, c := range cpuShapes {
		t.CPUPods = append(t.CPUPods, PodShape{MilliCPU: k.cpu, MemoryMiB: k.mem, RDMA: k.milli, Count: c})
	}
	for v, c := range rdma {
		t.GPURDMA = append(t.GPURDMA, Weighted{Value: v, Count: c})
	}
	gangs := map[[2]int]int64{}
	for _, b := range batches {
		if b.GPUPods > 0 {
			gangs[[2]int{b.GPUPods, b.CPUPods}]++
		}
	}
	for k, c := range gangs {
		t.Gangs = append(t.Gangs, GangShape{GPUPods: k[0], CPUPods: k[1], Count: c})
	}
	runs := slices.Clone(runTimes)
	slices.Sort(runs)
	if quantiles > 0 && len(runs) > 0 {
		q := make([]int64, quantiles+1)
		for i := range q {
			q[i] = runs[int(math.Round(float64(i)*float64(len(runs)-1)/float64(quantiles)))]
		}
		runs = q
	}
	t.RunTimes = runs
	// A stable order, so that the file is the same on every rebuild.
	byShape := func(a, b PodShape) int {
		return cmp.Or(cmp.Compare(b.Count, a.Count), cmp.Compare(a.GPUs, b.GPUs), cmp.Compare(a.GPUMilli, b.GPUMilli),
			cmp.Compare(a.MilliCPU, b.MilliCPU), cmp.Compare(a.MemoryMiB, b.MemoryMiB), cmp.Compare(a.RDMA, b.RDMA), cmp.Compare(a.Priority, b.Priority))
	}
	slices.SortFunc(t.GPUPods, byShape)
	slices.SortFunc(t.CPUPods, byShape)
	slices.SortFunc(t.GPURDMA, func(a, b Weighted) int { return cmp.Or(cmp.Compare(b.Count, a.Count), cmp.Compare(a.Value, b.Value)) })
	slices.SortFunc(t.Nodes, func(a, b NodeShape) int {
		return cmp.Or(cmp.Compare(b.Count, a.Count), cmp.Compare(a.GPUs, b.GPUs), cmp.Compare(a.MilliCPU, b.MilliCPU), cmp.Compare(a.MemoryMiB, b.MemoryMiB), cmp.Compare(a.Model, b.Model))
	})
	slices.SortFunc(t.Gangs, func(a, b GangShape) int {
		return cmp.Or(cmp.Compare(b.Count, a.Count), cmp.Compare(a.GPUPods, b.GPUPods), cmp.Compare(a.CPUPods, b.CPUPods))
	})
	rt := fmt.Sprintf("every one of %d run times", len(runTimes))
	if quantiles > 0 {
		rt = fmt.Sprintf("%d evenly spaced quantiles of %d run times", quantiles+1, len(runTimes))
	}
	t.Sources = []string{
		fmt.Sprintf("gpuPods: shapes of the %d GPU pods of openb %s (Alibaba cluster-trace-gpu-v2023)", countGPU(pods), openBDefaultPods),
		fmt.Sprintf("nodes: the %d machines of %s", len(nodes), openBAllNodesFile),
		fmt.Sprintf("runTimes: %s, in seconds, of %s (Philly, Jeon et al., ATC 2019, via alibaba/clusterdata)", rt, PhillyRunTimeFile),
		fmt.Sprintf("gangs, cpuPods, gpuRdma, arrivalsByHour: the %d instances of %s (Alibaba cluster-trace-gpu-v2025)", len(inst), AlibabaGPU2025),
	}
	if err := t.Validate(); err != nil {
		return nil, fmt.Errorf("distilling workload tables: %w", err)
	}
	return t, nil
}

func countGPU(pods []TracePod) int {
	n := 0
	for i := range pods {
		if pods[i].Request.UsesGPU() {
			n++
		}
	}
	return n
}

// WriteJSON writes the tables as workload_tables.json holds them.
func (t *WorkloadTables) WriteJSON(w io.Writer) error {
	b, err := json.MarshalIndent(t, "", " ")
	if err != nil {
		return fmt.Errorf("writing workload tables: %w", err)
	}
	_, err = w.Write(append(b, '\n'))
	return err
}

// ParsePhillyRunTimes reads philly_runtime.csv: a header "runtime" and
// one run time a row. The file's README says minutes, but its values
// are seconds: read as minutes its longest job would run 8.8 years, in
// a trace that covers a few months; as seconds its median is 20 minutes
// and its longest 54 days, as Jeon et al. describe Philly's jobs.
func ParsePhillyRunTimes(file string, r io.Reader) ([]int64, error) {
	t, err := newTable(file, r, "runtime")
	if err != nil {
		return nil, err
	}
	var out []int64
	for {
		ok, err := t.next()
		if err != nil {
			return nil, err
		}
		if !ok {
			return out, nil
		}
		if len(out) == MaxTracePods {
			return nil, &RowError{File: file, Line: t.line, Err: fmt.Errorf("more than %d run times", MaxTracePods)}
		}
		v, err := t.float("runtime", 0, maxRunTime)
		if err != nil {
			return nil, err
		}
		out = append(out, int64(math.Round(v)))
	}
}

// Roles of the Alibaba 2025 trace's instances.
const (
	RoleCN = "CN" // a CPU node's instance
	RoleHN = "HN" // a heterogeneous (GPU) node's instance
)

// AlibabaInstance is one row of the Alibaba 2025 GPU trace.
type AlibabaInstance struct {
	Name, Role, App string
	MilliCPU        int64
	MemoryMiB       int64
	GPUs            int64
	RDMA            int64
	// CreatedAt and DeletedAt are seconds from the trace start, -1 when
	// outside the trace (NaN or empty in the file).
	CreatedAt, DeletedAt int64
}

// ParseAlibabaGPU2025 reads disaggregated_DLRM_trace.csv (its README
// describes the columns).
func ParseAlibabaGPU2025(file string, r io.Reader) ([]AlibabaInstance, error) {
	cols := []string{"instance_sn", "role", "app_name", "cpu_request", "gpu_request", "rdma_request", "memory_request", "creation_time", "deletion_time"}
	t, err := newTable(file, r, cols...)
	if err != nil {
		return nil, err
	}
	var out []AlibabaInstance
	for {
		ok, err := t.next()
		if err != nil {
			return nil, err
		}
		if !ok {
			return out, nil
		}
		if len(out) == MaxTracePods {
			return nil, &RowError{File: file, Line: t.line, Err: fmt.Errorf("more than %d instances", MaxTracePods)}
		}
		in := AlibabaInstance{Name: t.str("instance_sn"), Role: t.str("role"), App: t.str("app_name")}
		if in.Role != RoleCN && in.Role != RoleHN {
			return nil, t.fieldErr("role", fmt.Errorf("want %s or %s, got %q", RoleCN, RoleHN, in.Role))
		}
		if in.App == "" {
			return nil, t.fieldErr("app_name", errors.New("missing value"))
		}
		cpu, err := t.float("cpu_request", 0, maxInstanceCPU)
		if err != nil {
			return nil, err
		}
		mem, err := t.float("memory_request", 0, maxInstanceMemoryGiB)
		if err != nil {
			return nil, err
		}
		gpu, err := t.float("gpu_request", 0, MaxNodeGPUs)
		if err != nil {
			return nil, err
		}
		rdma, err := t.float("rdma_request", 0, 100)
		if err != nil {
			return nil, err
		}
		in.MilliCPU, in.MemoryMiB = int64(math.Round(cpu*1000)), int64(math.Round(mem*1024))
		in.GPUs, in.RDMA = int64(gpu), int64(math.Round(rdma))
		if in.CreatedAt, err = t.optTime("creation_time"); err != nil {
			return nil, err
		}
		if in.DeletedAt, err = t.optTime("deletion_time"); err != nil {
			return nil, err
		}
		if in.CreatedAt >= 0 && in.DeletedAt >= 0 && in.DeletedAt < in.CreatedAt {
			return nil, t.fieldErr("deletion_time", fmt.Errorf("%d is before creation_time %d", in.DeletedAt, in.CreatedAt))
		}
		out = append(out, in)
	}
}

func (t *table) fieldErr(col string, err error) error {
	c := 1
	if i, ok := t.cols[col]; ok && i < len(t.row) {
		_, c = t.r.FieldPos(i)
	}
	return &RowError{File: t.file, Line: t.line, Column: c, Field: col, Err: err}
}

// float parses a required column as a finite number in [lo, hi].
func (t *table) float(col string, lo, hi float64) (float64, error) {
	s := t.str(col)
	if s == "" {
		return 0, t.fieldErr(col, errors.New("missing value"))
	}
	v, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsNaN(v) || v < lo || v > hi {
		return 0, t.fieldErr(col, fmt.Errorf("want a number from %g to %g, got %q", lo, hi, s))
	}
	return v, nil
}

// optTime parses a time column: empty or NaN is -1 (outside the trace).
func (t *table) optTime(col string) (int64, error) {
	s := t.str(col)
	if s == "" || strings.EqualFold(s, "nan") {
		return -1, nil
	}
	v, err := t.float(col, 0, maxTraceTime)
	if err != nil {
		return 0, err
	}
	return int64(v), nil
}
