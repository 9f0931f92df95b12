package simulator

import (
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/gpuplane/gpuplane/internal/scheduler/model"
)

// OpenB file names inside a trace directory.
const (
	OpenBNodeFile = "openb_node_list_gpu_node.csv"
	openBPodFmt   = "openb_pod_list_%s.csv"
)

// ReadOpenB reads DIR/openb_node_list_gpu_node.csv and
// DIR/openb_pod_list_VARIANT.csv. Pods keep file order, stably sorted by
// creation time.
func ReadOpenB(dir, variant string) (*Trace, error) {
	nodesPath := filepath.Join(dir, OpenBNodeFile)
	podsPath := filepath.Join(dir, fmt.Sprintf(openBPodFmt, variant))
	nf, err := os.Open(nodesPath)
	if err != nil {
		return nil, fmt.Errorf("reading openb trace: %w (want --trace to be a directory holding %s)", err, OpenBNodeFile)
	}
	defer nf.Close()
	nodes, err := ParseOpenBNodes(nodesPath, nf)
	if err != nil {
		return nil, err
	}
	pf, err := os.Open(podsPath)
	if err != nil {
		return nil, fmt.Errorf("reading openb trace: %w (check --variant)", err)
	}
	defer pf.Close()
	pods, err := ParseOpenBPods(podsPath, pf)
	if err != nil {
		return nil, err
	}
	return &Trace{Source: fmt.Sprintf("openb/%s", variant), Nodes: nodes, Pods: pods}, nil
}

// RowError is a malformed trace row.
type RowError struct {
	File   string
	Line   int
	Column int
	Field  string
	Err    error
}

func (e *RowError) Error() string {
	if e.Field != "" {
		return fmt.Sprintf("%s:%d:%d: column %s: %v", e.File, e.Line, e.Column, e.Field, e.Err)
	}
	return fmt.Sprintf("%s:%d:%d: %v", e.File, e.Line, e.Column, e.Err)
}

func (e *RowError) Unwrap() error { return e.Err }

// table reads a CSV with a header and looks columns up by name.
type table struct {
	file string
	r    *csv.Reader
	cols map[string]int
	row  []string
	line int
}

func newTable(file string, r io.Reader, required ...string) (*table, error) {
	cr := csv.NewReader(r)
	cr.FieldsPerRecord = -1
	cr.ReuseRecord = true
	head, err := cr.Read()
	if err != nil {
		if errors.Is(err, io.EOF) {
			return nil, &RowError{File: file, Line: 1, Column: 1, Err: errors.New("empty file, want a header row")}
		}
		return nil, csvError(file, err)
	}
	t := &table{file: file, r: cr, cols: map[string]int{}}
	for i, h := range head {
		t.cols[strings.TrimSpace(strings.TrimPrefix(h, "\ufeff"))] = i
	}
	for _, c := range required {
		if _, ok := t.cols[c]; !ok {
			return nil, &RowError{File: file, Line: 1, Column: 1, Err: fmt.Errorf("header lacks column %q", c)}
		}
	}
	return t, nil
}

func csvError(file string, err error) error {
	var pe *csv.ParseError
	if errors.As(err, &pe) {
		return &RowError{File: file, Line: pe.Line, Column: pe.Column, Err: pe.Err}
	}
	return fmt.Errorf("reading %s: %w", file, err)
}

// next reads a row; false at the end.
func (t *table) next() (bool, error) {
	row, err := t.r.Read()
	if errors.Is(err, io.EOF) {
		return false, nil
	}
	if err != nil {
		return false, csvError(t.file, err)
	}
	t.row = row
	t.line, _ = t.r.FieldPos(0)
	return true, nil
}

func (t *table) str(col string) string {
	i, ok := t.cols[col]
	if !ok || i >= len(t.row) {
		return ""
	}
	return strings.TrimSpace(t.row[i])
}

// int parses a column as a non-negative integer; optional columns that
// are missing or empty give 0.
func (t *table) int(col string, optional bool) (int64, error) {
	i, ok := t.cols[col]
	if !ok || i >= len(t.row) || strings.TrimSpace(t.row[i]) == "" {
		if optional {
			return 0, nil
		}
		c := len(t.row) + 1
		if ok {
			_, c = t.r.FieldPos(min(i, len(t.row)-1))
		}
		return 0, &RowError{File: t.file, Line: t.line, Column: c, Field: col, Err: errors.New("missing value")}
	}
	s := strings.TrimSpace(t.row[i])
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		var f float64
		f, err = strconv.ParseFloat(s, 64)
		v = int64(f)
	}
	if err != nil || v < 0 {
		_, c := t.r.FieldPos(i)
		return 0, &RowError{File: t.file, Line: t.line, Column: c, Field: col, Err: fmt.Errorf("want a non-negative integer, got %q", s)}
	}
	return v, nil
}

// ParseOpenBNodes reads the node list (sn,cpu_milli,memory_mib,gpu,model).
func ParseOpenBNodes(file string, r io.Reader) ([]model.Node, error) {
	t, err := newTable(file, r, "sn", "cpu_milli", "memory_mib", "gpu", "model")
	if err != nil {
		return nil, err
	}
	var nodes []model.Node
	for {
		ok, err := t.next()
		if err != nil {
			return nil, err
		}
		if !ok {
			return nodes, nil
		}
		cpu, err := t.int("cpu_milli", false)
		if err != nil {
			return nil, err
		}
		mem, err := t.int("memory_mib", false)
		if err != nil {
			return nil, err
		}
		n, err := t.int("gpu", false)
		if err != nil {
			return nil, err
		}
		if n > MaxNodeGPUs {
			_, c := t.r.FieldPos(t.cols["gpu"])
			return nil, &RowError{File: t.file, Line: t.line, Column: c, Field: "gpu", Err: fmt.Errorf("a node has at most %d GPUs, got %d", MaxNodeGPUs, n)}
		}
		if len(nodes) == MaxTraceNodes {
			return nil, &RowError{File: t.file, Line: t.line, Err: fmt.Errorf("more than %d nodes", MaxTraceNodes)}
		}
		nd := model.Node{Name: t.str("sn"), MilliCPU: cpu, MemoryMiB: mem}
		m := t.str("model")
		for g := range int(n) {
			nd.GPUs = append(nd.GPUs, model.GPU{Index: g, Model: m, Milli: model.MilliPerGPU})
		}
		nodes = append(nodes, nd)
	}
}

// ParseOpenBPods reads a pod list (name,cpu_milli,memory_mib,num_gpu,
// gpu_milli[,gpu_spec,qos,pod_phase,creation_time,deletion_time,...]).
func ParseOpenBPods(file string, r io.Reader) ([]TracePod, error) {
	t, err := newTable(file, r, "name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli")
	if err != nil {
		return nil, err
	}
	var pods []TracePod
	for {
		ok, err := t.next()
		if err != nil {
			return nil, err
		}
		if !ok {
			break
		}
		if len(pods) == MaxTracePods {
			return nil, &RowError{File: t.file, Line: t.line, Err: fmt.Errorf("more than %d pods", MaxTracePods)}
		}
		var v [6]int64
		for k, col := range []string{"cpu_milli", "memory_mib", "num_gpu", "gpu_milli", "creation_time", "deletion_time"} {
			if v[k], err = t.int(col, k >= 4); err != nil {
				return nil, err
			}
		}
		req := model.Request{MilliCPU: v[0], MemoryMiB: v[1]}
		switch {
		case v[2] == 1 && v[3] > 0 && v[3] < model.MilliPerGPU:
			req.GPUMilli = v[3]
		case v[2] > 0:
			req.GPUs = int(v[2])
		}
		if spec := t.str("gpu_spec"); spec != "" {
			req.GPUModels = strings.Split(spec, "|")
		}
		pods = append(pods, TracePod{Name: t.str("name"), Request: req, CreatedAt: v[4], DeletedAt: v[5]})
	}
	sortByCreation(pods)
	return pods, nil
}
