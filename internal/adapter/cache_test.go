package adapter

import (
	"cmp"
	"fmt"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"pgregory.net/rapid"

	"github.com/gpuplane/gpuplane/api/scheduling/v1alpha1"
	"github.com/gpuplane/gpuplane/internal/scheduler/model"
	"github.com/gpuplane/gpuplane/internal/testutil/build"
)

// TestIncrementalSnapshotMatchesRebuild drives one cache and one builder
// through random pod, assumption, budget and group events, building a
// snapshot after each batch, and checks every snapshot against one built
// from scratch out of the same final objects: the indexes and the per-node
// allocations kept between cycles must never go stale.
func TestIncrementalSnapshotMatchesRebuild(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		const sched = v1alpha1.SchedulerName
		nodes := []string{"n0", "n1", "n2"}
		c := newClusterCache(sched)
		for _, n := range nodes {
			c.upsertNode(build.Node(n).Resources(rl("nvidia.com/gpu", "4", "cpu", "64", "memory", "256Gi")).Obj())
		}
		c.upsertPodGroup(build.PodGroup("ns", "gang", 2).Obj())
		pdb := &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "keep"},
			Spec: policyv1.PodDisruptionBudgetSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"keep": "yes"}}}}
		b := newBuilder(sched, -1, logr.Discard())
		r := newRefusals()
		now := time.Unix(1000, 0)
		names := []string{"a", "b", "c", "d", "e", "f"}
		for step := range rapid.IntRange(1, 12).Draw(t, "steps") {
			for range rapid.IntRange(1, 4).Draw(t, "events") {
				name := rapid.SampledFrom(names).Draw(t, "pod")
				key := "ns/" + name
				old := c.pods[key]
				switch rapid.IntRange(0, 8).Draw(t, "event") {
				case 0: // created pending, maybe in the gang, maybe another scheduler's
					p := newPod("ns", name).Limits(rl("nvidia.com/gpu", fmt.Sprint(rapid.IntRange(1, 2).Draw(t, "gpus")))).Obj()
					if rapid.Bool().Draw(t, "gang") {
						p.Labels[v1alpha1.PodGroupLabel] = "gang"
					}
					if rapid.IntRange(0, 4).Draw(t, "other") == 0 {
						p.Spec.SchedulerName = corev1.DefaultSchedulerName
					}
					c.upsertPod(p)
				case 1: // bound, with or without the scheduler's annotation
					if old != nil {
						p := old.pod.DeepCopy()
						p.Spec.NodeName = rapid.SampledFrom(nodes).Draw(t, "node")
						if rapid.Bool().Draw(t, "annotated") {
							p.Annotations = map[string]string{GPUsAnnotation: fmt.Sprint(rapid.IntRange(0, 3).Draw(t, "gpu"))}
						}
						c.upsertPod(p)
					}
				case 2:
					if old != nil && !old.bound() {
						c.mu.Lock()
						c.assume(key, assumption{node: rapid.SampledFrom(nodes).Draw(t, "node"), shares: []model.GPUShare{{Index: 3, Milli: 1000}}})
						c.mu.Unlock()
					}
				case 3:
					c.forget(key)
				case 4: // finished
					if old != nil {
						p := old.pod.DeepCopy()
						p.Status.Phase = corev1.PodSucceeded
						c.upsertPod(p)
					}
				case 5: // a status-only update
					if old != nil {
						p := old.pod.DeepCopy()
						p.Status.PodIP = fmt.Sprint("10.0.0.", step)
						c.upsertPod(p)
					}
				case 6: // a label change: into or out of a budget
					if old != nil {
						p := old.pod.DeepCopy()
						p.Labels = map[string]string{"keep": rapid.SampledFrom([]string{"yes", "no"}).Draw(t, "keep")}
						if g := old.pod.Labels[v1alpha1.PodGroupLabel]; g != "" {
							p.Labels[v1alpha1.PodGroupLabel] = g
						}
						c.upsertPod(p)
					}
				case 7:
					if old != nil {
						c.deletePod(old.pod)
					}
				case 8: // the budget's room changes
					p := pdb.DeepCopy()
					p.Status.DisruptionsAllowed = int32(rapid.IntRange(0, 1).Draw(t, "allowed"))
					c.upsertPDB(p)
				}
			}
			if rapid.Bool().Draw(t, "refuse") {
				key := "ns/" + rapid.SampledFrom(names).Draw(t, "refused")
				var uid types.UID
				if p := c.podsByKey([]string{key})[0]; p != nil {
					uid = p.UID
				}
				r.add(key, uid, now.Add(time.Duration(rapid.IntRange(0, 3).Draw(t, "for"))*time.Second))
				c.touch(key)
			}
			now = now.Add(time.Second)
			got := c.snapshot(b, r, now)
			want := rebuild(c, r, now)
			if d := diffInputs(got, want); d != "" {
				t.Fatalf("step %d: the incremental snapshot differs from a rebuild: %s", step, d)
			}
		}
	})
}

// rebuild builds a snapshot from a fresh cache and builder holding the
// same objects and assumptions as c, with the same refusals.
func rebuild(c *clusterCache, r *refusals, now time.Time) *cycleInput {
	f := newClusterCache(c.schedulerName)
	for _, n := range c.nodes {
		f.upsertNode(n.node)
	}
	for _, g := range c.podGroups {
		f.upsertPodGroup(g)
	}
	for _, p := range c.pdbs {
		f.upsertPDB(p)
	}
	for _, pi := range c.pods {
		f.upsertPod(pi.pod)
	}
	for k, a := range c.assumed {
		f.assume(k, a)
	}
	b := newBuilder(c.schedulerName, -1, logr.Discard())
	return f.snapshot(b, r, now)
}

func diffInputs(got, want *cycleInput) string {
	sortAllocs := func(snap *model.Snapshot) []model.Allocation {
		var a []model.Allocation
		for x := range snap.AllRunning() {
			a = append(a, *x)
		}
		slices.SortFunc(a, func(x, y model.Allocation) int { return cmp.Compare(x.Pod, y.Pod) })
		return a
	}
	if g, w := sortAllocs(&got.snap), sortAllocs(&want.snap); !reflect.DeepEqual(g, w) {
		return fmt.Sprintf("running\n got %+v\nwant %+v", g, w)
	}
	summary := func(in *cycleInput) map[string]string {
		out := map[string]string{}
		for name, g := range in.groups {
			keys := func(ps []*podInfo) []string {
				var k []string
				for _, p := range ps {
					k = append(k, p.key)
				}
				slices.Sort(k)
				return k
			}
			out[name] = fmt.Sprintf("pending %v bound %v finished %v held %v", keys(g.pending), keys(g.bound), keys(g.finished), g.held)
		}
		return out
	}
	if g, w := summary(got), summary(want); !reflect.DeepEqual(g, w) {
		return fmt.Sprintf("groups\n got %v\nwant %v", g, w)
	}
	pend := func(in *cycleInput) []model.PodGroup {
		p := slices.Clone(in.snap.Pending)
		slices.SortFunc(p, func(x, y model.PodGroup) int { return cmp.Compare(x.Name, y.Name) })
		return p
	}
	if g, w := pend(got), pend(want); !reflect.DeepEqual(g, w) {
		return fmt.Sprintf("pending\n got %+v\nwant %+v", g, w)
	}
	return ""
}
