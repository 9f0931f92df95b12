package scheduler_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpuplane/gpuplane/api/scheduling/v1alpha1"
	"github.com/gpuplane/gpuplane/internal/adapter"
	"github.com/gpuplane/gpuplane/test/integration/framework"
)

const zoneLabel = "topology.kubernetes.io/zone"

// zonedGPUNodes returns n 8-GPU kwok nodes in zones z0, z1, ... round
// robin over zones.
func zonedGPUNodes(n, zones int, prefix string) []*framework.NodeBuilder {
	out := gpuNodes(n, prefix)
	for i, b := range out {
		b.Label(zoneLabel, fmt.Sprintf("z%d", i%zones))
	}
	return out
}

func appTerm(key, app string) corev1.PodAffinityTerm {
	return corev1.PodAffinityTerm{LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": app}}, TopologyKey: key}
}

// placements returns, for the pods labelled app, where each is bound ("" when
// it waits), once every one of them is bound or says why it waits.
func (c *cluster) placements(app string, wantBound int) map[string]*corev1.Pod {
	c.t.Helper()
	c.waitBound("app="+app, wantBound, 60*time.Second)
	var out map[string]*corev1.Pod
	framework.Eventually(c.t, 30*time.Second, "waiting pods of app="+app+" say why", func(ctx context.Context) (bool, error) {
		ps, err := c.pods(ctx, "app="+app)
		if err != nil {
			return false, err
		}
		out = ps
		for _, p := range ps {
			if p.Spec.NodeName == "" && framework.SchedulerSays(p) == "" {
				return false, fmt.Errorf("pod %s has no condition yet", p.Name)
			}
		}
		return true, nil
	})
	return out
}

func nodesOf(ps map[string]*corev1.Pod) map[string]int {
	out := map[string]int{}
	for _, p := range ps {
		if p.Spec.NodeName != "" {
			out[p.Spec.NodeName]++
		}
	}
	return out
}

// TestRequiredPodAntiAffinityOnePerNode: eight one-GPU pods that repel each
// other per node on six nodes: six bound on six nodes, two pending with
// pod anti-affinity as their reason (kube-scheduler's outcome).
func TestRequiredPodAntiAffinityOnePerNode(t *testing.T) {
	c := newCluster(t, gpuNodes(6, "anti")...)
	c.run(adapter.Config{})
	for i := range 8 {
		p := c.pod(fmt.Sprintf("w%d", i)).GPUs(1).Label("app", "anti").Obj()
		p.Spec.Affinity = &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{
			RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{appTerm("kubernetes.io/hostname", "anti")}}}
		c.createPod(p)
	}
	ps := c.placements("anti", 6)
	if on := nodesOf(ps); len(on) != 6 {
		t.Fatalf("bound pods share nodes: %v", on)
	}
	for _, p := range ps {
		if p.Spec.NodeName == "" {
			c.waitCondition(p.Name, corev1.PodReasonUnschedulable, "6 pod anti-affinity", 30*time.Second)
		}
	}
}

// TestTopologySpreadOverZones: six pods with maxSkew 1 over three zones,
// DoNotSchedule, on two nodes per zone: two per zone, where packing alone
// would put them all on one node.
func TestTopologySpreadOverZones(t *testing.T) {
	c := newCluster(t, zonedGPUNodes(6, 3, "spread")...)
	c.run(adapter.Config{})
	for i := range 6 {
		p := c.pod(fmt.Sprintf("s%d", i)).GPUs(1).Label("app", "spread").Obj()
		p.Spec.TopologySpreadConstraints = []corev1.TopologySpreadConstraint{{MaxSkew: 1, TopologyKey: zoneLabel, WhenUnsatisfiable: corev1.DoNotSchedule,
			LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "spread"}}}}
		c.createPod(p)
	}
	ps := c.placements("spread", 6)
	zoneOf := map[string]string{}
	nodes, err := env.Client.CoreV1().Nodes().List(t.Context(), listBy("test-ns="+c.ns))
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes.Items {
		zoneOf[n.Name] = n.Labels[zoneLabel]
	}
	perZone := map[string]int{}
	for _, p := range ps {
		perZone[zoneOf[p.Spec.NodeName]]++
	}
	if !maps.Equal(perZone, map[string]int{"z0": 2, "z1": 2, "z2": 2}) {
		t.Fatalf("pods per zone %v, want 2/2/2 (nodes: %v)", perZone, nodesOf(ps))
	}
}

// TestRequiredPodAffinityBesideAnotherPod: a pod with required affinity to
// another pod's node goes there, where packing puts a pod without it
// elsewhere.
func TestRequiredPodAffinityBesideAnotherPod(t *testing.T) {
	nodes := gpuNodes(3, "aff")
	c := newCluster(t, nodes...)
	c.run(adapter.Config{})
	dbNode := nodes[2].Obj().Name
	// A busy pod makes one node the one packing prefers; the db pod sits
	// on another.
	c.create(c.pod("busy").GPUs(4).Label("app", "busy"), c.pod("db").Label("app", "db").NodeSelector("kubernetes.io/hostname", dbNode))
	c.waitBound("app in (busy, db)", 2, 60*time.Second)
	c.create(c.pod("plain").GPUs(1).Label("app", "plain"))
	plain := c.placements("plain", 1)["plain"].Spec.NodeName
	if plain == dbNode {
		t.Fatalf("packing put the plain pod on %s, beside db: the test needs it elsewhere", plain)
	}
	f := c.pod("follower").GPUs(1).Label("app", "follower").Obj()
	f.Spec.Affinity = &corev1.Affinity{PodAffinity: &corev1.PodAffinity{
		RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{appTerm("kubernetes.io/hostname", "db")}}}
	c.createPod(f)
	if got := c.placements("follower", 1)["follower"].Spec.NodeName; got != dbNode {
		t.Fatalf("follower bound to %s, want %s beside db (plain went to %s)", got, dbNode, plain)
	}
}

// TestGangMembersRepelPerNode: a gang of four whose members repel each other
// per node lands one per node on four nodes, all at once.
func TestGangMembersRepelPerNode(t *testing.T) {
	c := newCluster(t, gpuNodes(4, "gang-anti")...)
	c.podGroup("ring", 4, "")
	for i := range 4 {
		p := c.pod(fmt.Sprintf("r%d", i)).GPUs(1).Label("app", "ring").Label(v1alpha1.PodGroupLabel, "ring").Obj()
		p.Spec.Affinity = &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{
			RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{appTerm("kubernetes.io/hostname", "ring")}}}
		c.createPod(p)
	}
	c.run(adapter.Config{})
	ps := c.placements("ring", 4)
	if on := nodesOf(ps); len(on) != 4 {
		t.Fatalf("gang members share nodes: %v", on)
	}
	if names := slices.Sorted(maps.Keys(ps)); len(names) != 4 {
		t.Fatalf("pods %v", names)
	}
}
