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

// openBLevels are the topology columns a node list may add, widest first,
// and the node label each stands for; a pod list's required_topology and
// preferred_topology name one of them (or hostname).
var openBLevels = []struct{ column, label string }{
	{"block", BlockLabel},
	{"rack", RackLabel},
	{"clique", CliqueLabel},
	{"hostname", hostnameLabel},
}

// openBTopology is the gang topology of the openb columns: every level,
// with required and preferred named by column.
func openBTopology(required, preferred string) (*model.GangTopology, error) {
	t := &model.GangTopology{Name: "openb"}
	for _, l := range openBLevels {
		t.Levels = append(t.Levels, l.label)
	}
	label := func(col, v string) (string, error) {
		if v == "" {
			return "", nil
		}
		for _, l := range openBLevels {
			if l.column == v {
				return l.label, nil
			}
		}
		return "", fmt.Errorf("column %s: %q is not a level (block, rack, clique or hostname)", col, v)
	}
	var err error
	if t.Required, err = label("required_topology", required); err != nil {
		return nil, err
	}
	if t.Preferred, err = label("preferred_topology", preferred); err != nil {
		return nil, err
	}
	if t.Required == "" && t.Preferred == "" {
		return nil, nil
	}
	return t, t.Check("topology")
}

// ParseOpenBNodes reads the node list (sn,cpu_milli,memory_mib,gpu,model),
// and the node's network domains from the optional columns block, rack
// and clique (its NVLink domain).
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
		nd := model.Node{Name: t.str("sn"), MilliCPU: cpu, MemoryMiB: mem, Domains: map[string]string{hostnameLabel: t.str("sn")}}
		for _, l := range openBLevels[:3] {
			v := t.str(l.column)
			if v == "" {
				continue
			}
			if len(v) > maxDomainValue {
				_, c := t.r.FieldPos(t.cols[l.column])
				return nil, &RowError{File: t.file, Line: t.line, Column: c, Field: l.column, Err: fmt.Errorf("a domain name of at most %d characters, got %d", maxDomainValue, len(v))}
			}
			nd.Domains[l.label] = v
		}
		m := t.str("model")
		for g := range int(n) {
			nd.GPUs = append(nd.GPUs, model.GPU{Index: g, Model: m, Milli: model.MilliPerGPU})
		}
		nodes = append(nodes, nd)
	}
}

// ParseOpenBPods reads a pod list (name,cpu_milli,memory_mib,num_gpu,
// gpu_milli[,gpu_spec,qos,pod_phase,creation_time,deletion_time,...]).
// Optional columns make gangs placed by the network: pod_group (the
// gang's name), min_member (its size; 0 or empty: all its pods),
// required_topology and preferred_topology (a level of the node list's:
// block, rack, clique or hostname), the same on every pod of a group.
func ParseOpenBPods(file string, r io.Reader) ([]TracePod, error) {
	t, err := newTable(file, r, "name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli")
	if err != nil {
		return nil, err
	}
	var pods []TracePod
	groups := map[string]TracePod{}
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
		tp := TracePod{Name: t.str("name"), Request: req, CreatedAt: v[4], DeletedAt: v[5], Group: t.str("pod_group"), QoS: t.str("qos")}
		mm, err := t.int("min_member", true)
		if err != nil {
			return nil, err
		}
		if mm > MaxTracePods {
			_, c := t.r.FieldPos(t.cols["min_member"])
			return nil, &RowError{File: t.file, Line: t.line, Column: c, Field: "min_member", Err: fmt.Errorf("at most %d, got %d", MaxTracePods, mm)}
		}
		tp.MinMember = int(mm)
		if tp.Topology, err = openBTopology(t.str("required_topology"), t.str("preferred_topology")); err != nil {
			return nil, &RowError{File: t.file, Line: t.line, Err: err}
		}
		if tp.Group == "" && (tp.Topology != nil || tp.MinMember > 0) {
			return nil, &RowError{File: t.file, Line: t.line, Field: "pod_group", Err: errors.New("min_member and a topology need the pod's group")}
		}
		if prev, ok := groups[tp.Group]; ok && (prev.MinMember != tp.MinMember || !sameTopology(prev.Topology, tp.Topology)) {
			return nil, &RowError{File: t.file, Line: t.line, Field: "pod_group", Err: fmt.Errorf("group %q: min_member and topology differ from its first pod's", tp.Group)}
		} else if !ok && tp.Group != "" {
			groups[tp.Group] = tp
		}
		pods = append(pods, tp)
	}
	sortByCreation(pods)
	return pods, nil
}

func sameTopology(a, b *model.GangTopology) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.Required == b.Required && a.Preferred == b.Preferred
}
