package adapter

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/rest"

	"github.com/gpuplane/gpuplane/api/gpunode"
	"github.com/gpuplane/gpuplane/internal/scheduler/model"
	"github.com/gpuplane/gpuplane/internal/testutil/build"
)

const twoH100Layout = `{"v":1,"gpus":[{"i":0,"id":"0x233010DE","name":"H100","mig":false},{"i":1,"id":"0x233010DE","name":"H100","mig":true,"devices":{"1g.10gb":7}}],` +
	`"models":{"0x233010DE":[{"n":"1g.10gb","pid":19,"s":1,"c":7,"m":9856,"p":[[0,1]]},{"n":"3g.40gb","pid":9,"s":4,"c":2,"m":40000,"p":[[0,4]]}]}}`

func TestNodeMIG(t *testing.T) {
	follow := map[string]string{gpunode.LabelMIGLayoutPolicy: gpunode.MIGLayoutFollowDemand, LabelGPUCount: "2"}
	for _, tc := range []struct {
		name        string
		labels      map[string]string
		annotations map[string]string
		wantNil     bool
		warn        string
		profiles    string
		pending     []int
	}{
		{name: "a node without the label is never proposed for", labels: map[string]string{LabelGPUCount: "2"},
			annotations: map[string]string{gpunode.MIGLayoutAnnotation: twoH100Layout}, wantNil: true},
		{name: "another value of the label opts nothing in", labels: map[string]string{gpunode.LabelMIGLayoutPolicy: "static", LabelGPUCount: "2"},
			annotations: map[string]string{gpunode.MIGLayoutAnnotation: twoH100Layout}, wantNil: true},
		{name: "opted in: the model's profiles, compute slices from the name", labels: follow,
			annotations: map[string]string{gpunode.MIGLayoutAnnotation: twoH100Layout}, profiles: "[{1g.10gb 1 7} {3g.40gb 3 2}]"},
		{name: "opted in without the agent's layout yet", labels: follow, wantNil: true, warn: "has no gpuplane.io/mig-layout annotation yet"},
		{name: "a bad layout annotation", labels: follow, annotations: map[string]string{gpunode.MIGLayoutAnnotation: `{"v":9}`}, wantNil: true, warn: "v: want 1, got 9"},
		{name: "a proposal the node has reported is not pending", labels: follow, annotations: map[string]string{gpunode.MIGLayoutAnnotation: twoH100Layout,
			gpunode.MIGProposalAnnotation: `{"v":1,"gpus":[{"i":1,"mig":true,"devices":{"1g.10gb":7},"at":5}]}`}, profiles: "[{1g.10gb 1 7} {3g.40gb 3 2}]"},
		{name: "a proposal the node has not applied is pending", labels: follow, annotations: map[string]string{gpunode.MIGLayoutAnnotation: twoH100Layout,
			gpunode.MIGProposalAnnotation: `{"v":1,"gpus":[{"i":0,"mig":true,"devices":{"1g.10gb":7},"at":5}]}`}, profiles: "[{1g.10gb 1 7} {3g.40gb 3 2}]", pending: []int{0}},
		{name: "a bad proposal reads as none and says so", labels: follow, annotations: map[string]string{gpunode.MIGLayoutAnnotation: twoH100Layout,
			gpunode.MIGProposalAnnotation: `{"v":1,"gpus":[{"i":0,"mig":false,"devices":{"1g.10gb":7},"at":5}]}`}, profiles: "[{1g.10gb 1 7} {3g.40gb 3 2}]", warn: "gpus[0].devices"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			node := build.Node("n").Labels(tc.labels).Annotations(tc.annotations).
				Resources(rl("cpu", "64", "memory", "512Gi", "nvidia.com/gpu", "1", "nvidia.com/mig-1g.10gb", "7")).Obj()
			m, warn, err := convertNode(node)
			if err != nil {
				t.Fatal(err)
			}
			if (m.MIG == nil) != tc.wantNil || (tc.warn == "") != (warn == "") || !strings.Contains(warn, tc.warn) {
				t.Fatalf("MIG %+v, warning %q; want nil %v, warning with %q (none when empty)", m.MIG, warn, tc.wantNil, tc.warn)
			}
			if m.MIG == nil {
				return
			}
			if got := fmtProfiles(m.MIG.Profiles); got != tc.profiles {
				t.Errorf("profiles %s, want %s", got, tc.profiles)
			}
			if len(m.MIG.Pending) != len(tc.pending) || len(tc.pending) > 0 && m.MIG.Pending[0] != tc.pending[0] {
				t.Errorf("pending %v, want %v", m.MIG.Pending, tc.pending)
			}
		})
	}
}

func fmtProfiles(ps []model.MIGProfile) string {
	var b strings.Builder
	b.WriteString("[")
	for i, p := range ps {
		if i > 0 {
			b.WriteString(" ")
		}
		b.WriteString("{" + p.Name + " " + strconv.Itoa(p.Slices) + " " + strconv.Itoa(p.Instances) + "}")
	}
	return b.String() + "]"
}

// TestMarkRepartitioning: a GPU whose proposal is pending serves nothing
// new until the timeout; the snapshot's own nodes are not changed.
func TestMarkRepartitioning(t *testing.T) {
	node := model.Node{Name: "n", GPUs: []model.GPU{{Index: 0}, {Index: 1}}, MIG: &model.NodeMIG{
		Proposals: []gpunode.MIGProposalGPU{{Index: 1, MIG: true, Devices: map[string]int{"1g.10gb": 7}, At: 1000}}, Pending: []int{1}}}
	for _, tc := range []struct {
		name string
		now  int64
		want bool
	}{
		{"within the timeout", 1500, true},
		{"past the timeout", 3000, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			nodes := []model.Node{node}
			snap := model.Snapshot{Nodes: nodes, Now: tc.now, Layouts: model.LayoutPolicy{Timeout: 2000}}
			markRepartitioning(&snap)
			if got := snap.Nodes[0].GPUs[1].Repartitioning; got != tc.want || snap.Nodes[0].GPUs[0].Repartitioning {
				t.Fatalf("GPU 1 repartitioning %v, want %v (GPU 0 %v)", got, tc.want, snap.Nodes[0].GPUs[0].Repartitioning)
			}
			if nodes[0].GPUs[1].Repartitioning {
				t.Fatal("the caller's node was changed")
			}
		})
	}
}

func TestConfigValidatesMIGLayouts(t *testing.T) {
	base := Config{}.Defaults()
	base.RESTConfig = &rest.Config{Host: "https://127.0.0.1:1"}
	if err := base.Validate(); err != nil {
		t.Fatal(err)
	}
	if base.MIGDemandMinWait != 10*time.Second || base.MIGLayoutDwell != 5*time.Minute || base.MIGProposalTimeout != 2*time.Minute || base.MIGMaxProposalsPerNode != 1 {
		t.Fatalf("defaults %+v", base)
	}
	for _, tc := range []struct {
		name string
		set  func(*Config)
		want string
	}{
		{"min wait", func(c *Config) { c.MIGDemandMinWait = -time.Second }, "mig-demand-min-wait"},
		{"dwell", func(c *Config) { c.MIGLayoutDwell = -time.Second }, "mig-layout-dwell"},
		{"timeout", func(c *Config) { c.MIGProposalTimeout = -time.Second }, "mig-proposal-timeout"},
		{"per node", func(c *Config) { c.MIGMaxProposalsPerNode = 65 }, "mig-max-proposals-per-node"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := base
			tc.set(&c)
			if err := c.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error naming %s", err, tc.want)
			}
		})
	}
}

// TestAssumeLayouts: a proposal written but not yet seen on the node is
// pending in the next snapshot; once the node shows it, it is dropped.
func TestAssumeLayouts(t *testing.T) {
	written := gpunode.MIGProposalGPU{Index: 1, MIG: true, Devices: map[string]int{"1g.10gb": 7}, At: 1000}
	l := &loop{proposed: map[string][]gpunode.MIGProposalGPU{"n": {written}}}
	node := model.Node{Name: "n", GPUs: []model.GPU{{Index: 0}, {Index: 1}}, MIG: &model.NodeMIG{}}
	snap := model.Snapshot{Nodes: []model.Node{node}, Now: 1100, Layouts: model.LayoutPolicy{Timeout: 2000}}
	l.assumeLayouts(&snap)
	markRepartitioning(&snap)
	if m := snap.Nodes[0].MIG; len(m.Pending) != 1 || m.Pending[0] != 1 || !snap.Nodes[0].GPUs[1].Repartitioning {
		t.Fatalf("before the node shows it: %+v, GPUs %+v", m, snap.Nodes[0].GPUs)
	}
	if node.MIG.Pending != nil {
		t.Fatal("the cache's node was changed")
	}
	shown := node
	shown.MIG = &model.NodeMIG{Proposals: []gpunode.MIGProposalGPU{written}, Pending: []int{1}}
	snap = model.Snapshot{Nodes: []model.Node{shown}, Now: 1200}
	l.assumeLayouts(&snap)
	if len(l.proposed) != 0 {
		t.Fatalf("still assumed once shown: %+v", l.proposed)
	}
}

func TestAssumeLayoutsForgetsALostWrite(t *testing.T) {
	l := &loop{proposed: map[string][]gpunode.MIGProposalGPU{"n": {{Index: 1, At: 1000}}}}
	snap := model.Snapshot{Nodes: []model.Node{{Name: "n", GPUs: []model.GPU{{Index: 0}, {Index: 1}}, MIG: &model.NodeMIG{}}}, Now: 1000 + assumeProposalFor.Milliseconds() + 1}
	l.assumeLayouts(&snap)
	if len(l.proposed) != 0 || len(snap.Nodes[0].MIG.Pending) != 0 {
		t.Fatalf("a proposal written %v ago and never shown is still assumed: %+v", assumeProposalFor, l.proposed)
	}
}
