package scheduler_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpuplane/gpuplane/api/gpunode"
	"github.com/gpuplane/gpuplane/api/scheduling/v1alpha1"
	"github.com/gpuplane/gpuplane/internal/adapter"
	"github.com/gpuplane/gpuplane/test/integration/framework"
)

// TestHostileNodes creates Nodes that state impossible GPU capacities, as
// an operator's typo or a broken agent would: the scheduler keeps running,
// leaves each of them out with a Warning event naming the field, and
// schedules on the good nodes. A node whose topology annotation is unusable
// stays usable without it.
func TestHostileNodes(t *testing.T) {
	huge := *resource.NewQuantity(5_000_000, resource.DecimalSI)
	nodes := gpuNodes(5, "hostile")
	good, badTopology, hugeCount, hugeAlloc, zeroReplicas := nodes[0], nodes[1], nodes[2], nodes[3], nodes[4]
	c := newCluster(t,
		good,
		badTopology.Annotation(gpunode.TopologyAnnotation, `{"v":1,"gpus":-1}`),
		hugeCount.Resource("nvidia.com/mig-1g.10gb", "7").Label(gpunode.LabelGPUCount, "5000000"),
		hugeAlloc.Resource(framework.ResourceGPU, huge.String()),
		zeroReplicas.Resource(gpunode.ResourceGPUShared, "32").Label(gpunode.LabelGPUReplicas, "0"),
	)
	c.run(adapter.Config{})

	want := map[string]struct{ reason, msg string }{
		badTopology.Obj().Name:  {adapter.ReasonGPUTopologyIgnored, "gpus: must be 0 to 64, got -1"},
		hugeCount.Obj().Name:    {adapter.ReasonInvalidGPUInfo, `label nvidia.com/gpu.count: must be a whole number from 0 to 64, got "5000000"`},
		hugeAlloc.Obj().Name:    {adapter.ReasonInvalidGPUInfo, "status.allocatable[nvidia.com/gpu]: must be a whole number from 0 to 64000, got 5M"},
		zeroReplicas.Obj().Name: {adapter.ReasonInvalidGPUInfo, `label nvidia.com/gpu.replicas: must be a whole number from 1 to 1000, got "0"`},
	}
	for node, w := range want {
		framework.Eventually(t, 30*time.Second, fmt.Sprintf("a %s event on node %s", w.reason, node), func(ctx context.Context) (bool, error) {
			ev, err := env.Client.CoreV1().Events(metav1.NamespaceAll).List(ctx, metav1.ListOptions{
				FieldSelector: "involvedObject.kind=Node,involvedObject.name=" + node + ",reason=" + w.reason})
			if err != nil {
				return false, err
			}
			for _, e := range ev.Items {
				if e.Type == corev1.EventTypeWarning && strings.Contains(e.Message, w.msg) {
					return true, nil
				}
			}
			return false, fmt.Errorf("%d events, none saying %q", len(ev.Items), w.msg)
		})
	}

	// Two usable nodes (the good one and the one without topology): two
	// 8-GPU pods bind there, a third waits rather than landing on a node
	// that claims millions of GPUs.
	c.create(c.pod("whole-0").GPUs(8), c.pod("whole-1").GPUs(8), c.pod("whole-2").GPUs(8))
	c.waitCondition("whole-2", corev1.PodReasonUnschedulable, "", 30*time.Second)
	c.waitBound("", 2, 30*time.Second)
	ps, err := c.pods(t.Context(), "")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range ps {
		if n := p.Spec.NodeName; n != "" && n != good.Obj().Name && n != badTopology.Obj().Name {
			t.Errorf("pod %s bound to %s, a node the scheduler should have left out", p.Name, n)
		}
	}
}

// TestGangCleanupSparesOtherSchedulersPods: a group under scheduler-plugins'
// label with a member another scheduler bound and members of ours that can
// never fit is not gpuplane's half-placed gang, so its grace running out
// deletes nothing.
func TestGangCleanupSparesOtherSchedulersPods(t *testing.T) {
	nodes := gpuNodes(1, "cleanup")
	c := newCluster(t, nodes...)
	c.podGroup("mixed", 3, "")
	c.create(framework.Pod(c.ns, "foreign").NodeName(nodes[0].Obj().Name).Label(v1alpha1.SchedulerPluginsPodGroupLabel, "mixed").GPUs(1))
	c.waitBound("", 1, 30*time.Second)
	c.create(
		c.pod("ours-0").Label(v1alpha1.SchedulerPluginsPodGroupLabel, "mixed").GPUs(8),
		c.pod("ours-1").Label(v1alpha1.SchedulerPluginsPodGroupLabel, "mixed").GPUs(8),
	)
	c.run(adapter.Config{PartialGangGrace: 500 * time.Millisecond})
	// Two more pods of 8 GPUs on the one 8-GPU node: never.
	// More nodes would start it: Unschedulable, with the reason in words.
	c.waitCondition("ours-0", corev1.PodReasonUnschedulable, "more than all the cluster's nodes have together", 30*time.Second)
	// Well past the grace: several cycles have seen the group partly bound.
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		p, err := env.Client.CoreV1().Pods(c.ns).Get(t.Context(), "foreign", metav1.GetOptions{})
		if err != nil {
			t.Fatalf("the other scheduler's pod: %v", err)
		}
		if p.DeletionTimestamp != nil {
			t.Fatal("gpuplane-scheduler deleted a pod it did not bind")
		}
		select {
		case <-t.Context().Done():
			return
		case <-time.After(250 * time.Millisecond):
		}
	}
}
