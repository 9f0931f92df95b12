package operators_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/gpuplane/gpuplane/api/scheduling/v1alpha1"
	"github.com/gpuplane/gpuplane/test/integration/framework"
)

var leaderWorkerSets = framework.LeaderWorkerSets

const lwsGroupIndexLabel = "leaderworkerset.sigs.k8s.io/group-index"

// startLWS runs the LeaderWorkerSet controller with its webhooks
// registered for namespace ns (framework.Env.StartLWS).
func startLWS(t *testing.T, ns string) {
	t.Helper()
	env.StartLWS(t, ns)
}

// lws creates a LeaderWorkerSet of replicas groups, each a leader and
// size - 1 workers, gpus GPUs per pod, as its users write it, with the
// spec fields of extra.
func (c *cluster) lws(name string, replicas, size int64, gpus int, extra ...map[string]any) {
	c.t.Helper()
	spec := c.podSpec(gpus)
	spec["restartPolicy"] = "Always" // a StatefulSet's pods
	obj := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
		"metadata": map[string]any{"name": name, "namespace": c.ns},
		"spec": map[string]any{
			"replicas": replicas,
			"leaderWorkerTemplate": map[string]any{
				"size":           size,
				"workerTemplate": map[string]any{"metadata": map[string]any{"labels": map[string]any{"lws": name}}, "spec": spec},
			},
		},
	}}
	for _, e := range extra {
		maps.Copy(obj.Object["spec"].(map[string]any), e)
	}
	env.CreateLeaderWorkerSet(c.t, c.dyn, obj)
}

// boundByGroup counts the bound pods and all pods matching selector per
// LWS group index.
func (c *cluster) boundByGroup(ctx context.Context, selector string) (bound, total map[string]int, err error) {
	list, err := env.Client.CoreV1().Pods(c.ns).List(ctx, metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		return nil, nil, err
	}
	bound, total = map[string]int{}, map[string]int{}
	for _, p := range list.Items {
		g := p.Labels[lwsGroupIndexLabel]
		total[g]++
		if p.Spec.NodeName != "" {
			bound[g]++
		}
	}
	return bound, total, nil
}

// derivedGroups lists this test's derived PodGroups by name, with their
// minMember and whether the scheduler said they cannot be placed.
func (c *cluster) derivedGroups(ctx context.Context) (map[string]int64, map[string]bool, error) {
	list, err := c.dyn.Resource(v1alpha1.PodGroupsResource).Namespace(c.ns).List(ctx, metav1.ListOptions{LabelSelector: v1alpha1.DerivedLabel + "=true"})
	if err != nil {
		return nil, nil, err
	}
	minMember, unschedulable := map[string]int64{}, map[string]bool{}
	for _, u := range list.Items {
		minMember[u.GetName()], _, _ = unstructured.NestedInt64(u.Object, "spec", "minMember")
		conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
		for _, x := range conds {
			if m, ok := x.(map[string]any); ok && m["type"] == v1alpha1.ConditionSchedulable && m["status"] == string(metav1.ConditionFalse) {
				unschedulable[u.GetName()] = true
			}
		}
	}
	return minMember, unschedulable, nil
}

// A LeaderWorkerSet submitted through its controller, with no PodGroup
// written, is one gang per group (a leader and its workers), not one for
// the whole set: the groups of one that fits are each bound whole, and a
// group that cannot fit binds none of its pods, though one would fit,
// until room is made for all of them.
func TestLeaderWorkerSetGangPerGroup(t *testing.T) {
	c := newCluster(t, 3) // 24 GPUs
	startLWS(t, c.ns)
	c.runScheduler()
	c.lws("pair", 2, 2, 4) // 2 groups of 2 pods x 4 GPUs: 16 GPUs
	framework.Eventually(t, 90*time.Second, "both of pair's groups bound whole", func(ctx context.Context) (bool, error) {
		b, all, err := c.boundByGroup(ctx, "lws=pair")
		return err == nil && b["0"] == 2 && b["1"] == 2, fmt.Errorf("bound %v of %v (%w)", b, all, err)
	})
	// 3 pods x 8 GPUs: with pair running only 8 GPUs are free, room for
	// one of them.
	c.lws("too-big", 1, 3, 8)
	framework.Eventually(t, 90*time.Second, "too-big's group refused whole", func(ctx context.Context) (bool, error) {
		b, all, err := c.boundByGroup(ctx, "lws=too-big")
		if err == nil && b["0"] > 0 {
			t.Fatalf("%d of too-big's pods bound: its group of 3 x 8 GPUs cannot fit the 8 GPUs pair leaves", b["0"])
		}
		mm, refused, gerr := c.derivedGroups(ctx)
		var name string
		for n := range mm {
			if strings.HasPrefix(n, "leaderworkerset-too-big-0-") {
				name = n
			}
		}
		return err == nil && gerr == nil && all["0"] == 3 && refused[name],
			fmt.Errorf("too-big has %v pods, group %q unschedulable %v (%w, %w)", all, name, refused[name], err, gerr)
	})
	mm, _, err := c.derivedGroups(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for n, m := range mm {
		got = append(got, fmt.Sprintf("%s=%d", n[:strings.LastIndex(n, "-")], m))
	}
	slices.Sort(got)
	if want := []string{"leaderworkerset-pair-0=2", "leaderworkerset-pair-1=2", "leaderworkerset-too-big-0=3"}; !slices.Equal(got, want) {
		t.Errorf("derived groups %v, want %v: one per LWS group, sized by leaderWorkerTemplate.size", got, want)
	}
	bg := metav1.DeletePropagationBackground
	if err := c.dyn.Resource(leaderWorkerSets).Namespace(c.ns).Delete(t.Context(), "pair", metav1.DeleteOptions{PropagationPolicy: &bg}); err != nil {
		t.Fatal(err)
	}
	c.deletePods("lws=pair")
	framework.Eventually(t, 90*time.Second, "too-big bound whole once pair is gone", func(ctx context.Context) (bool, error) {
		b, all, err := c.boundByGroup(ctx, "lws=too-big")
		return err == nil && b["0"] == 3, fmt.Errorf("bound %v of %v (%w)", b, all, err)
	})
}

// Two groups of one LeaderWorkerSet that do not fit together never both
// start in part: one is bound whole and the other waits whole.
func TestLeaderWorkerSetGroupsCompete(t *testing.T) {
	c := newCluster(t, 2) // 16 GPUs
	startLWS(t, c.ns)
	c.runScheduler()
	c.lws("rivals", 2, 2, 8) // each group 16 GPUs: one at a time
	var running, waiting string
	framework.Eventually(t, 90*time.Second, "one group bound whole, the other made and none of it bound", func(ctx context.Context) (bool, error) {
		b, all, err := c.boundByGroup(ctx, "lws=rivals")
		if err != nil {
			return false, err
		}
		if b["0"] > 0 && b["1"] > 0 {
			t.Fatalf("both groups started: bound %v of %v", b, all)
		}
		switch {
		case b["0"] == 2:
			running, waiting = "0", "1"
		case b["1"] == 2:
			running, waiting = "1", "0"
		}
		_, refused, err := c.derivedGroups(ctx)
		waitingRefused := false
		for n := range refused {
			if waiting != "" && strings.HasPrefix(n, "leaderworkerset-rivals-"+waiting+"-") {
				waitingRefused = true
			}
		}
		return err == nil && running != "" && all[waiting] == 2 && waitingRefused,
			fmt.Errorf("bound %v of %v, the waiting group refused %v (%w)", b, all, waitingRefused, err)
	})
	if b, all, err := c.boundByGroup(t.Context(), "lws=rivals"); err != nil || b[waiting] != 0 || b[running] != 2 {
		t.Fatalf("bound %v of %v (%v): want group %s whole and none of %s", b, all, err, running, waiting)
	}
}

// With startupPolicy LeaderReady, LWS makes a group's workers only once
// its leader is ready: the leader is placed alone, and its workers are a
// gang of their own (size - 1), bound whole or not at all.
func TestLeaderWorkerSetLeaderReady(t *testing.T) {
	c := newCluster(t, 1) // 8 GPUs
	startLWS(t, c.ns)
	c.runScheduler()
	// A leader and two workers of 4 GPUs: the leader fits, and then room
	// for one worker only.
	c.lws("staged", 1, 3, 4, map[string]any{"startupPolicy": "LeaderReady"})
	framework.Eventually(t, 90*time.Second, "the leader bound alone, its workers made and refused whole", func(ctx context.Context) (bool, error) {
		list, err := env.Client.CoreV1().Pods(c.ns).List(ctx, metav1.ListOptions{LabelSelector: "lws=staged"})
		if err != nil {
			return false, err
		}
		leader, workers, workersBound := false, 0, 0
		for _, p := range list.Items {
			if p.Labels["leaderworkerset.sigs.k8s.io/worker-index"] == "0" {
				leader = p.Spec.NodeName != ""
				continue
			}
			workers++
			if p.Spec.NodeName != "" {
				workersBound++
			}
		}
		if workersBound > 0 {
			t.Fatalf("%d of the workers bound: two workers of 4 GPUs cannot fit the 4 GPUs their leader leaves", workersBound)
		}
		mm, refused, err := c.derivedGroups(ctx)
		var name string
		for n := range mm {
			if strings.HasPrefix(n, "leaderworkerset-staged-") {
				name = n
			}
		}
		return err == nil && leader && workers == 2 && strings.HasPrefix(name, "leaderworkerset-staged-0-workers-") && mm[name] == 2 && refused[name] && len(mm) == 1,
			fmt.Errorf("leader bound %v, %d workers, groups %v, %q refused %v (%w)", leader, workers, mm, name, refused[name], err)
	})
}

// deletePods deletes the pods matching selector at once (kwok's pods have
// no kubelet to finish them) and waits until they are gone.
func (c *cluster) deletePods(selector string) {
	c.t.Helper()
	framework.Eventually(c.t, 60*time.Second, "pods "+selector+" gone", func(ctx context.Context) (bool, error) {
		pods, err := env.Client.CoreV1().Pods(c.ns).List(ctx, metav1.ListOptions{LabelSelector: selector})
		if err != nil {
			return false, err
		}
		for _, p := range pods.Items {
			_ = env.Client.CoreV1().Pods(c.ns).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: new(int64(0))})
		}
		return len(pods.Items) == 0, fmt.Errorf("%d pods left", len(pods.Items))
	})
}
