package operators_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gpuplane/gpuplane/test/integration/framework"
)

// An elastic PyTorchJob (minReplicas 2 of 4 workers) with two workers on
// a node Karpenter marks for disruption loses only those two, with
// notice: the other two keep training (the same pods, never restarted),
// the training operator's replacements wait while nothing else has room,
// and they join the job again once the node is back in service.
func TestElasticPyTorchJobShrinksOnNodeLoss(t *testing.T) {
	c := newCluster(t, 2) // 2 nodes x 8 GPUs: two 4-GPU workers on each
	startTrainingOperator(t)
	c.runScheduler()
	spec := c.podSpec(4)
	spec["containers"].([]any)[0].(map[string]any)["name"] = "pytorch"
	// An evicted worker ends Failed; with OnFailure, as elastic jobs
	// run, the operator makes it again instead of failing the job.
	delete(spec, "restartPolicy")
	c.elasticPyTorchJob(t, "spot", "OnFailure", spec)
	var before map[string]types.UID
	framework.Eventually(t, 90*time.Second, "the elastic job running all four workers", func(ctx context.Context) (bool, error) {
		var err error
		before, err = c.boundUIDs(ctx, "ptj=spot")
		return err == nil && len(before) == 4, fmt.Errorf("%v bound (%w)", before, err)
	})
	nodeOf := map[string]string{}
	list, err := env.Client.CoreV1().Pods(c.ns).List(t.Context(), metav1.ListOptions{LabelSelector: "ptj=spot"})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range list.Items {
		nodeOf[p.Name] = p.Spec.NodeName
	}
	gone := nodeOf["spot-worker-3"]
	var lost, stay []string
	for name := range before {
		if nodeOf[name] == gone {
			lost = append(lost, name)
		} else {
			stay = append(stay, name)
		}
	}
	if len(lost) != 2 {
		t.Fatalf("workers on %s: %v of %v, want two", gone, lost, nodeOf)
	}

	taint := []byte(`{"spec":{"taints":[{"key":"karpenter.sh/disrupted","effect":"NoSchedule"}]}}`)
	if _, err := env.Client.CoreV1().Nodes().Patch(t.Context(), gone, types.StrategicMergePatchType, taint, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	// The two workers on the node go and are made again by the operator;
	// they wait (the other node is full, this one takes nothing new),
	// and the two elsewhere run on.
	framework.Eventually(t, 60*time.Second, "the workers on "+gone+" replaced and waiting, the others running on", func(ctx context.Context) (bool, error) {
		ps, err := env.Client.CoreV1().Pods(c.ns).List(ctx, metav1.ListOptions{LabelSelector: "ptj=spot"})
		if err != nil {
			return false, err
		}
		waiting := 0
		var state []string
		for _, p := range ps.Items {
			state = append(state, fmt.Sprintf("%s uid %s on %q", p.Name, p.UID, p.Spec.NodeName))
			if p.DeletionTimestamp != nil {
				continue
			}
			switch {
			case before[p.Name] == p.UID && nodeOf[p.Name] == gone:
				return false, fmt.Errorf("%s still runs on %s: %v", p.Name, gone, state)
			case before[p.Name] == p.UID:
			case p.Spec.NodeName == "" && scheduledFalse(p.Status.Conditions):
				waiting++
			}
		}
		return waiting == 2, fmt.Errorf("%d replacements waiting: %v; the job's status: %s", waiting, state, c.jobStatus(ctx, "spot"))
	})
	now, err := c.boundUIDs(t.Context(), "ptj=spot")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range stay {
		if now[name] != before[name] {
			t.Fatalf("%s, on the node that stays, was restarted or evicted: %v, before %v", name, now, before)
		}
	}
	framework.Eventually(t, 30*time.Second, "a notice saying the job runs on", func(ctx context.Context) (bool, error) {
		evs, err := env.Client.CoreV1().Events(c.ns).List(ctx, metav1.ListOptions{FieldSelector: "reason=PreemptionNotice"})
		if err != nil {
			return false, err
		}
		var seen []string
		for _, e := range evs.Items {
			if strings.Contains(e.Message, "node "+gone+" is going away") && strings.Contains(e.Message, "runs on without it") {
				return true, nil
			}
			seen = append(seen, e.Message)
		}
		return false, fmt.Errorf("events %v", seen)
	})

	// The node is back in service: the job grows back to four workers,
	// and the two that ran on were never touched.
	untaint := []byte(`{"spec":{"taints":null}}`)
	if _, err := env.Client.CoreV1().Nodes().Patch(t.Context(), gone, types.StrategicMergePatchType, untaint, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, 60*time.Second, "the elastic job grown back to four workers", func(ctx context.Context) (bool, error) {
		now, err := c.boundUIDs(ctx, "ptj=spot")
		return err == nil && len(now) == 4, fmt.Errorf("%v bound (%w)", now, err)
	})
	if now, err = c.boundUIDs(t.Context(), "ptj=spot"); err != nil {
		t.Fatal(err)
	}
	for _, name := range stay {
		if now[name] != before[name] {
			t.Fatalf("%s was restarted or evicted: %v, before %v", name, now, before)
		}
	}
}

// scheduledFalse reports whether conds say the pod was looked at and not
// placed (PodScheduled False).
func scheduledFalse(conds []corev1.PodCondition) bool {
	for _, c := range conds {
		if c.Type == corev1.PodScheduled {
			return c.Status == corev1.ConditionFalse
		}
	}
	return false
}

// jobStatus is the PyTorchJob's status conditions and replica statuses,
// for failure messages.
func (c *cluster) jobStatus(ctx context.Context, name string) string {
	job, err := c.dyn.Resource(pyTorchJobs).Namespace(c.ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return err.Error()
	}
	st, _, _ := unstructured.NestedMap(job.Object, "status")
	return fmt.Sprint(st)
}
