package topology_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"

	"github.com/gpuplane/gpuplane/api/scheduling/v1alpha1"
	"github.com/gpuplane/gpuplane/internal/adapter"
	topologycli "github.com/gpuplane/gpuplane/internal/cli/topology"
	"github.com/gpuplane/gpuplane/internal/scheduler/model"
	"github.com/gpuplane/gpuplane/internal/testutil/build"
	"github.com/gpuplane/gpuplane/test/integration/framework"
)

// topologies creates a gpuplane Topology (block, rack, clique, host), a
// Kueue one (block, rack, host) and a KAI one (rack, clique, host), named
// after the test's namespace, and returns their names.
func (c *cluster) topologies() (ours, kueue, kai string) {
	ours, kueue, kai = c.ns+"-net", c.ns+"-kueue", c.ns+"-kai"
	c.createTyped(v1alpha1.TopologiesResource, "", build.Topology(ours, blockKey, rackKey, cliqueKey, hostKey))
	c.create(kueueTopologies, "", map[string]any{"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Topology",
		"metadata": map[string]any{"name": kueue}, "spec": map[string]any{"levels": levels(blockKey, rackKey, hostKey)}})
	c.create(kaiTopologies, "", map[string]any{"apiVersion": "kai.scheduler/v1alpha1", "kind": "Topology",
		"metadata": map[string]any{"name": kai}, "spec": map[string]any{"levels": levels(rackKey, cliqueKey, hostKey)}})
	return ours, kueue, kai
}

// view builds the core's view of the test's objects as read back from the
// API server, through the same conversion a cycle uses.
func (c *cluster) view() *adapter.View {
	c.t.Helper()
	ctx := c.t.Context()
	var objs []kruntime.Object
	nodes, err := env.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: "test-ns=" + c.ns})
	if err != nil {
		c.t.Fatal(err)
	}
	for i := range nodes.Items {
		objs = append(objs, &nodes.Items[i])
	}
	pods, err := c.pods(ctx, "")
	if err != nil {
		c.t.Fatal(err)
	}
	for i := range pods {
		objs = append(objs, &pods[i])
	}
	pgs, err := c.dyn.Resource(v1alpha1.PodGroupsResource).Namespace(c.ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		c.t.Fatal(err)
	}
	for _, u := range pgs.Items {
		var pg v1alpha1.PodGroup
		if err := kruntime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &pg); err != nil {
			c.t.Fatal(err)
		}
		objs = append(objs, &pg)
	}
	ts, err := c.dyn.Resource(v1alpha1.TopologiesResource).List(ctx, metav1.ListOptions{})
	if err != nil {
		c.t.Fatal(err)
	}
	for _, u := range ts.Items {
		var tp v1alpha1.Topology
		if err := kruntime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &tp); err != nil {
			c.t.Fatal(err)
		}
		objs = append(objs, &tp)
	}
	for _, gvr := range []schema.GroupVersionResource{kueueTopologies, kaiTopologies} {
		list, err := c.dyn.Resource(gvr).List(ctx, metav1.ListOptions{})
		if err != nil {
			c.t.Fatal(err)
		}
		for i := range list.Items {
			objs = append(objs, &list.Items[i])
		}
	}
	v, err := adapter.ViewOf(c.scheduler, objs, time.Now())
	if err != nil {
		c.t.Fatal(err)
	}
	return v
}

// The API server keeps every field of each dialect, and the scheduler
// turns what it reads back into the core's GangTopology: the levels of
// the Topology named or holding the keys, required, preferred and slices.
func TestTopologyTranslatedFromTheAPIServer(t *testing.T) {
	c := newCluster(t, 1, 2, 2)
	ours, kueue, kai := c.topologies()
	// Nobody runs c.scheduler here: the pods wait, and the view is built
	// from what the API server holds.
	gang := func(name string, n int, pg *v1alpha1.PodGroup, annotations map[string]string, labels func(i int) map[string]string) {
		if pg != nil {
			c.createTyped(v1alpha1.PodGroupsResource, c.ns, pg)
		}
		for i := range n {
			b := c.pod(fmt.Sprintf("%s-%d", name, i)).GPUs(1).Label(v1alpha1.PodGroupLabel, name)
			for k, v := range annotations {
				b.Annotation(k, v)
			}
			if labels != nil {
				for k, v := range labels(i) {
					b.Label(k, v)
				}
			}
			c.createPod(b.Obj())
		}
	}
	oursLevels := []string{blockKey, rackKey, cliqueKey, hostKey}
	gang("spec", 4, build.PodGroup(c.ns, "spec", 4).Topology(v1alpha1.TopologyConstraint{Name: ours, Required: blockKey, Preferred: rackKey,
		SliceRequired: cliqueKey, SliceSize: 2}).Obj(), nil, nil)
	gang("kueue", 2, build.PodGroup(c.ns, "kueue", 2).Obj(), map[string]string{v1alpha1.KueueRequiredTopologyAnnotation: blockKey,
		v1alpha1.KueueSliceRequiredTopologyAnnotation: hostKey, v1alpha1.KueueSliceSizeAnnotation: "1", v1alpha1.TopologyAnnotation: kueue}, nil)
	gang("kai", 2, build.PodGroup(c.ns, "kai", 2).Obj(), map[string]string{v1alpha1.KAITopologyAnnotation: kai,
		v1alpha1.KAIRequiredPlacementAnnotation: rackKey, v1alpha1.KAIPreferredPlacementAnnotation: cliqueKey}, nil)
	gang("lws", 4, build.PodGroup(c.ns, "lws", 4).Topology(v1alpha1.TopologyConstraint{Name: ours, Required: blockKey, SliceRequired: rackKey}).Obj(), nil,
		func(i int) map[string]string {
			return map[string]string{"leaderworkerset.sigs.k8s.io/group-index": fmt.Sprint(i / 2)}
		})

	want := map[string]struct {
		topo   model.GangTopology
		slices []string
	}{
		"pg/" + c.ns + "/spec": {topo: model.GangTopology{Name: "Topology " + ours, Levels: oursLevels, Required: blockKey, Preferred: rackKey, SliceRequired: cliqueKey, SliceSize: 2}},
		"pg/" + c.ns + "/kueue": {topo: model.GangTopology{Name: "Kueue Topology " + kueue, Levels: []string{blockKey, rackKey, hostKey}, Required: blockKey,
			SliceRequired: hostKey, SliceSize: 1}},
		"pg/" + c.ns + "/kai": {topo: model.GangTopology{Name: "KAI Topology " + kai, Levels: []string{rackKey, cliqueKey, hostKey}, Required: rackKey, Preferred: cliqueKey}},
		"pg/" + c.ns + "/lws": {topo: model.GangTopology{Name: "Topology " + ours, Levels: oursLevels, Required: blockKey, SliceRequired: rackKey},
			slices: []string{"lws:0", "lws:0", "lws:1", "lws:1"}},
	}
	framework.Eventually(t, 30*time.Second, "every gang in the view with its topology", func(context.Context) (bool, error) {
		v := c.view()
		var missing []string
		for name, w := range want {
			i := slices.IndexFunc(v.Snapshot.Pending, func(g model.PodGroup) bool { return g.Name == name })
			if i < 0 {
				missing = append(missing, name+" not pending")
				continue
			}
			g := v.Snapshot.Pending[i]
			if g.Topology == nil || g.Topology.Name != w.topo.Name || !slices.Equal(g.Topology.Levels, w.topo.Levels) || g.Topology.Required != w.topo.Required ||
				g.Topology.Preferred != w.topo.Preferred || g.Topology.SliceRequired != w.topo.SliceRequired || g.Topology.SliceSize != w.topo.SliceSize {
				missing = append(missing, fmt.Sprintf("%s: %+v, want %+v", name, g.Topology, w.topo))
				continue
			}
			var got []string
			for _, p := range g.Pods {
				got = append(got, p.Slice)
			}
			if w.slices != nil && !slices.Equal(got, w.slices) {
				missing = append(missing, fmt.Sprintf("%s: slices %v, want %v", name, got, w.slices))
			}
		}
		if len(v.Held) > 0 {
			missing = append(missing, fmt.Sprintf("held %v", v.Held))
		}
		return len(missing) == 0, fmt.Errorf("%s", strings.Join(missing, "; "))
	})
}

// A required level is never violated: gangs stated in each dialect are
// each bound inside one rack, where placing them blind to the topology
// would split them (each rack's first node has only half its GPUs free,
// and packing fills those first). Volcano's is read from its PodGroup and,
// where that says nothing, from its Job.
func TestTopologyGangsBoundInOneRack(t *testing.T) {
	c := newCluster(t, 3, 2, 2) // 6 racks of 2 nodes
	ours, _, kai := c.topologies()
	// Half of each rack's first node is taken.
	for node := range c.rackOf {
		if strings.HasSuffix(node, "-n0") {
			c.createPod(c.pod("filler-"+node).GPUs(4).NodeName(node).Label("role", "filler").Obj())
		}
	}
	c.waitBound("role=filler", 6)
	c.run()

	// gpuplane's PodGroup spec.topology.
	c.createTyped(v1alpha1.PodGroupsResource, c.ns, build.PodGroup(c.ns, "ours", 2).Topology(v1alpha1.TopologyConstraint{Name: ours, Required: rackKey}).Obj())
	for i := range 2 {
		c.createPod(c.pod(fmt.Sprintf("ours-%d", i)).GPUs(4).Label(v1alpha1.PodGroupLabel, "ours").Label("gang", "ours").Obj())
	}
	// Kueue's annotations on pods of a PodGroup.
	c.createTyped(v1alpha1.PodGroupsResource, c.ns, build.PodGroup(c.ns, "kueue", 2).Obj())
	for i := range 2 {
		c.createPod(c.pod(fmt.Sprintf("kueue-%d", i)).GPUs(4).Label(v1alpha1.PodGroupLabel, "kueue").Label("gang", "kueue").
			Annotation(v1alpha1.KueueRequiredTopologyAnnotation, rackKey).Obj())
	}
	// KAI's annotations on an Indexed Job, whose gang is derived.
	c.createTyped(jobs, c.ns, c.indexedJob("kai", 2, map[string]string{v1alpha1.KAITopologyAnnotation: kai, v1alpha1.KAIRequiredPlacementAnnotation: rackKey}))
	// Volcano's PodGroup: hard, tier 2 of Topology ours (tier 1 is the
	// clique, tier 2 the rack).
	c.create(volcanoPodGroups, c.ns, map[string]any{"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup",
		"metadata": map[string]any{"name": "volcano", "namespace": c.ns, "annotations": map[string]any{v1alpha1.TopologyAnnotation: ours}},
		"spec":     map[string]any{"minMember": int64(2), "networkTopology": map[string]any{"mode": "hard", "highestTierAllowed": int64(2)}}})
	for i := range 2 {
		c.createPod(c.pod(fmt.Sprintf("volcano-%d", i)).GPUs(4).Label("gang", "volcano").Annotation(v1alpha1.VolcanoGroupAnnotation, "volcano").Obj())
	}
	// The Workload API's PodGroup with a topology constraint.
	c.create(workloadPodGroups, c.ns, map[string]any{"apiVersion": "scheduling.k8s.io/v1alpha2", "kind": "PodGroup",
		"metadata": map[string]any{"name": "workload", "namespace": c.ns},
		"spec": map[string]any{"schedulingPolicy": map[string]any{"gang": map[string]any{"minCount": int64(2)}},
			"schedulingConstraints": map[string]any{"topology": []any{map[string]any{"key": rackKey}}}}})
	for i := range 2 {
		p := c.pod(fmt.Sprintf("workload-%d", i)).GPUs(4).Label("gang", "workload").Obj()
		name := "workload"
		p.Spec.SchedulingGroup = &corev1.PodSchedulingGroup{PodGroupName: &name}
		c.createPod(p)
	}

	// Volcano's Job: its PodGroup (as Volcano's job controller makes one,
	// owned by the Job) says no networkTopology; the Job's is read.
	vcjob, err := c.dyn.Resource(volcanoJobs).Namespace(c.ns).Create(t.Context(), &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job",
		"metadata": map[string]any{"name": "vcjob", "namespace": c.ns, "annotations": map[string]any{v1alpha1.TopologyAnnotation: ours}},
		"spec": map[string]any{"minAvailable": int64(2), "schedulerName": c.scheduler,
			"networkTopology": map[string]any{"mode": "hard", "highestTierAllowed": int64(2)},
			"tasks": []any{map[string]any{"name": "w", "replicas": int64(2),
				"template": map[string]any{"spec": map[string]any{"containers": []any{map[string]any{"name": "c", "image": framework.PauseImage}}}}}}}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating the Volcano Job: %v", err)
	}
	c.create(volcanoPodGroups, c.ns, map[string]any{"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup",
		"metadata": map[string]any{"name": "vcjob", "namespace": c.ns, "ownerReferences": []any{map[string]any{
			"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job", "name": "vcjob", "uid": string(vcjob.GetUID()), "controller": true}}},
		"spec": map[string]any{"minMember": int64(2)}})
	for i := range 2 {
		c.createPod(c.pod(fmt.Sprintf("vcjob-%d", i)).GPUs(4).Label("gang", "vcjob").Annotation(v1alpha1.VolcanoGroupAnnotation, "vcjob").Obj())
	}

	for _, g := range []string{"ours", "kueue", "kai", "volcano", "workload", "vcjob"} {
		t.Run(g, func(t *testing.T) {
			pods := c.waitBound("gang="+g, 2)
			racks := map[string]bool{}
			for _, p := range pods {
				racks[c.rackOf[p.Spec.NodeName]] = true
			}
			if len(racks) != 1 {
				var where []string
				for _, p := range pods {
					where = append(where, p.Name+" on "+p.Spec.NodeName)
				}
				t.Fatalf("gang %s spans racks %v: %s", g, racks, strings.Join(where, ", "))
			}
		})
	}
	// The derived groups say where their topology came from.
	for _, name := range []string{"volcano", "vcjob"} {
		pg, err := c.dyn.Resource(v1alpha1.PodGroupsResource).Namespace(c.ns).Get(t.Context(), name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if req, _, _ := unstructured.NestedString(pg.Object, "spec", "topology", "required"); req != rackKey {
			t.Errorf("mirrored PodGroup %s: spec.topology.required %q, want %q", name, req, rackKey)
		}
	}
}

// indexedJob is an Indexed Job of n pods of 4 GPUs each for this test's
// scheduler, with the given annotations on the Job, its pods labelled
// gang=name.
func (c *cluster) indexedJob(name string, n int32, annotations map[string]string) *batchv1.Job {
	mode := batchv1.IndexedCompletion
	tmpl := c.pod("x").GPUs(4).Label("gang", name).RestartPolicy(corev1.RestartPolicyNever).Obj()
	return &batchv1.Job{
		TypeMeta:   metav1.TypeMeta{APIVersion: "batch/v1", Kind: "Job"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: c.ns, Annotations: annotations},
		Spec: batchv1.JobSpec{Parallelism: &n, Completions: &n, CompletionMode: &mode,
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: tmpl.Labels}, Spec: tmpl.Spec}},
	}
}

// A topology that means nothing keeps its gang Pending, and says on the
// pods (condition and event) and the PodGroup which field to change.
func TestTopologyBadInputIsReported(t *testing.T) {
	c := newCluster(t, 1, 2, 1)
	ours, _, _ := c.topologies()
	c.run()
	c.createTyped(v1alpha1.PodGroupsResource, c.ns, build.PodGroup(c.ns, "unknown", 1).Topology(v1alpha1.TopologyConstraint{Name: "no-such-topology", Required: rackKey}).Obj())
	c.createPod(c.pod("unknown-0").GPUs(1).Label(v1alpha1.PodGroupLabel, "unknown").Obj())
	c.createPod(c.pod("level-0").GPUs(1).Annotation(v1alpha1.TopologyAnnotation, ours).
		Annotation(v1alpha1.KueueRequiredTopologyAnnotation, "gpuplane.io/topology-zone").Obj())
	c.createPod(c.pod("size-0").GPUs(1).Annotation(v1alpha1.KueueSliceRequiredTopologyAnnotation, rackKey).
		Annotation(v1alpha1.KueueSliceSizeAnnotation, "0").Obj())
	c.create(volcanoPodGroups, c.ns, map[string]any{"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup",
		"metadata": map[string]any{"name": "tier", "namespace": c.ns, "annotations": map[string]any{v1alpha1.TopologyAnnotation: ours}},
		"spec":     map[string]any{"minMember": int64(1), "networkTopology": map[string]any{"mode": "hard", "highestTierAllowed": int64(9)}}})
	c.createPod(c.pod("tier-0").GPUs(1).Annotation(v1alpha1.VolcanoGroupAnnotation, "tier").Obj())

	for _, w := range []struct{ pod, reason, msg string }{
		{"unknown-0", "InvalidTopology", `PodGroup ` + c.ns + `/unknown: spec.topology.name: topology "no-such-topology" does not exist: create a Topology named "no-such-topology"`},
		{"level-0", "InvalidTopology", `annotations.required: "gpuplane.io/topology-zone" is not one of the levels`},
		{"size-0", "InvalidTopology", `annotation kueue.x-k8s.io/podset-slice-size: "0" is not a slice size`},
		{"tier-0", "GroupingFailed", "spec.networkTopology.highestTierAllowed: 9, but Topology " + ours + " has 3 tiers above the host"},
	} {
		t.Run(w.pod, func(t *testing.T) {
			framework.Eventually(t, 60*time.Second, "pod "+w.pod+" says why it waits", func(ctx context.Context) (bool, error) {
				p, err := env.Client.CoreV1().Pods(c.ns).Get(ctx, w.pod, metav1.GetOptions{})
				if err != nil {
					return false, err
				}
				if p.Spec.NodeName != "" {
					t.Fatalf("pod %s bound to %s", w.pod, p.Spec.NodeName)
				}
				var cond *corev1.PodCondition
				for i := range p.Status.Conditions {
					if p.Status.Conditions[i].Type == corev1.PodScheduled {
						cond = &p.Status.Conditions[i]
					}
				}
				if cond == nil || cond.Status != corev1.ConditionFalse || cond.Reason != w.reason || !strings.Contains(cond.Message, w.msg) {
					return false, fmt.Errorf("it says %s", framework.SchedulerSays(p))
				}
				ev, err := env.Client.CoreV1().Events(c.ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + w.pod})
				if err != nil {
					return false, err
				}
				for _, e := range ev.Items {
					if strings.Contains(e.Message, w.msg) {
						return true, nil
					}
				}
				return false, fmt.Errorf("no event of it among %d", len(ev.Items))
			})
		})
	}
	framework.Eventually(t, 60*time.Second, "PodGroup unknown's Schedulable condition", func(ctx context.Context) (bool, error) {
		u, err := c.dyn.Resource(v1alpha1.PodGroupsResource).Namespace(c.ns).Get(ctx, "unknown", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		var pg v1alpha1.PodGroup
		if err := kruntime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &pg); err != nil {
			return false, err
		}
		for _, cd := range pg.Status.Conditions {
			if cd.Type == v1alpha1.ConditionSchedulable && cd.Status == metav1.ConditionFalse && cd.Reason == "InvalidTopology" &&
				strings.Contains(cd.Message, "spec.topology.name") && pg.Status.Phase == v1alpha1.PodGroupPending {
				return true, nil
			}
		}
		return false, fmt.Errorf("phase %s, conditions %+v", pg.Status.Phase, pg.Status.Conditions)
	})
}

// The API server refuses a Topology whose levels repeat a key, and
// `gpuplane topology convert` reads Kueue's and KAI's Topologies from the
// cluster into gpuplane Topologies it accepts.
func TestTopologyCRDAndConvert(t *testing.T) {
	c := newCluster(t, 1, 1, 1)
	_, kueue, kai := c.topologies()
	dup := build.Topology(c.ns+"-dup", rackKey, rackKey)
	u, err := kruntime.DefaultUnstructuredConverter.ToUnstructured(dup)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.dyn.Resource(v1alpha1.TopologiesResource).Create(t.Context(), &unstructured.Unstructured{Object: u}, metav1.CreateOptions{}); err == nil ||
		!strings.Contains(err.Error(), "each nodeLabel appears once") {
		t.Fatalf("a Topology with a repeated level: %v, want it refused", err)
	}

	cmd := topologycli.NewCommand()
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	cmd.SetArgs([]string{"convert", "--kubeconfig", env.ControlPlane.Kubeconfig(), kueue, kai})
	if err := cmd.ExecuteContext(t.Context()); err != nil {
		t.Fatalf("convert: %v\n%s", err, out.String())
	}
	dec := utilyaml.NewYAMLOrJSONDecoder(&out, 4096)
	var got []string
	for {
		var obj map[string]any
		if err := dec.Decode(&obj); err != nil || obj == nil {
			break
		}
		u := &unstructured.Unstructured{Object: obj}
		// Applied under a name of its own beside the originals.
		u.SetName(u.GetName() + "-converted")
		if _, err := c.dyn.Resource(v1alpha1.TopologiesResource).Create(t.Context(), u, metav1.CreateOptions{}); err != nil {
			t.Fatalf("creating the converted %s: %v", u.GetName(), err)
		}
		name := u.GetName()
		t.Cleanup(func() {
			_ = c.dyn.Resource(v1alpha1.TopologiesResource).Delete(context.Background(), name, metav1.DeleteOptions{})
		})
		ls, _, _ := unstructured.NestedSlice(u.Object, "spec", "levels")
		var keys []string
		for _, l := range ls {
			keys = append(keys, l.(map[string]any)["nodeLabel"].(string))
		}
		got = append(got, u.GetName()+"="+strings.Join(keys, ","))
	}
	want := []string{kueue + "-converted=" + strings.Join([]string{blockKey, rackKey, hostKey}, ","), kai + "-converted=" + strings.Join([]string{rackKey, cliqueKey, hostKey}, ",")}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("converted %v, want %v", got, want)
	}
}

// The topology examples are accepted by the API server as written.
func TestTopologyExamplesAreValid(t *testing.T) {
	c := newCluster(t, 1, 1, 1)
	files, err := filepath.Glob(filepath.Join(framework.RepoRoot(), "examples", "topology", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no examples: %v", err)
	}
	resources := map[string]schema.GroupVersionResource{"Topology": v1alpha1.TopologiesResource, "PodGroup": v1alpha1.PodGroupsResource, "Job": jobs}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
		for i := 0; ; i++ {
			var obj map[string]any
			if err := dec.Decode(&obj); err != nil {
				break
			}
			u := &unstructured.Unstructured{Object: obj}
			gvr, ok := resources[u.GetKind()]
			if !ok {
				t.Fatalf("%s: document %d is a %s, which this test does not know", filepath.Base(f), i, u.GetKind())
			}
			if _, err := c.dyn.Resource(gvr).Namespace(u.GetNamespace()).Create(t.Context(), u, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}); err != nil {
				t.Errorf("%s: document %d (%s %s): %v", filepath.Base(f), i, u.GetKind(), u.GetName(), err)
			}
		}
	}
}

// Slices hold: a gang required in one block, sliced by its JobSet Jobs
// (no slice size) at the rack, binds each Job's pods inside one rack even
// when the pods' names interleave the Jobs; a gang that prefers a rack
// gets one when one has room.
func TestTopologySlicesAndPreference(t *testing.T) {
	c := newCluster(t, 1, 2, 2) // one block, 2 racks of 2 nodes
	ours, _, _ := c.topologies()
	c.run()
	c.createTyped(v1alpha1.PodGroupsResource, c.ns, build.PodGroup(c.ns, "sliced", 4).
		Topology(v1alpha1.TopologyConstraint{Name: ours, Required: blockKey, SliceRequired: rackKey}).Obj())
	for i := range 4 {
		// p-0 and p-2 are Job 0's, p-1 and p-3 Job 1's.
		c.createPod(c.pod(fmt.Sprintf("sliced-%d", i)).GPUs(8).Label(v1alpha1.PodGroupLabel, "sliced").Label("gang", "sliced").
			Label("jobset.sigs.k8s.io/replicatedjob-name", "workers").Label("jobset.sigs.k8s.io/job-index", fmt.Sprint(i%2)).Obj())
	}
	pods := c.waitBound("gang=sliced", 4)
	rackOfJob := map[string]map[string]bool{}
	for _, p := range pods {
		job := p.Labels["jobset.sigs.k8s.io/job-index"]
		if rackOfJob[job] == nil {
			rackOfJob[job] = map[string]bool{}
		}
		rackOfJob[job][c.rackOf[p.Spec.NodeName]] = true
	}
	for job, racks := range rackOfJob {
		if len(racks) != 1 {
			t.Errorf("Job %s's pods span racks %v", job, racks)
		}
	}
	// The sliced gang took every GPU; once it is gone a gang preferring a
	// rack gets one.
	if err := env.Client.CoreV1().Pods(c.ns).DeleteCollection(t.Context(), metav1.DeleteOptions{GracePeriodSeconds: new(int64)}, metav1.ListOptions{LabelSelector: "gang=sliced"}); err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, 60*time.Second, "the sliced gang gone", func(ctx context.Context) (bool, error) {
		ps, err := c.pods(ctx, "gang=sliced")
		return err == nil && len(ps) == 0, fmt.Errorf("%d left (%w)", len(ps), err)
	})
	c.createTyped(v1alpha1.PodGroupsResource, c.ns, build.PodGroup(c.ns, "preferring", 2).Topology(v1alpha1.TopologyConstraint{Name: ours, Preferred: rackKey}).Obj())
	for i := range 2 {
		c.createPod(c.pod(fmt.Sprintf("preferring-%d", i)).GPUs(8).Label(v1alpha1.PodGroupLabel, "preferring").Label("gang", "preferring").Obj())
	}
	racks := map[string]bool{}
	for _, p := range c.waitBound("gang=preferring", 2) {
		racks[c.rackOf[p.Spec.NodeName]] = true
	}
	if len(racks) != 1 {
		t.Errorf("the preferring gang spans racks %v with a whole rack free", racks)
	}
}

// A gang no domain of its required level can hold says so in the core's
// words, naming the level and the best domain, on its pods' PodScheduled
// condition and on its PodGroup, not as node-by-node filter counts: every
// node alone has room for a pod.
func TestTopologyWaitingGangNamesTheLevel(t *testing.T) {
	c := newCluster(t, 1, 2, 2) // 2 racks of 2 nodes of 8 GPUs
	ours, _, _ := c.topologies()
	c.run()
	c.createTyped(v1alpha1.PodGroupsResource, c.ns, build.PodGroup(c.ns, "wide", 3).Topology(v1alpha1.TopologyConstraint{Name: ours, Required: rackKey}).Obj())
	for i := range 3 {
		c.createPod(c.pod(fmt.Sprintf("wide-%d", i)).GPUs(8).Label(v1alpha1.PodGroupLabel, "wide").Obj())
	}
	says := "no rack (" + rackKey + ") has room for the gang's 3 pods of 8 GPUs each; the best rack, "
	framework.Eventually(t, 60*time.Second, "the gang's pods name the rack level", func(ctx context.Context) (bool, error) {
		ps, err := c.pods(ctx, v1alpha1.PodGroupLabel+"=wide")
		if err != nil {
			return false, err
		}
		for _, p := range ps {
			if p.Spec.NodeName != "" {
				t.Fatalf("pod %s bound to %s: no rack holds the gang", p.Name, p.Spec.NodeName)
			}
			msg := framework.SchedulerSays(&p)
			if !strings.Contains(msg, says) || !strings.Contains(msg, "has room for 2") {
				return false, fmt.Errorf("pod %s says %q", p.Name, msg)
			}
		}
		return len(ps) == 3, nil
	})
	framework.Eventually(t, 60*time.Second, "PodGroup wide's Schedulable condition", func(ctx context.Context) (bool, error) {
		u, err := c.dyn.Resource(v1alpha1.PodGroupsResource).Namespace(c.ns).Get(ctx, "wide", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		var pg v1alpha1.PodGroup
		if err := kruntime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &pg); err != nil {
			return false, err
		}
		for _, cd := range pg.Status.Conditions {
			if cd.Type == v1alpha1.ConditionSchedulable && cd.Status == metav1.ConditionFalse && cd.Reason == "NoTopologyDomain" && strings.Contains(cd.Message, says) {
				return true, nil
			}
		}
		return false, fmt.Errorf("conditions %+v", pg.Status.Conditions)
	})
}

// KAI's Topology CRD installed after the scheduler started is read from
// then on: a gang naming a KAI Topology waits while the cluster serves no
// such kind, and is bound inside one rack once the CRD and the Topology
// exist, with no restart.
func TestTopologyCRDInstalledAfterStart(t *testing.T) {
	c := newCluster(t, 1, 2, 2)
	if err := c.dyn.Resource(crdsResource).Delete(t.Context(), "topologies.kai.scheduler", metav1.DeleteOptions{}); err != nil {
		t.Fatalf("deleting KAI's Topology CRD: %v", err)
	}
	// The package's other tests find it installed again.
	t.Cleanup(func() {
		if err := createKAITopologyCRD(context.Background(), c.dyn); err != nil {
			t.Error(err)
		}
	})
	framework.Eventually(t, 60*time.Second, "KAI's Topology no longer served", func(context.Context) (bool, error) {
		_, err := env.Client.Discovery().ServerResourcesForGroupVersion(kaiTopologies.GroupVersion().String())
		return apierrors.IsNotFound(err), fmt.Errorf("discovery answers %w", err)
	})
	framework.RunScheduler(t, adapter.Config{RESTConfig: env.Config, SchedulerName: c.scheduler, CycleInterval: 200 * time.Millisecond,
		PartialGangGrace: 2 * time.Second, TopologyRecheck: 200 * time.Millisecond})

	topo := c.ns + "-kai"
	c.createTyped(v1alpha1.PodGroupsResource, c.ns, build.PodGroup(c.ns, "kai", 2).Obj())
	for i := range 2 {
		c.createPod(c.pod(fmt.Sprintf("kai-%d", i)).GPUs(8).Label(v1alpha1.PodGroupLabel, "kai").Label("gang", "kai").
			Annotation(v1alpha1.KAITopologyAnnotation, topo).Annotation(v1alpha1.KAIRequiredPlacementAnnotation, rackKey).Obj())
	}
	framework.Eventually(t, 60*time.Second, "the gang waits for its Topology", func(ctx context.Context) (bool, error) {
		p, err := env.Client.CoreV1().Pods(c.ns).Get(ctx, "kai-0", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		if p.Spec.NodeName != "" {
			t.Fatalf("pod kai-0 bound to %s before its Topology exists", p.Spec.NodeName)
		}
		for _, cd := range p.Status.Conditions {
			if cd.Type == corev1.PodScheduled && cd.Reason == "InvalidTopology" && strings.Contains(cd.Message, `topology "`+topo+`" does not exist`) {
				return true, nil
			}
		}
		return false, fmt.Errorf("it says %s", framework.SchedulerSays(p))
	})
	installKAITopologyCRD(t, c.dyn)
	c.create(kaiTopologies, "", map[string]any{"apiVersion": "kai.scheduler/v1alpha1", "kind": "Topology",
		"metadata": map[string]any{"name": topo}, "spec": map[string]any{"levels": levels(rackKey, hostKey)}})
	racks := map[string]bool{}
	for _, p := range c.waitBound("gang=kai", 2) {
		racks[c.rackOf[p.Spec.NodeName]] = true
	}
	if len(racks) != 1 {
		t.Errorf("the gang spans racks %v, want one", racks)
	}
}
