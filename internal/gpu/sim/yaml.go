package sim

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"

	"github.com/google/uuid"
	"go.yaml.in/yaml/v3"

	"github.com/gpuplane/gpuplane/internal/gpu"
)

// fileProfile is a profile file; the package documentation describes the
// format. Fields of a GPU entry override its model's; unknown fields are
// errors.
type fileProfile struct {
	Version           string       `yaml:"version"`
	Name              string       `yaml:"name"`
	DriverVersion     string       `yaml:"driverVersion"`
	CUDADriverVersion string       `yaml:"cudaDriverVersion"`
	NVMLVersion       string       `yaml:"nvmlVersion"`
	GPUs              []fileGPU    `yaml:"gpus"`
	Topology          fileTopology `yaml:"topology"`
	Fabric            *fileFabric  `yaml:"fabric"`
}

type fileGPU struct {
	// Model is a key of Models; the other fields override it.
	Model             string   `yaml:"model"`
	Count             *int     `yaml:"count"`
	Name              string   `yaml:"name"`
	Brand             string   `yaml:"brand"`
	MemoryMiB         uint64   `yaml:"memoryMiB"`
	Architecture      string   `yaml:"architecture"`
	ComputeCapability string   `yaml:"computeCapability"`
	MIG               string   `yaml:"mig"`
	MIGEnabled        bool     `yaml:"migEnabled"`
	MIGDevices        []string `yaml:"migDevices"`
	NUMANode          *int     `yaml:"numaNode"`
	NUMANodes         []int    `yaml:"numaNodes"`
	PCIBusIDs         []string `yaml:"pciBusIDs"`
	IdleWatts         float64  `yaml:"idleWatts"`
	TDPWatts          float64  `yaml:"tdpWatts"`
}

type fileTopology struct {
	// NVLink is the NVLink count between every pair (all-to-all through
	// NVSwitch); 0 means PCIe only.
	NVLink int `yaml:"nvlink"`
	// PCIe is the level between every pair; empty means NODE within a NUMA
	// node and SYS across.
	PCIe  string     `yaml:"pcie"`
	Pairs []filePair `yaml:"pairs"`
}

// fileFabric is the multi-node NVLink fabric the profile's GPUs report.
type fileFabric struct {
	ClusterUUID string  `yaml:"clusterUUID"`
	CliqueID    *uint32 `yaml:"cliqueID"`
	State       string  `yaml:"state"`
}

type filePair struct {
	GPUs   []int  `yaml:"gpus"`
	NVLink *int   `yaml:"nvlink"`
	PCIe   string `yaml:"pcie"`
}

// Defaults of a profile file.
const (
	defaultDriver = "550.54.15"
	defaultCUDA   = gpu.CUDAVersion(12040)
	maxGPUs       = 64
)

// Load returns the built-in profile of that name, or reads the profile file
// at that path. An unknown name lists the built-in profiles.
func Load(nameOrPath string) (*Profile, error) {
	if p, err := Builtin(nameOrPath); err == nil {
		return p, nil
	} else if !looksLikePath(nameOrPath) {
		return nil, err
	}
	return LoadFile(nameOrPath)
}

func looksLikePath(s string) bool {
	if strings.ContainsRune(s, filepath.Separator) || strings.ContainsRune(s, '/') {
		return true
	}
	if ext := strings.ToLower(filepath.Ext(s)); ext == ".yaml" || ext == ".yml" {
		return true
	}
	_, err := os.Stat(s)
	return err == nil
}

// LoadFile reads a profile file. Its name defaults to the file's base name.
func LoadFile(path string) (*Profile, error) {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%w %q: no such file and no built-in profile of that name (built-in profiles: %s): %w",
			ErrUnknownProfile, path, strings.Join(BuiltinNames(), ", "), err)
	}
	if err != nil {
		return nil, fmt.Errorf("reading simulated profile: %w", err)
	}
	defer func() { _ = f.Close() }()
	return Parse(f, path)
}

// Parse reads a profile from r; source names it in errors (a file path).
func Parse(r io.Reader, source string) (*Profile, error) {
	p, err := parse(r, source)
	if err != nil {
		return nil, fmt.Errorf("reading simulated profile %s: %w", source, err)
	}
	return p, nil
}

func parse(r io.Reader, source string) (*Profile, error) {
	raw, err := io.ReadAll(r)
	if err != nil {
		return nil, err
	}
	var doc yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(raw))
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("the file is empty; it needs at least a gpus list")
		}
		return nil, err
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); err == nil {
		return nil, fmt.Errorf("line %d: a profile file holds one YAML document", extra.Line)
	}
	d := &decoder{lines: map[string]int{}}
	var f fileProfile
	if err := d.decode(&doc, reflect.ValueOf(&f).Elem(), ""); err != nil {
		return nil, err
	}
	if f.Name == "" {
		f.Name = strings.TrimSuffix(filepath.Base(source), filepath.Ext(source))
	}
	return d.build(&f)
}

// decoder decodes YAML nodes into the file types strictly, remembering the
// line of every field so that later checks can point at it.
type decoder struct {
	lines map[string]int
}

func (d *decoder) errf(path string, line int, format string, args ...any) error {
	if path == "" {
		return fmt.Errorf("line %d: %s", line, fmt.Sprintf(format, args...))
	}
	return fmt.Errorf("line %d: %s: %s", line, path, fmt.Sprintf(format, args...))
}

// at formats an error about a field decoded earlier.
func (d *decoder) at(path, format string, args ...any) error {
	return d.errf(path, d.lines[path], format, args...)
}

func (d *decoder) decode(n *yaml.Node, v reflect.Value, path string) error {
	if n.Kind == yaml.DocumentNode {
		if len(n.Content) == 0 {
			return fmt.Errorf("the file is empty; it needs at least a gpus list")
		}
		n = n.Content[0]
	}
	d.lines[path] = n.Line
	if n.Kind == yaml.AliasNode {
		return d.errf(path, n.Line, "aliases are not supported in profile files")
	}
	switch v.Kind() {
	case reflect.Pointer:
		v.Set(reflect.New(v.Type().Elem()))
		return d.decode(n, v.Elem(), path)
	case reflect.Struct:
		if n.Kind != yaml.MappingNode {
			return d.errf(path, n.Line, "want a mapping with fields %s, got %s", fieldNames(v.Type()), describe(n))
		}
		seen := map[string]bool{}
		for i := 0; i+1 < len(n.Content); i += 2 {
			key, val := n.Content[i], n.Content[i+1]
			sub := key.Value
			if path != "" {
				sub = path + "." + key.Value
			}
			if seen[key.Value] {
				return d.errf(sub, key.Line, "field given twice")
			}
			seen[key.Value] = true
			f, ok := fieldByTag(v, key.Value)
			if !ok {
				where := "the top level"
				if path != "" {
					where = path
				}
				return d.errf(sub, key.Line, "unknown field in %s (allowed: %s)", where, fieldNames(v.Type()))
			}
			if err := d.decode(val, f, sub); err != nil {
				return err
			}
		}
		return nil
	case reflect.Slice:
		if n.Kind != yaml.SequenceNode {
			return d.errf(path, n.Line, "want a list, got %s", describe(n))
		}
		v.Set(reflect.MakeSlice(v.Type(), len(n.Content), len(n.Content)))
		for i, item := range n.Content {
			if err := d.decode(item, v.Index(i), fmt.Sprintf("%s[%d]", path, i)); err != nil {
				return err
			}
		}
		return nil
	}
	if n.Kind != yaml.ScalarNode {
		return d.errf(path, n.Line, "want %s, got %s", kindName(v.Kind()), describe(n))
	}
	if err := n.Decode(v.Addr().Interface()); err != nil {
		return d.errf(path, n.Line, "want %s, got %q", kindName(v.Kind()), n.Value)
	}
	return nil
}

func fieldByTag(v reflect.Value, name string) (reflect.Value, bool) {
	t := v.Type()
	for i := range t.NumField() {
		if strings.Split(t.Field(i).Tag.Get("yaml"), ",")[0] == name {
			return v.Field(i), true
		}
	}
	return reflect.Value{}, false
}

func fieldNames(t reflect.Type) string {
	names := make([]string, 0, t.NumField())
	for i := range t.NumField() {
		names = append(names, strings.Split(t.Field(i).Tag.Get("yaml"), ",")[0])
	}
	return strings.Join(names, ", ")
}

func describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		return strconv.Quote(n.Value)
	}
	return "something else"
}

func kindName(k reflect.Kind) string {
	switch k {
	case reflect.Int, reflect.Int64:
		return "an integer"
	case reflect.Uint32, reflect.Uint64:
		return "a non-negative integer"
	case reflect.Float64:
		return "a number"
	case reflect.Bool:
		return "true or false"
	case reflect.String:
		return "a string"
	}
	return k.String()
}

// build turns a decoded file into a validated Profile.
func (d *decoder) build(f *fileProfile) (*Profile, error) {
	if f.Version != "" && f.Version != "v1" {
		return nil, d.at("version", "unknown version %q (want v1)", f.Version)
	}
	p := &Profile{Name: f.Name, DriverVersion: f.DriverVersion, NVMLVersion: f.NVMLVersion, CUDADriverVersion: defaultCUDA}
	if p.DriverVersion == "" {
		p.DriverVersion = defaultDriver
	}
	if p.NVMLVersion == "" {
		p.NVMLVersion = "12." + p.DriverVersion
	}
	if f.CUDADriverVersion != "" {
		v, err := parseCUDA(f.CUDADriverVersion)
		if err != nil {
			return nil, d.at("cudaDriverVersion", "%v", err)
		}
		p.CUDADriverVersion = v
	}
	if len(f.GPUs) == 0 {
		return nil, fmt.Errorf("gpus: the profile needs at least one GPU entry (fields: %s)", fieldNames(reflect.TypeOf(fileGPU{})))
	}
	for i := range f.GPUs {
		if err := d.addGPUs(p, &f.GPUs[i], fmt.Sprintf("gpus[%d]", i)); err != nil {
			return nil, err
		}
	}
	if err := d.topology(p, &f.Topology); err != nil {
		return nil, err
	}
	if f.Fabric != nil {
		fab, err := d.fabric(f.Fabric, p.Name)
		if err != nil {
			return nil, err
		}
		p.Fabric = fab
	}
	if err := p.Validate(); err != nil {
		return nil, err
	}
	return p, nil
}

func parseCUDA(s string) (gpu.CUDAVersion, error) {
	major, minor, ok := strings.Cut(s, ".")
	ma, err1 := strconv.Atoi(major)
	mi, err2 := strconv.Atoi(minor)
	if !ok || err1 != nil || err2 != nil || ma < 1 || mi < 0 || mi > 99 {
		return 0, fmt.Errorf("want a CUDA version such as \"12.4\", got %q", s)
	}
	return gpu.CUDAVersion(ma*1000 + mi*10), nil
}

func (d *decoder) addGPUs(p *Profile, g *fileGPU, path string) error {
	count := 1
	if g.Count != nil {
		count = *g.Count
	}
	if count < 1 || len(p.GPUs)+count > maxGPUs {
		return d.at(path+".count", "want 1 or more, with at most %d GPUs in all, got %d", maxGPUs, count)
	}
	var spec GPUSpec
	if g.Model != "" {
		m, ok := findModel(g.Model)
		if !ok {
			return d.at(path+".model", "unknown model %q (known models: %s; or leave model out and give name, memoryMiB, architecture and computeCapability)",
				g.Model, strings.Join(Models(), ", "))
		}
		spec = m.spec()
	} else {
		var missing []string
		for _, f := range []struct {
			name string
			set  bool
		}{{"name", g.Name != ""}, {"memoryMiB", g.MemoryMiB != 0}, {"architecture", g.Architecture != ""}, {"computeCapability", g.ComputeCapability != ""}} {
			if !f.set {
				missing = append(missing, f.name)
			}
		}
		if len(missing) > 0 {
			return d.at(path, "a GPU without a model needs %s (or name a model: %s)", strings.Join(missing, ", "), strings.Join(Models(), ", "))
		}
		spec = GPUSpec{Brand: "NVIDIA", IdleWatts: 30, TDPWatts: 250, IdleTempC: 30, MaxTempC: 80,
			IdleSMClockMHz: 210, MaxSMClockMHz: 1500, MemClockMHz: 5000}
	}
	if g.Name != "" {
		spec.Name = g.Name
	}
	if g.Brand != "" {
		spec.Brand = g.Brand
	}
	if g.MemoryMiB != 0 {
		spec.MemoryMiB = g.MemoryMiB
	}
	spec.ReservedMiB = spec.MemoryMiB / 160
	if g.Architecture != "" {
		a, err := gpu.ParseArchitecture(g.Architecture)
		if err != nil {
			return d.at(path+".architecture", "%v", err)
		}
		spec.Architecture = a
	}
	if g.ComputeCapability != "" {
		cc, err := parseCC(g.ComputeCapability)
		if err != nil {
			return d.at(path+".computeCapability", "%v", err)
		}
		spec.ComputeCapability = cc
	}
	switch {
	case strings.EqualFold(g.MIG, "none"):
		spec.MIGTable = ""
	case g.MIG != "":
		t, ok := findMIGTable(g.MIG)
		if !ok {
			return d.at(path+".mig", "unknown MIG table %q (want none or one of %s)", g.MIG, strings.Join(MIGTables(), ", "))
		}
		spec.MIGTable = t
	}
	if g.MIGEnabled && spec.MIGTable == "" {
		return d.at(path+".migEnabled", "the GPU is not MIG-capable; give mig: one of %s", strings.Join(MIGTables(), ", "))
	}
	spec.MIGEnabled = g.MIGEnabled
	if len(g.MIGDevices) > 0 && !g.MIGEnabled {
		return d.at(path+".migDevices", "MIG devices need migEnabled: true")
	}
	spec.MIGDevices = append([]string(nil), g.MIGDevices...)
	if g.IdleWatts != 0 {
		spec.IdleWatts = g.IdleWatts
	}
	if g.TDPWatts != 0 {
		spec.TDPWatts = g.TDPWatts
	}
	if spec.TDPWatts <= spec.IdleWatts || spec.IdleWatts < 0 {
		return d.at(path, "tdpWatts (%.0f) must exceed idleWatts (%.0f), and idleWatts must not be negative", spec.TDPWatts, spec.IdleWatts)
	}
	if g.NUMANode != nil && g.NUMANodes != nil {
		return d.at(path+".numaNodes", "give numaNode or numaNodes, not both")
	}
	if g.NUMANodes != nil && len(g.NUMANodes) != count {
		return d.at(path+".numaNodes", "want one NUMA node per GPU (%d), got %d", count, len(g.NUMANodes))
	}
	if g.PCIBusIDs != nil && len(g.PCIBusIDs) != count {
		return d.at(path+".pciBusIDs", "want one PCI bus ID per GPU (%d), got %d", count, len(g.PCIBusIDs))
	}
	for k := range count {
		s := spec
		switch {
		case g.NUMANode != nil:
			s.NUMANode = *g.NUMANode
		case g.NUMANodes != nil:
			s.NUMANode = g.NUMANodes[k]
		default:
			s.NUMANode = 0
		}
		if s.NUMANode < -1 {
			return d.at(path, "NUMA node must be -1 (unknown) or more, got %d", s.NUMANode)
		}
		s.PCIBusID = fmt.Sprintf("0000:%02x:00.0", 0x10+3*len(p.GPUs))
		if g.PCIBusIDs != nil {
			s.PCIBusID = strings.ToLower(g.PCIBusIDs[k])
			if !validBusID(s.PCIBusID) {
				return d.at(fmt.Sprintf("%s.pciBusIDs[%d]", path, k), "want a PCI bus ID such as 0000:18:00.0, got %q", g.PCIBusIDs[k])
			}
		}
		p.GPUs = append(p.GPUs, s)
	}
	return nil
}

func parseCC(s string) (gpu.ComputeCapability, error) {
	major, minor, ok := strings.Cut(s, ".")
	ma, err1 := strconv.Atoi(major)
	mi, err2 := strconv.Atoi(minor)
	if !ok || err1 != nil || err2 != nil || ma < 1 || mi < 0 {
		return gpu.ComputeCapability{}, fmt.Errorf("want a compute capability such as \"8.0\", got %q", s)
	}
	return gpu.ComputeCapability{Major: ma, Minor: mi}, nil
}

func validBusID(s string) bool {
	var dom, bus, dev, fn int
	n, err := fmt.Sscanf(s, "%04x:%02x:%02x.%1x", &dom, &bus, &dev, &fn)
	return err == nil && n == 4 && len(s) == len("0000:00:00.0")
}

func (d *decoder) topology(p *Profile, t *fileTopology) error {
	n := len(p.GPUs)
	if t.NVLink < 0 {
		return d.at("topology.nvlink", "want 0 or more NVLinks, got %d", t.NVLink)
	}
	var level *gpu.PCIeLevel
	if t.PCIe != "" {
		l, err := gpu.ParsePCIeLevel(t.PCIe)
		if err != nil {
			return d.at("topology.pcie", "%v", err)
		}
		level = &l
	}
	p.Links = newLinks(n)
	for i := range n {
		for j := range n {
			if i == j {
				continue
			}
			l := gpu.Link{NVLinks: t.NVLink, PCIe: numaLevel(p.GPUs[i].NUMANode, p.GPUs[j].NUMANode)}
			if level != nil {
				l.PCIe = *level
			}
			p.Links[i][j] = l
		}
	}
	seen := map[[2]int]string{}
	for k, pr := range t.Pairs {
		path := fmt.Sprintf("topology.pairs[%d]", k)
		if len(pr.GPUs) != 2 || pr.GPUs[0] == pr.GPUs[1] || min(pr.GPUs[0], pr.GPUs[1]) < 0 || max(pr.GPUs[0], pr.GPUs[1]) >= n {
			return d.at(path+".gpus", "want two different GPU indices from 0 to %d, got %v", n-1, pr.GPUs)
		}
		i, j := min(pr.GPUs[0], pr.GPUs[1]), max(pr.GPUs[0], pr.GPUs[1])
		if prev, dup := seen[[2]int{i, j}]; dup {
			return d.at(path+".gpus", "pair %d-%d already described by %s", i, j, prev)
		}
		seen[[2]int{i, j}] = path
		l := p.Links[i][j]
		if pr.PCIe != "" {
			lv, err := gpu.ParsePCIeLevel(pr.PCIe)
			if err != nil {
				return d.at(path+".pcie", "%v", err)
			}
			l.PCIe = lv
		}
		if pr.NVLink != nil {
			if *pr.NVLink < 0 {
				return d.at(path+".nvlink", "want 0 or more NVLinks, got %d", *pr.NVLink)
			}
			l.NVLinks = *pr.NVLink
		}
		if err := crossNUMA(p.GPUs[i].NUMANode, p.GPUs[j].NUMANode, l.PCIe); err != nil {
			return d.at(path, "gpus %d and %d are %v", i, j, err)
		}
		p.Links[i][j], p.Links[j][i] = l, l
	}
	if level != nil {
		for i := range n {
			for j := i + 1; j < n; j++ {
				if _, paired := seen[[2]int{i, j}]; paired {
					continue
				}
				if err := crossNUMA(p.GPUs[i].NUMANode, p.GPUs[j].NUMANode, *level); err != nil {
					return d.at("topology.pcie", "gpus %d and %d are %v (set the pair's level under topology.pairs, or leave pcie out)", i, j, err)
				}
			}
		}
	}
	return nil
}

// fabricStates are the states a profile file may give its fabric.
var fabricStates = []gpu.FabricState{gpu.FabricNotStarted, gpu.FabricInProgress, gpu.FabricCompleted}

// fabric reads the fabric section: a cluster UUID (default: named after
// the profile), a clique ID (default 1) and a state (default completed).
func (d *decoder) fabric(f *fileFabric, profile string) (*FabricSpec, error) {
	out := &FabricSpec{ClusterUUID: FabricClusterUUID(profile), CliqueID: 1, State: gpu.FabricCompleted}
	if f.ClusterUUID != "" {
		u, err := uuid.Parse(f.ClusterUUID)
		if err != nil || len(f.ClusterUUID) != 36 || u == uuid.Nil {
			return nil, d.at("fabric.clusterUUID", "want a non-zero UUID in its canonical form (8-4-4-4-12 hex digits), got %q", f.ClusterUUID)
		}
		out.ClusterUUID = u.String()
	}
	if f.CliqueID != nil {
		out.CliqueID = *f.CliqueID
	}
	if f.State != "" {
		names := make([]string, len(fabricStates))
		found := false
		for i, s := range fabricStates {
			names[i] = s.String()
			if s.String() == f.State {
				out.State, found = s, true
			}
		}
		if !found {
			return nil, d.at("fabric.state", "want one of %s, got %q (leave the fabric section out for GPUs without one)", strings.Join(names, ", "), f.State)
		}
	}
	return out, nil
}
