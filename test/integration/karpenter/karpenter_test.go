package karpenter_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpuplane/gpuplane/api/scheduling/v1alpha1"
	"github.com/gpuplane/gpuplane/internal/adapter"
	"github.com/gpuplane/gpuplane/internal/nodeoffer"
	"github.com/gpuplane/gpuplane/internal/scheduler/model"
	"github.com/gpuplane/gpuplane/internal/testutil/build"
	"github.com/gpuplane/gpuplane/test/integration/framework"
)

// gangRunningOnNewNodes is a Condition: want pods of gang run, each on a
// node of its own that Karpenter bought, and Karpenter has never had more
// than want NodeClaims meanwhile (*most records the most seen): nodes that
// are coming count, so none is bought twice.
func (c *cluster) gangRunningOnNewNodes(gang string, want int, most *int) framework.Condition {
	running := c.allRunning("gang="+gang, want)
	return func(ctx context.Context) (bool, error) {
		claims, err := c.claims(ctx)
		if err != nil {
			return false, err
		}
		*most = max(*most, len(claims))
		return running(ctx)
	}
}

func TestGangProvisionedWholeAndScaledToZero(t *testing.T) {
	c := newCluster(t, options{idle: 3 * time.Second, registration: 2 * time.Second})
	const members = 4
	// Each member takes a whole node: the gang needs four.
	c.gang("train", members, members, c.gpusPerNode, "")
	most := 0
	framework.Eventually(t, 3*time.Minute, "the gang running on new nodes", c.gangRunningOnNewNodes("train", members, &most))
	if most != members {
		t.Errorf("Karpenter had up to %d NodeClaims for a gang that needs %d nodes", most, members)
	}
	pods, err := c.pods(t.Context(), "gang=train")
	if err != nil {
		t.Fatal(err)
	}
	nodes := map[string]bool{}
	for _, p := range pods {
		nodes[p.Spec.NodeName] = true
		if p.Annotations[adapter.DoNotDisruptAnnotation] != "true" {
			t.Errorf("gang member %s lacks %s=true: Karpenter may consolidate it away", p.Name, adapter.DoNotDisruptAnnotation)
		}
	}
	bought, err := c.nodes(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if len(nodes) != members || len(bought) != members {
		t.Errorf("the gang runs on %d nodes, Karpenter bought %d, want %d of each", len(nodes), len(bought), members)
	}
	for _, n := range bought {
		if !nodes[n.Name] {
			t.Errorf("Karpenter bought node %s, which runs no member", n.Name)
		}
		// The node carries the GPU feature labels gpuplane published for
		// its instance type before any agent ran on it.
		if n.Labels["nvidia.com/gpu.product"] != "NVIDIA-H100-80GB-HBM3" || n.Labels["nvidia.com/gpu.count"] != "8" {
			t.Errorf("node %s labels %v lack the published GPU features", n.Name, n.Labels)
		}
	}

	// The gang ends; its nodes go after the pool's idle time.
	c.deletePods("gang=train")
	framework.Eventually(t, 2*time.Minute, "the pool back to zero nodes", c.noNodes)
}

// buysOnlyFor creates, beside what the test made wait, a pod that only
// needs room, waits for it to run on a node Karpenter bought, and checks
// that Karpenter nominated (found room or bought a node for) only the pods
// named in want, with one NodeClaim each, and that the pods in waiting are
// still unbound.
func (c *cluster) buysOnlyFor(want []string, waiting ...string) {
	c.t.Helper()
	c.createPod(c.pod("needs-room").GPUs(c.gpusPerNode).Label("role", "needs-room").Obj())
	framework.Eventually(c.t, 2*time.Minute, "the pod that needed room running", c.allRunning("role=needs-room", 1))
	nominated, err := c.nominated(c.t.Context())
	if err != nil {
		c.t.Fatal(err)
	}
	if strings.Join(nominated, ",") != strings.Join(want, ",") {
		c.t.Errorf("Karpenter found room for %v, want %v: it bought nodes for work that more nodes would not start", nominated, want)
	}
	claims, err := c.claims(c.t.Context())
	if err != nil {
		c.t.Fatal(err)
	}
	if len(claims) != len(want) {
		c.t.Errorf("Karpenter has %d NodeClaims, want %d (one for each pod that only needed room)", len(claims), len(want))
	}
	for _, name := range waiting {
		p, err := env.Client.CoreV1().Pods(c.ns).Get(c.t.Context(), name, metav1.GetOptions{})
		if err != nil {
			c.t.Fatal(err)
		}
		if p.Spec.NodeName != "" {
			c.t.Errorf("%s is bound to %s; it should wait", name, p.Spec.NodeName)
		}
	}
}

// TestIncompleteGangBuysNothing: a gang still missing a member waits for
// it, which no node would cure, so Karpenter must not buy for it; a pod
// that only lacks room, in the same batch, gets its node.
func TestIncompleteGangBuysNothing(t *testing.T) {
	c := newCluster(t, options{idle: time.Minute})
	c.gang("partial", 2, 1, c.gpusPerNode, "")
	c.buysOnlyFor([]string{"needs-room"}, "partial-0")
}

// TestQuotaBlockedWorkBuysNothing: a pod that its queue's limit holds back
// waits for quota, which no node would cure, so Karpenter must not buy for
// it; a pod that only lacks room, in the same batch, gets its node. This
// relies on gpuplane-scheduler never calling a quota wait Unschedulable
// (its scheduling gate holds such pods, and a pod released from it says
// what it waits for by another reason).
func TestQuotaBlockedWorkBuysNothing(t *testing.T) {
	c := newCluster(t, options{idle: time.Minute})
	c.queue(c.ns, fmt.Sprint(c.gpusPerNode))
	inQueue := func(name string) *corev1.Pod {
		return c.pod(name).GPUs(c.gpusPerNode).Label(v1alpha1.QueueLabel, c.ns).Label("role", name).Obj()
	}
	c.createPod(inQueue("first"))
	framework.Eventually(t, 2*time.Minute, "the first pod of the queue running", c.allRunning("role=first", 1))
	// The queue is full: the second waits for quota.
	c.createPod(inQueue("over-quota"))
	c.buysOnlyFor([]string{"first", "needs-room"}, "over-quota")
}

// splitPair runs two filler pods of half a node each on two nodes
// Karpenter buys (their anti-affinity keeps them apart), then pods a and b
// (made by mk) of half a node each, which the fillers leave room for one
// per node; then deletes the fillers, leaving each node half used: what
// consolidation packs onto one node. It returns a's and b's nodes.
func (c *cluster) splitPair(mk func(name string) *corev1.Pod, selector string) (string, string) {
	c.t.Helper()
	half := c.gpusPerNode / 2
	for i := range 2 {
		p := c.pod(fmt.Sprintf("filler-%d", i)).GPUs(half).Label("role", "filler").Obj()
		p.Spec.Affinity = &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{
			RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{
				LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"role": "filler"}},
				TopologyKey:   corev1.LabelHostname,
			}},
		}}
		c.createPod(p)
	}
	framework.Eventually(c.t, 2*time.Minute, "the fillers running", c.allRunning("role=filler", 2))
	c.createPod(mk("a"))
	c.createPod(mk("b"))
	framework.Eventually(c.t, time.Minute, "a and b running", c.allRunning(selector, 2))
	pods, err := c.pods(c.t.Context(), selector)
	if err != nil {
		c.t.Fatal(err)
	}
	if len(pods) != 2 || pods[0].Spec.NodeName == pods[1].Spec.NodeName {
		c.t.Fatalf("a and b should run on two nodes: %s and %s", pods[0].Spec.NodeName, pods[1].Spec.NodeName)
	}
	c.deletePods("role=filler")
	return pods[0].Spec.NodeName, pods[1].Spec.NodeName
}

// TestConsolidationKeepsGangs: two half-used nodes are what Karpenter
// consolidates into one. It does so for two lone pods; for the two members
// of a gang it must not, since moving one stops the gang's work:
// gpuplane-scheduler bound them with karpenter.sh/do-not-disrupt, Karpenter
// says the annotation blocks it, and both keep running where they were.
func TestConsolidationKeepsGangs(t *testing.T) {
	c := newCluster(t, options{idle: 2 * time.Second})
	half := c.gpusPerNode / 2

	// Lone pods: Karpenter consolidates their two nodes into one.
	c.splitPair(func(name string) *corev1.Pod {
		return c.pod("lone-"+name).GPUs(half).Label("role", "lone").Obj()
	}, "role=lone")
	framework.Eventually(t, 2*time.Minute, "the lone pods' nodes consolidated into one", func(ctx context.Context) (bool, error) {
		nodes, err := c.nodes(ctx)
		if err != nil {
			return false, err
		}
		return len(nodes) == 1, fmt.Errorf("%d nodes; Karpenter says: %s", len(nodes), c.karpenterSays(ctx))
	})
	c.deletePods("role=lone")
	framework.Eventually(t, 2*time.Minute, "the pool back to zero nodes", c.noNodes)

	// A gang in the same shape.
	c.createObj(v1alpha1.PodGroupsResource, c.ns, podGroup(c.ns, "pair", 2))
	na, nb := c.splitPair(func(name string) *corev1.Pod {
		return c.pod("pair-"+name).GPUs(half).Label(v1alpha1.PodGroupLabel, "pair").Label("gang", "pair").Obj()
	}, "gang=pair")
	framework.Eventually(t, 2*time.Minute, "Karpenter saying the gang blocks consolidation", func(ctx context.Context) (bool, error) {
		evs, err := env.Client.CoreV1().Events(metav1.NamespaceAll).List(ctx, metav1.ListOptions{FieldSelector: "reason=DisruptionBlocked"})
		if err != nil {
			return false, err
		}
		for _, e := range evs.Items {
			if (e.InvolvedObject.Name == na || e.InvolvedObject.Name == nb) && strings.Contains(e.Message, "do-not-disrupt") {
				return true, nil
			}
		}
		return false, fmt.Errorf("no DisruptionBlocked event naming do-not-disrupt on %s or %s among %d", na, nb, len(evs.Items))
	})
	pods, err := c.pods(t.Context(), "gang=pair")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods {
		if p.DeletionTimestamp != nil || p.Status.Phase != corev1.PodRunning || (p.Spec.NodeName != na && p.Spec.NodeName != nb) {
			t.Errorf("gang member %s: node %s, phase %s, deleting %v: consolidation broke the gang", p.Name, p.Spec.NodeName, p.Status.Phase, p.DeletionTimestamp != nil)
		}
	}
	if len(pods) != 2 {
		t.Errorf("%d gang members left, want 2", len(pods))
	}
	nodes, err := c.nodes(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if len(nodes) != 2 {
		t.Errorf("%d nodes, want the gang's 2", len(nodes))
	}
	c.deletePods("gang=pair")
}

// karpenterSays is the last thing Karpenter said of why it does not
// disrupt a node, for a timeout to show.
func (c *cluster) karpenterSays(ctx context.Context) string {
	evs, err := env.Client.CoreV1().Events(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
	if err != nil {
		return err.Error()
	}
	var out []string
	for _, e := range evs.Items {
		if e.Reason == "Unconsolidatable" || e.Reason == "DisruptionBlocked" {
			out = append(out, e.InvolvedObject.Name+": "+e.Message)
		}
	}
	return strings.Join(out, "; ")
}

// TestGangAboveNodePoolLimitsBuysNothing: a gang of three nodes' worth
// confined by its nodeSelector to a pool whose limits allow two would get
// two nodes from Karpenter, which buys for each pod it finds unschedulable
// until the limit, and never start, though another pool's limit allows
// eight. gpuplane-scheduler reads the limits per pool and counts only the
// pools the gang's pods admit: they say why they wait
// (ExceedsNodePoolLimits, naming the small pool), none is Unschedulable,
// and Karpenter buys a node only for a pod that needs room in the same
// batch.
func TestGangAboveNodePoolLimitsBuysNothing(t *testing.T) {
	// The gang's pods admit only the small pool's nodes: the big pool's
	// limit must not count for it.
	c := newCluster(t, options{idle: time.Minute, gpuLimit: int64(2 * 8), secondPoolLimit: int64(8 * 8)})
	const members = 3
	small := nodeoffer.PoolPrefix + "h100x8"
	c.createObj(v1alpha1.PodGroupsResource, c.ns, build.PodGroup(c.ns, "big", members).Obj())
	for i := range members {
		c.createPod(c.pod(fmt.Sprintf("big-%d", i)).GPUs(c.gpusPerNode).Label(v1alpha1.PodGroupLabel, "big").Label("gang", "big").
			NodeSelector(nodeoffer.LabelNodePool, small).Obj())
	}
	framework.Eventually(t, time.Minute, "the gang's pods saying the pool's limits hold it", func(ctx context.Context) (bool, error) {
		pods, err := c.pods(ctx, "gang=big")
		if err != nil {
			return false, err
		}
		for _, p := range pods {
			if why := scheduledReason(&p); why != model.UnplacedAboveNodeLimits {
				return false, fmt.Errorf("%s says %q (%s), want %s", p.Name, why, framework.SchedulerSays(&p), model.UnplacedAboveNodeLimits)
			}
			if msg := framework.SchedulerSays(&p); !strings.Contains(msg, "spec.limits") || !strings.Contains(msg, "("+small+")") {
				return false, fmt.Errorf("%s: %q does not name the limits of pool %s alone", p.Name, msg, small)
			}
		}
		return len(pods) == members, fmt.Errorf("%d pods", len(pods))
	})
	c.buysOnlyFor([]string{"needs-room"}, "big-0", "big-1", "big-2")
}

// TestTimeSlicedPoolCountsReplicasAsItsNodes: a pool of DGX H100s
// time-sliced four ways under nvidia.com/gpu itself advertises 32 of it a
// node, and Karpenter buys one node for four pods of nvidia.com/gpu: 8.
// The node admits them (the kubelet hands a pod 8 of its replicas, from
// two GPUs); gpuplane-scheduler counts them as the node does and binds
// all four there, so the node bought is the node needed.
func TestTimeSlicedPoolCountsReplicasAsItsNodes(t *testing.T) {
	c := newCluster(t, options{idle: time.Minute, timeSliced: 4})
	if c.gpusPerNode != 32 {
		t.Fatalf("a node of the pool offers %d nvidia.com/gpu, want 32", c.gpusPerNode)
	}
	const pods = 4
	for i := range pods {
		c.createPod(c.pod(fmt.Sprint("ts-", i)).GPUs(8).Label("role", "ts").Obj())
	}
	framework.Eventually(t, 3*time.Minute, "the four pods running", c.allRunning("role=ts", pods))
	bought, err := c.nodes(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if len(bought) != 1 {
		t.Errorf("Karpenter bought %d nodes for four pods of 8 replicas, want the 1 of 32 replicas they fit", len(bought))
	}
	pl, err := c.pods(t.Context(), "role=ts")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pl {
		if got := p.Annotations[adapter.GPUsAnnotation]; strings.Count(got, ",") != 1 {
			t.Errorf("%s holds GPUs %q, want its 8 replicas as two GPUs of 4", p.Name, got)
		}
	}
}
