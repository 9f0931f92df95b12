package simulator

import (
	"fmt"
	"math"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/gpuplane/gpuplane/internal/scheduler/model"
)

const topoTrace = `
nodes:
- {name: a, count: 2, milliCPU: 64000, memoryMiB: 262144, gpus: 8, gpuModel: H100, domains: {gpuplane.io/block: b1, gpuplane.io/rack: r1}}
- {name: b, count: 2, milliCPU: 64000, memoryMiB: 262144, gpus: 8, gpuModel: H100, domains: {gpuplane.io/block: b1, gpuplane.io/rack: r2}}
pods:
- name: train
  count: 4
  minMember: 4
  gpus: 8
  slicePods: 2
  topology: {levels: [gpuplane.io/block, gpuplane.io/rack, kubernetes.io/hostname], required: gpuplane.io/block, sliceRequired: gpuplane.io/rack}
- {name: solo, gpus: 1}
`

func TestReadYAMLTraceTopology(t *testing.T) {
	tr, err := ReadYAMLTrace("t.yaml", strings.NewReader(topoTrace))
	if err != nil {
		t.Fatal(err)
	}
	if got := tr.Nodes[2].Domains; got[RackLabel] != "r2" || got[BlockLabel] != "b1" || got[hostnameLabel] != "b-0" {
		t.Fatalf("node b-0 domains = %v", got)
	}
	var slicesSeen []string
	for _, p := range tr.Pods {
		if p.Group != "train" {
			if p.Topology != nil || p.Slice != "" {
				t.Fatalf("pod %s outside the gang got topology %+v slice %q", p.Name, p.Topology, p.Slice)
			}
			continue
		}
		if p.Topology == nil || p.Topology.Required != BlockLabel || p.Topology.SliceRequired != RackLabel {
			t.Fatalf("pod %s topology = %+v", p.Name, p.Topology)
		}
		slicesSeen = append(slicesSeen, p.Slice)
	}
	if want := []string{"s0", "s0", "s1", "s1"}; !slices.Equal(slicesSeen, want) {
		t.Fatalf("slices = %v, want %v", slicesSeen, want)
	}

	bad := []struct{ name, yaml, want string }{
		{"level not among levels", "nodes: []\npods:\n- {name: g, count: 2, minMember: 2, topology: {levels: [x], preferred: y}}\n", "pods[0].topology.preferred"},
		{"no levels", "nodes: []\npods:\n- {name: g, count: 2, minMember: 2, topology: {preferred: y}}\n", "pods[0].topology.levels"},
		{"topology without a gang", "nodes: []\npods:\n- {name: g, count: 2, topology: {levels: [x], preferred: x}}\n", "pods[0].topology: places a gang"},
		{"slicePods without a slice level", "nodes: []\npods:\n- {name: g, count: 2, minMember: 2, slicePods: 1, topology: {levels: [x], preferred: x}}\n", "pods[0].slicePods"},
		{"slicePods without topology", "nodes: []\npods:\n- {name: g, count: 2, minMember: 2, slicePods: 1}\n", "pods[0].slicePods"},
		{"slice level without a size", "nodes: []\npods:\n- {name: g, count: 2, minMember: 2, topology: {levels: [x, y], preferred: x, sliceRequired: y}}\n", "sliceRequired"},
		{"empty domain value", "nodes:\n- {name: n, domains: {gpuplane.io/rack: \"\"}}\npods: []\n", "nodes[0].domains[gpuplane.io/rack]"},
		{"long level key", "nodes: []\npods:\n- {name: g, count: 2, minMember: 2, topology: {levels: [" + strings.Repeat("k", 400) + "], preferred: " + strings.Repeat("k", 400) + "}}\n", "levels[0]"},
	}
	for _, tc := range bad {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ReadYAMLTrace("t.yaml", strings.NewReader(tc.yaml))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want one naming %q", err, tc.want)
			}
		})
	}
	t.Run("too many domains", func(t *testing.T) {
		var b strings.Builder
		b.WriteString("nodes:\n- name: n\n  domains:\n")
		for i := range MaxNodeDomains + 1 {
			fmt.Fprintf(&b, "    k%d: v\n", i)
		}
		b.WriteString("pods: []\n")
		if _, err := ReadYAMLTrace("t.yaml", strings.NewReader(b.String())); err == nil || !strings.Contains(err.Error(), "at most 16") {
			t.Fatalf("err = %v", err)
		}
	})
}

func TestParseOpenBTopology(t *testing.T) {
	nodes, err := ParseOpenBNodes("n.csv", strings.NewReader("sn,cpu_milli,memory_mib,gpu,model,block,rack,clique\nn0,1000,1000,8,G2,b1,r1,c1\nn1,1000,1000,8,G2,,,\n"))
	if err != nil {
		t.Fatal(err)
	}
	if d := nodes[0].Domains; d[BlockLabel] != "b1" || d[RackLabel] != "r1" || d[CliqueLabel] != "c1" || d[hostnameLabel] != "n0" {
		t.Fatalf("n0 domains = %v", d)
	}
	if d := nodes[1].Domains; len(d) != 1 {
		t.Fatalf("n1 without topology columns got domains %v", d)
	}
	const head = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,pod_group,min_member,required_topology,preferred_topology\n"
	pods, err := ParseOpenBPods("p.csv", strings.NewReader(head+"p0,1,1,8,1000,g,2,block,rack\np1,1,1,8,1000,g,2,block,rack\np2,1,1,1,1000,,,,\n"))
	if err != nil {
		t.Fatal(err)
	}
	if p := pods[0]; p.Group != "g" || p.MinMember != 2 || p.Topology == nil || p.Topology.Required != BlockLabel || p.Topology.Preferred != RackLabel {
		t.Fatalf("p0 = %+v topology %+v", p, p.Topology)
	}
	if pods[2].Topology != nil || pods[2].Group != "" {
		t.Fatalf("p2 = %+v", pods[2])
	}
	bad := []struct{ name, rows, want string }{
		{"unknown level", "p0,1,1,8,1000,g,2,row,\n", "not a level"},
		{"preferred wider than required", "p0,1,1,8,1000,g,2,rack,block\n", "wider"},
		{"topology without group", "p0,1,1,8,1000,,,rack,\n", "pod_group"},
		{"group members disagree", "p0,1,1,8,1000,g,2,rack,\np1,1,1,8,1000,g,2,block,\n", "differ"},
		{"min_member too large", "p0,1,1,8,1000,g,99999999999,,\n", "min_member"},
	}
	for _, tc := range bad {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := ParseOpenBPods("p.csv", strings.NewReader(head+tc.rows)); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want one naming %q", err, tc.want)
			}
		})
	}
	if _, err := ParseOpenBNodes("n.csv", strings.NewReader("sn,cpu_milli,memory_mib,gpu,model,rack\nn0,1,1,1,G2,"+strings.Repeat("r", 64)+"\n")); err == nil || !strings.Contains(err.Error(), "rack") {
		t.Fatalf("a 64-character rack was accepted: %v", err)
	}
}

func TestParseLayout(t *testing.T) {
	tests := []struct {
		in   string
		want Layout
		bad  bool
	}{
		{in: "", want: NoLayout},
		{in: "nodes-per-rack=8,racks-per-block=4", want: Layout{8, 4}},
		{in: "nodes-per-rack=18", want: Layout{NodesPerRack: 18}},
		{in: "racks-per-block=4", bad: true},
		{in: "nodes-per-rack=0", bad: true},
		{in: "nodes-per-rack=x", bad: true},
		{in: "nodes-per-rack=8,rows=2", bad: true},
		{in: "nodes-per-rack=99999", bad: true},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			got, err := ParseLayout(tc.in)
			if tc.bad {
				if err == nil {
					t.Fatalf("ParseLayout(%q) = %+v, want an error", tc.in, got)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("ParseLayout(%q) = %+v, %v; want %+v", tc.in, got, err, tc.want)
			}
			if back, err := ParseLayout(got.String()); err != nil || back != got {
				t.Fatalf("String() %q does not read back: %+v, %v", got.String(), back, err)
			}
		})
	}
}

func gpuNode(name, gpuModel string, gpus int) model.Node {
	n := model.Node{Name: name, MilliCPU: 64000, MemoryMiB: 262144, Domains: map[string]string{hostnameLabel: name}}
	for g := range gpus {
		n.GPUs = append(n.GPUs, model.GPU{Index: g, Model: gpuModel})
	}
	return n
}

func TestLayoutApply(t *testing.T) {
	// Five 8-GPU H100 nodes interleaved with three 2-GPU T4 nodes.
	tr := &Trace{Nodes: []model.Node{gpuNode("h0", "H100", 8), gpuNode("t0", "T4", 2), gpuNode("h1", "H100", 8), gpuNode("h2", "H100", 8),
		gpuNode("t1", "T4", 2), gpuNode("h3", "H100", 8), gpuNode("h4", "H100", 8), gpuNode("t2", "T4", 2)}}
	racks, blocks := Layout{NodesPerRack: 2, RacksPerBlock: 2}.Apply(tr)
	got := map[string]string{}
	for _, n := range tr.Nodes {
		got[n.Name] = n.Domains[BlockLabel] + "/" + n.Domains[RackLabel]
		if n.Domains[hostnameLabel] != n.Name {
			t.Fatalf("%s lost its hostname domain: %v", n.Name, n.Domains)
		}
	}
	// H100s first (more GPUs), two per rack in trace order, two racks a
	// block; the T4s start a new rack in a new block.
	want := map[string]string{"h0": "b1/r1", "h1": "b1/r1", "h2": "b1/r2", "h3": "b1/r2", "h4": "b2/r3",
		"t0": "b3/r4", "t1": "b3/r4", "t2": "b3/r5"}
	if !reflect.DeepEqual(got, want) || racks != 5 || blocks != 3 {
		t.Fatalf("layout = %v (%d racks, %d blocks), want %v (5, 3)", got, racks, blocks, want)
	}
}

func TestParseSizes(t *testing.T) {
	got, err := ParseSizes("1:70,2:10,4:15,8:5")
	if err != nil || !reflect.DeepEqual(got, PhillySizes) {
		t.Fatalf("ParseSizes = %v, %v; want %v", got, err, PhillySizes)
	}
	for _, bad := range []string{"", "0:1", "2:0", "2:-1", "x:1", "2", "5000:1", "2:NaN"} {
		if _, err := ParseSizes(bad); err == nil {
			t.Errorf("ParseSizes(%q) accepted", bad)
		}
	}
}

// trainingCluster is rackCount racks of eight 8-GPU nodes, with two 2-GPU
// nodes the generator must not pick.
func trainingCluster(rackCount int) *Trace {
	tr := &Trace{Source: "test"}
	for i := range rackCount * 8 {
		tr.Nodes = append(tr.Nodes, gpuNode(fmt.Sprintf("n%d", i), "H100", 8))
	}
	tr.Nodes = append(tr.Nodes, gpuNode("small0", "T4", 2), gpuNode("small1", "T4", 2))
	Layout{NodesPerRack: 8, RacksPerBlock: 2}.Apply(tr)
	return tr
}

func TestAddTraining(t *testing.T) {
	spec := TrainingSpec{Jobs: 4000, Sizes: PhillySizes, RequiredShare: 0.25, Load: 0.9, Seed: 7, Start: 100}
	a, b := trainingCluster(4), trainingCluster(4)
	if _, err := AddTraining(a, spec); err != nil {
		t.Fatal(err)
	}
	if _, err := AddTraining(b, spec); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(a.Pods, b.Pods) {
		t.Fatal("the same seed made two different traces")
	}
	c := trainingCluster(4)
	spec.Seed = 8
	if _, err := AddTraining(c, spec); err != nil {
		t.Fatal(err)
	}
	if reflect.DeepEqual(a.Pods, c.Pods) {
		t.Fatal("seeds 7 and 8 made the same trace")
	}
	size := map[string]int{}
	required := map[string]bool{}
	var work float64
	first, last := int64(math.MaxInt64), int64(0)
	for _, p := range a.Pods {
		r := p.Request
		if r.GPUs != 8 || !slices.Equal(r.GPUModels, []string{"H100"}) || r.MilliCPU != 32000 {
			t.Fatalf("pod %s asks for %+v, want all 8 H100s of a node and half its CPU", p.Name, r)
		}
		g := p.Group
		if g == "" {
			g = p.Name
			if p.Topology != nil {
				t.Fatalf("lone pod %s has a topology", p.Name)
			}
		} else if p.Topology == nil || p.MinMember < 2 {
			t.Fatalf("gang pod %s: minMember %d topology %+v", p.Name, p.MinMember, p.Topology)
		} else {
			if err := p.Topology.Check("topology"); err != nil {
				t.Fatal(err)
			}
			required[g] = p.Topology.Required == RackLabel
		}
		size[g]++
		work += 8 * float64(p.Duration)
		first, last = min(first, p.CreatedAt), max(last, p.CreatedAt)
	}
	if first < 100 {
		t.Fatalf("a job arrived at %d, before the start 100", first)
	}
	hist := map[int]int{}
	for _, n := range size {
		hist[n]++
	}
	if len(size) != 4000 {
		t.Fatalf("%d jobs, want 4000", len(size))
	}
	for _, s := range PhillySizes {
		if got := float64(hist[s.Pods]) / 4000; math.Abs(got-s.Share) > 0.02 {
			t.Errorf("share of %d-pod jobs = %.3f, want %.2f", s.Pods, got, s.Share)
		}
	}
	req := 0
	for _, r := range required {
		if r {
			req++
		}
	}
	if got := float64(req) / float64(len(required)); math.Abs(got-0.25) > 0.04 {
		t.Errorf("share of gangs that require a rack = %.3f, want 0.25", got)
	}
	// The offered load over the arrival span is what was asked, on the
	// 32 H100 nodes (256 GPUs).
	if got := work / (256 * float64(last-first)); math.Abs(got-0.9) > 0.1 {
		t.Errorf("offered load = %.3f, want about 0.9", got)
	}

	t.Run("a gang no rack can hold only prefers one", func(t *testing.T) {
		tr := trainingCluster(2)
		if _, err := AddTraining(tr, TrainingSpec{Jobs: 50, Sizes: []SizeShare{{16, 1}}, RequiredShare: 1, Load: 1, Seed: 1}); err != nil {
			t.Fatal(err)
		}
		for _, p := range tr.Pods {
			if p.Topology.Required != "" || p.Topology.Preferred != RackLabel {
				t.Fatalf("a 16-pod gang on 8-node racks got %+v", p.Topology)
			}
		}
	})
	t.Run("errors", func(t *testing.T) {
		flat := &Trace{Nodes: []model.Node{gpuNode("n", "H100", 8)}}
		if _, err := AddTraining(flat, TrainingSpec{Jobs: 1, Sizes: PhillySizes, Load: 1}); err == nil || !strings.Contains(err.Error(), "--layout") {
			t.Fatalf("no racks: err = %v", err)
		}
		for _, s := range []TrainingSpec{{Jobs: 0, Sizes: PhillySizes, Load: 1}, {Jobs: 1, Load: 1}, {Jobs: 1, Sizes: PhillySizes}, {Jobs: 1, Sizes: PhillySizes, Load: 1, RequiredShare: 2}} {
			if _, err := AddTraining(trainingCluster(1), s); err == nil {
				t.Errorf("AddTraining(%+v) accepted", s)
			}
		}
	})
}
