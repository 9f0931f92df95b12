package adapter

import (
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/gpuplane/gpuplane/api/scheduling/v1alpha1"
	"github.com/gpuplane/gpuplane/internal/scheduler/model"
	"github.com/gpuplane/gpuplane/internal/testutil/build"
)

const (
	blockKey  = "example.com/block"
	rackKey   = "example.com/rack"
	cliqueKey = "nvidia.com/gpu.clique"
	hostKey   = "kubernetes.io/hostname"
)

// topoNodes are four nodes in two racks of one block, labelled with every
// level.
func topoNodes() []runtime.Object {
	var out []runtime.Object
	for i, rack := range []string{"r1", "r1", "r2", "r2"} {
		name := "n" + string(rune('0'+i))
		out = append(out, build.Node(name).CPU("64").Memory("256Gi").Pods(110).GPUs(8).
			Labels(map[string]string{blockKey: "b1", rackKey: rack, cliqueKey: "c-" + rack, hostKey: name}).Obj())
	}
	return out
}

// waiting returns builders of n pending pods of gpuplane-scheduler named
// prefix-0... in namespace ns.
func waiting(ns, prefix string, n int) []*build.PodBuilder {
	out := make([]*build.PodBuilder, n)
	for i := range out {
		out[i] = build.Pod(ns, prefix+"-"+string(rune('0'+i))).SchedulerName(v1alpha1.SchedulerName).GPUs(1)
	}
	return out
}

func objsOf(bs []*build.PodBuilder, extra ...runtime.Object) []runtime.Object {
	out := append(topoNodes(), extra...)
	for _, b := range bs {
		out = append(out, b.Obj())
	}
	return out
}

// pendingGroup returns the pending group of that core name.
func pendingGroup(t *testing.T, v *View, name string) *model.PodGroup {
	t.Helper()
	for i := range v.Snapshot.Pending {
		if v.Snapshot.Pending[i].Name == name {
			return &v.Snapshot.Pending[i]
		}
	}
	t.Fatalf("no pending group %s; pending %d, held %v", name, len(v.Snapshot.Pending), v.Held)
	return nil
}

func view(t *testing.T, objs []runtime.Object) *View {
	t.Helper()
	v, err := ViewOf(v1alpha1.SchedulerName, objs, time.Unix(1000, 0))
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// Every dialect a gang states its topology in reaches the core as one
// GangTopology, with the levels of the Topology it names or has its keys.
func TestTopologyDialects(t *testing.T) {
	topo := build.Topology("net", blockKey, rackKey, cliqueKey, hostKey)
	kueue := build.ForeignTopology("kueue.x-k8s.io/v1beta2", "kueue-net", "example.com/zone", blockKey, rackKey)
	kai := build.ForeignTopology("kai.scheduler/v1alpha1", "kai-net", rackKey, cliqueKey, hostKey)
	levels := []string{blockKey, rackKey, cliqueKey, hostKey}
	inGroup := func(bs []*build.PodBuilder, group string) []*build.PodBuilder {
		for _, b := range bs {
			b.Label(v1alpha1.PodGroupLabel, group)
		}
		return bs
	}
	annotate := func(bs []*build.PodBuilder, kv ...string) []*build.PodBuilder {
		for _, b := range bs {
			for i := 0; i < len(kv); i += 2 {
				b.Annotation(kv[i], kv[i+1])
			}
		}
		return bs
	}
	for _, c := range []struct {
		name  string
		objs  []runtime.Object
		group string
		want  model.GangTopology
	}{
		{"PodGroup spec.topology", objsOf(inGroup(waiting("ns", "a", 2), "pg"), topo,
			build.PodGroup("ns", "pg", 2).Topology(v1alpha1.TopologyConstraint{Name: "net", Required: rackKey, Preferred: cliqueKey}).Obj()),
			"pg/ns/pg", model.GangTopology{Name: "Topology net", Levels: levels, Required: rackKey, Preferred: cliqueKey}},
		{"PodGroup with slices of a size", objsOf(inGroup(waiting("ns", "a", 4), "pg"), topo,
			build.PodGroup("ns", "pg", 4).Topology(v1alpha1.TopologyConstraint{Name: "net", Required: blockKey, SliceRequired: rackKey, SliceSize: 2}).Obj()),
			"pg/ns/pg", model.GangTopology{Name: "Topology net", Levels: levels, Required: blockKey, SliceRequired: rackKey, SliceSize: 2}},
		{"gpuplane's pod annotations", objsOf(annotate(inGroup(waiting("ns", "a", 2), "pg"), v1alpha1.TopologyAnnotation, "net", v1alpha1.TopologyRequiredAnnotation, rackKey),
			topo, build.PodGroup("ns", "pg", 2).Obj()),
			"pg/ns/pg", model.GangTopology{Name: "Topology net", Levels: levels, Required: rackKey}},
		{"Kueue's annotations find the Topology with the key", objsOf(annotate(inGroup(waiting("ns", "a", 2), "pg"), v1alpha1.KueuePreferredTopologyAnnotation, "example.com/zone"),
			topo, kueue, build.PodGroup("ns", "pg", 2).Obj()),
			"pg/ns/pg", model.GangTopology{Name: "Kueue Topology kueue-net", Levels: []string{"example.com/zone", blockKey, rackKey}, Preferred: "example.com/zone"}},
		{"Kueue's annotations, gpuplane's Topology first", objsOf(annotate(inGroup(waiting("ns", "a", 2), "pg"), v1alpha1.KueueRequiredTopologyAnnotation, rackKey,
			v1alpha1.KueueSliceRequiredTopologyAnnotation, hostKey, v1alpha1.KueueSliceSizeAnnotation, "1"), kueue, topo, build.PodGroup("ns", "pg", 2).Obj()),
			"pg/ns/pg", model.GangTopology{Name: "Topology net", Levels: levels, Required: rackKey, SliceRequired: hostKey, SliceSize: 1}},
		{"KAI's annotations name KAI's Topology", objsOf(annotate(inGroup(waiting("ns", "a", 2), "pg"), v1alpha1.KAITopologyAnnotation, "kai-net",
			v1alpha1.KAIRequiredPlacementAnnotation, rackKey, v1alpha1.KAIPreferredPlacementAnnotation, cliqueKey), kai, topo, build.PodGroup("ns", "pg", 2).Obj()),
			"pg/ns/pg", model.GangTopology{Name: "KAI Topology kai-net", Levels: []string{rackKey, cliqueKey, hostKey}, Required: rackKey, Preferred: cliqueKey}},
		{"a required key alone, without a Topology", objsOf(annotate(inGroup(waiting("ns", "a", 2), "pg"), v1alpha1.KueueRequiredTopologyAnnotation, "example.com/pod-of-racks"),
			build.PodGroup("ns", "pg", 2).Obj()),
			"pg/ns/pg", model.GangTopology{Name: "label example.com/pod-of-racks", Levels: []string{"example.com/pod-of-racks"}, Required: "example.com/pod-of-racks"}},
		{"a lone pod's annotations", objsOf(annotate(waiting("ns", "solo", 1), v1alpha1.TopologyRequiredAnnotation, rackKey), topo),
			"pod/ns/solo-0", model.GangTopology{Name: "Topology net", Levels: levels, Required: rackKey}},
		{"a derived group's pods over its spec", objsOf(annotate(inGroup(waiting("ns", "a", 2), "pg"), v1alpha1.KueueRequiredTopologyAnnotation, cliqueKey), topo,
			build.PodGroup("ns", "pg", 2).Label(v1alpha1.DerivedLabel, "true").Topology(v1alpha1.TopologyConstraint{Required: rackKey}).Obj()),
			"pg/ns/pg", model.GangTopology{Name: "Topology net", Levels: levels, Required: cliqueKey}},
		{"a PodGroup's spec over its pods", objsOf(annotate(inGroup(waiting("ns", "a", 2), "pg"), v1alpha1.KueueRequiredTopologyAnnotation, cliqueKey), topo,
			build.PodGroup("ns", "pg", 2).Topology(v1alpha1.TopologyConstraint{Required: rackKey}).Obj()),
			"pg/ns/pg", model.GangTopology{Name: "Topology net", Levels: levels, Required: rackKey}},
	} {
		t.Run(c.name, func(t *testing.T) {
			v := view(t, c.objs)
			g := pendingGroup(t, v, c.group)
			if g.Topology == nil {
				t.Fatalf("group %s has no topology", c.group)
			}
			if got := *g.Topology; got.Name != c.want.Name || !slices.Equal(got.Levels, c.want.Levels) || got.Required != c.want.Required ||
				got.Preferred != c.want.Preferred || got.SliceRequired != c.want.SliceRequired || got.SliceSize != c.want.SliceSize {
				t.Fatalf("topology %+v, want %+v", got, c.want)
			}
			// The core reads the level keys from the nodes' domains.
			for _, n := range v.Snapshot.Nodes {
				for _, l := range c.want.Levels {
					if _, ok := n.Domains[l]; !ok && strings.HasPrefix(l, "example.com/") && l != "example.com/zone" && l != "example.com/pod-of-racks" {
						t.Errorf("node %s: no domain for %s", n.Name, l)
					}
				}
			}
		})
	}
	t.Run("no topology", func(t *testing.T) {
		v := view(t, objsOf(inGroup(waiting("ns", "a", 2), "pg"), topo, build.PodGroup("ns", "pg", 2).Obj()))
		if g := pendingGroup(t, v, "pg/ns/pg"); g.Topology != nil {
			t.Fatalf("topology %+v, want none", g.Topology)
		}
	})
}

// A gang sliced without a size is sliced by its workload's sub-groups:
// each pod's Slice names its JobSet Job, LeaderWorkerSet group or
// PyTorchJob replica type.
func TestTopologySubGroupSlices(t *testing.T) {
	topo := build.Topology("net", blockKey, rackKey, cliqueKey, hostKey)
	pg := build.PodGroup("ns", "pg", 4).Topology(v1alpha1.TopologyConstraint{Required: blockKey, SliceRequired: rackKey}).Obj()
	for _, c := range []struct {
		name   string
		labels []map[string]string
		want   []string
	}{
		{"JobSet", []map[string]string{
			{jobSetReplicatedJobLabel: "workers", jobSetJobIndexLabel: "0"}, {jobSetReplicatedJobLabel: "workers", jobSetJobIndexLabel: "0"},
			{jobSetReplicatedJobLabel: "workers", jobSetJobIndexLabel: "1"}, {jobSetReplicatedJobLabel: "driver", jobSetJobIndexLabel: "0"}},
			[]string{"jobset:workers/0", "jobset:workers/0", "jobset:workers/1", "jobset:driver/0"}},
		{"LeaderWorkerSet", []map[string]string{{lwsGroupIndexLabel: "0"}, {lwsGroupIndexLabel: "0"}, {lwsGroupIndexLabel: "1"}, {lwsGroupIndexLabel: "1"}},
			[]string{"lws:0", "lws:0", "lws:1", "lws:1"}},
		{"PyTorchJob", []map[string]string{{kubeflowReplicaTypeLabel: "master"}, {kubeflowReplicaTypeLabel: "worker"}, {kubeflowReplicaTypeLabel: "worker"}, {kubeflowReplicaTypeLabel: "Worker"}},
			[]string{"kubeflow:master", "kubeflow:worker", "kubeflow:worker", "kubeflow:worker"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			bs := waiting("ns", "p", 4)
			for i, b := range bs {
				b.Label(v1alpha1.PodGroupLabel, "pg")
				for k, val := range c.labels[i] {
					b.Label(k, val)
				}
			}
			g := pendingGroup(t, view(t, objsOf(bs, topo, pg)), "pg/ns/pg")
			for i, p := range g.Pods {
				if want := c.want[strings.IndexByte("0123", p.Name[len(p.Name)-1])]; p.Slice != want {
					t.Errorf("pod %s (%d): slice %q, want %q", p.Name, i, p.Slice, want)
				}
			}
		})
	}
	t.Run("a pod of no sub-group", func(t *testing.T) {
		bs := waiting("ns", "p", 4)
		for _, b := range bs {
			b.Label(v1alpha1.PodGroupLabel, "pg")
		}
		v := view(t, objsOf(bs, topo, pg))
		if why := v.Held["ns/p-0"]; !strings.Contains(why, "PodGroup ns/pg: spec.topology: sliceRequired \"example.com/rack\" without a slice size") ||
			!strings.Contains(why, "set the slice size") {
			t.Fatalf("held %q", why)
		}
	})
	sized := build.PodGroup("ns", "pg", 4).Topology(v1alpha1.TopologyConstraint{Required: blockKey, SliceRequired: rackKey, SliceSize: 2}).Obj()
	t.Run("slices of a size hold consecutive ranks", func(t *testing.T) {
		bs := waiting("ns", "p", 4)
		// Names sort against the ranks: p-0 has rank 3.
		for i, b := range bs {
			b.Label(v1alpha1.PodGroupLabel, "pg").Label(jobCompletionIndexLabel, string(rune('3'-i)))
		}
		g := pendingGroup(t, view(t, objsOf(bs, topo, sized)), "pg/ns/pg")
		var names, got []string
		for _, p := range g.Pods {
			names, got = append(names, p.Name), append(got, p.Slice)
		}
		if want := []string{"ns/p-3", "ns/p-2", "ns/p-1", "ns/p-0"}; !slices.Equal(names, want) {
			t.Fatalf("pods in order %v, want by rank %v", names, want)
		}
		if want := []string{"#0", "#0", "#1", "#1"}; !slices.Equal(got, want) {
			t.Fatalf("slices %q, want each named by its rank's slice %q", got, want)
		}
	})
	t.Run("slices of a size without ranks", func(t *testing.T) {
		bs := waiting("ns", "p", 4)
		for i, b := range bs {
			b.Label(v1alpha1.PodGroupLabel, "pg")
			if i > 0 {
				b.Label(jobCompletionIndexLabel, string(rune('0'+i)))
			}
		}
		// p-0 has no rank: the core counts the slices in pending order.
		g := pendingGroup(t, view(t, objsOf(bs, topo, sized)), "pg/ns/pg")
		for _, p := range g.Pods {
			if p.Slice != "" && p.Name == "ns/p-0" {
				t.Errorf("pod %s without a rank: slice %q, want none", p.Name, p.Slice)
			}
		}
	})
}

const jobCompletionIndexLabel = "batch.kubernetes.io/job-completion-index"

// A topology that means nothing keeps its gang waiting with a message
// that names the field and what to change.
func TestTopologyBadInput(t *testing.T) {
	topo := build.Topology("net", blockKey, rackKey, cliqueKey, hostKey)
	inGroup := func(bs []*build.PodBuilder, kv ...string) []*build.PodBuilder {
		for _, b := range bs {
			b.Label(v1alpha1.PodGroupLabel, "pg")
			for i := 0; i < len(kv); i += 2 {
				b.Annotation(kv[i], kv[i+1])
			}
		}
		return bs
	}
	for _, c := range []struct {
		name string
		objs []runtime.Object
		want string
	}{
		{"unknown topology", objsOf(inGroup(waiting("ns", "a", 2)), topo,
			build.PodGroup("ns", "pg", 2).Topology(v1alpha1.TopologyConstraint{Name: "nope", Required: rackKey}).Obj()),
			`PodGroup ns/pg: spec.topology.name: topology "nope" does not exist: create a Topology named "nope" or name an existing one`},
		{"level not in the topology", objsOf(inGroup(waiting("ns", "a", 2)), topo,
			build.PodGroup("ns", "pg", 2).Topology(v1alpha1.TopologyConstraint{Name: "net", Required: "example.com/zone"}).Obj()),
			`PodGroup ns/pg: spec.topology.required: "example.com/zone" is not one of the levels`},
		{"preferred wider than required", objsOf(inGroup(waiting("ns", "a", 2)), topo,
			build.PodGroup("ns", "pg", 2).Topology(v1alpha1.TopologyConstraint{Name: "net", Required: rackKey, Preferred: blockKey}).Obj()),
			`spec.topology.preferred: "example.com/block" is wider than the required level`},
		{"bad slice size", objsOf(inGroup(waiting("ns", "a", 2)), topo,
			build.PodGroup("ns", "pg", 2).Topology(v1alpha1.TopologyConstraint{Name: "net", Required: rackKey, SliceSize: 2}).Obj()),
			`PodGroup ns/pg: spec.topology.sliceSize: a slice size needs sliceRequired`},
		{"slice wider than the gang", objsOf(inGroup(waiting("ns", "a", 2)), topo,
			build.PodGroup("ns", "pg", 2).Topology(v1alpha1.TopologyConstraint{Required: rackKey, SliceRequired: blockKey, SliceSize: 1}).Obj()),
			`spec.topology.sliceRequired: "example.com/block" is wider than the gang's level`},
		{"bad annotation", objsOf(inGroup(waiting("ns", "a", 2), v1alpha1.KueueSliceRequiredTopologyAnnotation, rackKey, v1alpha1.KueueSliceSizeAnnotation, "zero"), topo,
			build.PodGroup("ns", "pg", 2).Obj()),
			`annotation kueue.x-k8s.io/podset-slice-size: "zero" is not a slice size`},
		{"members disagree", append(objsOf(inGroup(waiting("ns", "a", 1), v1alpha1.KueueRequiredTopologyAnnotation, rackKey), topo, build.PodGroup("ns", "pg", 2).Obj()),
			build.Pod("ns", "b").SchedulerName(v1alpha1.SchedulerName).GPUs(1).Label(v1alpha1.PodGroupLabel, "pg").Annotation(v1alpha1.KueueRequiredTopologyAnnotation, blockKey).Obj()),
			`the pods of group ns/pg ask for different topologies: pod ns/a-0 asks {required example.com/rack}, pod ns/b asks {required example.com/block}`},
		{"invalid Topology object", objsOf(inGroup(waiting("ns", "a", 2)), build.Topology("dup", rackKey, rackKey),
			build.PodGroup("ns", "pg", 2).Topology(v1alpha1.TopologyConstraint{Name: "dup", Required: rackKey}).Obj()),
			`spec.topology.name: Topology dup is invalid: spec.levels[1]: "example.com/rack" is levels[0] already`},
	} {
		t.Run(c.name, func(t *testing.T) {
			v := view(t, c.objs)
			for _, p := range v.Snapshot.Pending {
				if p.Name == "pg/ns/pg" {
					t.Fatalf("group offered to the core with %+v", p.Topology)
				}
			}
			if why := v.Held["ns/a-0"]; !strings.Contains(why, c.want) {
				t.Fatalf("held %q, want it to contain %q", why, c.want)
			}
		})
	}
}

// The book answers the grouper with the cluster's Topology when a gang
// names none: its only one, else the one named default.
func TestTopologyBookDefault(t *testing.T) {
	b := newTopologyBook()
	if _, _, err := b.Levels(""); err == nil || !strings.Contains(err.Error(), "the cluster has no Topology") {
		t.Fatalf("no Topology: %v", err)
	}
	b.put(topoKueue, "only", []string{rackKey, hostKey})
	if name, l, err := b.Levels(""); err != nil || name != "only" || !slices.Equal(l, []string{rackKey, hostKey}) {
		t.Fatalf("one Topology: %s %v %v", name, l, err)
	}
	b.put(topoGpuplane, "other", []string{blockKey})
	if _, _, err := b.Levels(""); err == nil || !strings.Contains(err.Error(), `the cluster has 2 Topologies and none is named "default"`) {
		t.Fatalf("two Topologies: %v", err)
	}
	b.put(topoGpuplane, DefaultTopologyName, []string{blockKey, rackKey})
	if name, l, err := b.Levels(""); err != nil || name != DefaultTopologyName || len(l) != 2 {
		t.Fatalf("with a default: %s %v %v", name, l, err)
	}
	b.remove(topoGpuplane, DefaultTopologyName)
	if _, _, err := b.Levels("default"); err == nil {
		t.Fatal("a removed Topology still answers")
	}
}

// A PodGroup's spec.topology and the Topology objects it is resolved
// against are cluster input: whatever they hold, resolve returns an error
// or a GangTopology the core's Check accepts, and never panics.
func FuzzTopologyResolve(f *testing.F) {
	f.Add("net", "example.com/rack", "", "kubernetes.io/hostname", int32(2), "example.com/block example.com/rack kubernetes.io/hostname", "")
	f.Add("", "", "rack", "", int32(0), "", "rack host")
	f.Add("", "a", "b", "c", int32(-1), "a a", "c b a")
	f.Fuzz(func(t *testing.T, name, req, pref, slice string, size int32, ours, kueue string) {
		b := newTopologyBook()
		b.put(topoGpuplane, "net", strings.Fields(ours))
		b.put(topoKueue, "kueue", foreignLevels(build.ForeignTopology("kueue.x-k8s.io/v1beta2", "kueue", strings.Fields(kueue)...).Object))
		tc := &v1alpha1.TopologyConstraint{Name: name, Required: req, Preferred: pref, SliceRequired: slice, SliceSize: size}
		gt, err := b.resolve(tc, "spec.topology")
		if err != nil {
			if !strings.Contains(err.Error(), "spec.topology") {
				t.Fatalf("error %q does not name the field", err)
			}
			return
		}
		if err := gt.Check("gt"); err != nil {
			t.Fatalf("resolved %+v, which the core refuses: %v", gt, err)
		}
	})
}

// A running member of a gang carries its sub-group into the snapshot, so
// that the pods its slice still needs join it.
func TestRunningMemberCarriesItsSlice(t *testing.T) {
	topo := build.Topology("net", blockKey, rackKey, cliqueKey, hostKey)
	pg := build.PodGroup("ns", "pg", 4).Topology(v1alpha1.TopologyConstraint{Required: blockKey, SliceRequired: rackKey}).Obj()
	bs := waiting("ns", "p", 4)
	for i, b := range bs {
		b.Label(v1alpha1.PodGroupLabel, "pg").Label(lwsGroupIndexLabel, string(rune('0'+i/2)))
	}
	bs[0].NodeName("n0").Phase(corev1.PodRunning)
	lone := build.Pod("ns", "lone").SchedulerName(v1alpha1.SchedulerName).GPUs(1).Label(lwsGroupIndexLabel, "0").NodeName("n1").Phase(corev1.PodRunning)
	v := view(t, objsOf(append(bs, lone), topo, pg))
	got := map[string]string{}
	for _, chunk := range v.Snapshot.RunningByNode {
		for _, a := range chunk {
			got[a.Pod] = a.Slice
		}
	}
	if got["ns/p-0"] != "lws:0" {
		t.Errorf("running member ns/p-0: slice %q, want lws:0", got["ns/p-0"])
	}
	if s, ok := got["ns/lone"]; !ok || s != "" {
		t.Errorf("a running pod of no gang: slice %q (listed %v), want none", s, ok)
	}
	if g := pendingGroup(t, v, "pg/ns/pg"); len(g.Pods) != 3 || g.Pods[0].Slice != "lws:0" {
		t.Errorf("pending %+v, want p-1 of lws:0 first", g.Pods)
	}
}

// A running member of a gang sliced by size carries its rank's slice into
// the snapshot, named as its pending peers' are, whether the PodGroup or
// the pods (Kueue's annotations) state the size; so a pod made again for
// a rank joins its slice's running pods.
func TestRunningMemberCarriesItsSizeSlice(t *testing.T) {
	topo := build.Topology("net", blockKey, rackKey, cliqueKey, hostKey)
	for _, c := range []struct {
		name     string
		pg       *v1alpha1.PodGroup
		annotate bool
		// allRun: every pod runs, so only running pods state the size.
		allRun bool
	}{
		{"PodGroup spec.topology", build.PodGroup("ns", "pg", 4).Topology(v1alpha1.TopologyConstraint{Required: blockKey, SliceRequired: rackKey, SliceSize: 2}).Obj(), false, false},
		{"Kueue's pod annotations", build.PodGroup("ns", "pg", 4).Obj(), true, false},
		{"Kueue's pod annotations, every pod running", build.PodGroup("ns", "pg", 4).Obj(), true, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			bs := waiting("ns", "p", 4)
			for i, b := range bs {
				b.Label(v1alpha1.PodGroupLabel, "pg").Label(jobCompletionIndexLabel, string(rune('0'+i)))
				if c.annotate {
					b.Annotation(v1alpha1.KueueRequiredTopologyAnnotation, blockKey).Annotation(v1alpha1.KueueSliceRequiredTopologyAnnotation, rackKey).
						Annotation(v1alpha1.KueueSliceSizeAnnotation, "2")
				}
			}
			// Ranks 1 and 2 run, in different slices; 0 and 3 were made
			// again.
			bs[1].NodeName("n0").Phase(corev1.PodRunning)
			bs[2].NodeName("n2").Phase(corev1.PodRunning)
			if c.allRun {
				bs[0].NodeName("n1").Phase(corev1.PodRunning)
				bs[3].NodeName("n3").Phase(corev1.PodRunning)
			}
			v := view(t, objsOf(bs, topo, c.pg))
			got := map[string]string{}
			for _, chunk := range v.Snapshot.RunningByNode {
				for _, a := range chunk {
					got[a.Pod] = a.Slice
				}
			}
			if got["ns/p-1"] != "#0" || got["ns/p-2"] != "#1" {
				t.Errorf("running slices %v, want ns/p-1 in #0 and ns/p-2 in #1", got)
			}
			if c.allRun {
				return
			}
			g := pendingGroup(t, v, "pg/ns/pg")
			if len(g.Pods) != 2 || g.Pods[0].Slice != "#0" || g.Pods[1].Slice != "#1" {
				t.Errorf("pending %+v, want p-0 in #0 and p-3 in #1", g.Pods)
			}
		})
	}
}
