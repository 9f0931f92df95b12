package scheduler_test

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpuplane/gpuplane/api/scheduling/v1alpha1"
	"github.com/gpuplane/gpuplane/internal/adapter"
	"github.com/gpuplane/gpuplane/internal/cli/status"
	"github.com/gpuplane/gpuplane/test/integration/framework"
)

// job creates a batch Job run by the real Job controller, whose pods ask
// for gpus GPUs each and are scheduled by this test's scheduler. Indexed
// with completions = parallelism, it is a gang by the shipped rule.
func (c *cluster) job(name string, pods int32, gpus int, indexed bool, labels map[string]string) *batchv1.Job {
	c.t.Helper()
	tmpl := c.pod(name).GPUs(gpus).Label("job", name).Obj()
	tmpl.Spec.RestartPolicy = corev1.RestartPolicyNever
	j := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: c.ns, Name: name, Labels: labels},
		Spec: batchv1.JobSpec{Parallelism: &pods, Completions: &pods,
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: tmpl.Labels}, Spec: tmpl.Spec}}}
	if indexed {
		mode := batchv1.IndexedCompletion
		j.Spec.CompletionMode = &mode
	}
	out, err := env.Client.BatchV1().Jobs(c.ns).Create(c.t.Context(), j, metav1.CreateOptions{})
	if err != nil {
		c.t.Fatalf("creating Job %s: %v", name, err)
	}
	return out
}

// derivedGroup waits for the PodGroup made for a workload and returns it.
func (c *cluster) derivedGroup(kind, name string, uid string) *v1alpha1.PodGroup {
	c.t.Helper()
	var pg *v1alpha1.PodGroup
	want := strings.ToLower(kind) + "-" + name + "-"
	framework.Eventually(c.t, 30*time.Second, "PodGroup derived from "+kind+" "+name, func(ctx context.Context) (bool, error) {
		list, err := c.dyn.Resource(v1alpha1.PodGroupsResource).Namespace(c.ns).List(ctx, metav1.ListOptions{LabelSelector: v1alpha1.DerivedLabel + "=true"})
		if err != nil {
			return false, err
		}
		for _, u := range list.Items {
			if strings.HasPrefix(u.GetName(), want) && len(u.GetOwnerReferences()) == 1 && string(u.GetOwnerReferences()[0].UID) == uid {
				pg, err = c.getPodGroup(ctx, u.GetName())
				return err == nil, err
			}
		}
		return false, fmt.Errorf("%d derived PodGroups, none for %s", len(list.Items), name)
	})
	return pg
}

// Jobs submitted as they are, with no PodGroup written by hand, are
// gang-scheduled from their spec: an Indexed Job that cannot run whole does
// not start in part, one that can runs whole; a plain Job's pods are placed
// as they fit. (kwok completes a Job's pods as soon as they run.)
func TestJobsAreGangScheduledWithoutAPodGroup(t *testing.T) {
	c := newCluster(t, gpuNodes(2, "jobs")...)
	c.run(adapter.Config{})
	// 16 GPUs in all, 8 per node.
	tooBig := c.job("too-big", 3, 6, true, nil)
	fits := c.job("fits", 2, 6, true, nil)
	plain := c.job("plain", 3, 6, false, nil)

	pg := c.derivedGroup("Job", "too-big", string(tooBig.UID))
	if pg.Spec.MinMember != 3 || !strings.Contains(pg.Annotations[v1alpha1.DerivedFromAnnotation], "minMember 3 from builtin/batch-job") {
		t.Errorf("PodGroup %s: minMember %d, derived-from %q; want 3 from the shipped Job rule", pg.Name, pg.Spec.MinMember, pg.Annotations[v1alpha1.DerivedFromAnnotation])
	}
	if g := c.derivedGroup("Job", "fits", string(fits.UID)); g.Spec.MinMember != 2 {
		t.Errorf("PodGroup %s: minMember %d, want 2", g.Name, g.Spec.MinMember)
	}
	t.Run("an Indexed Job that fits runs whole", func(t *testing.T) {
		c.waitBound("job=fits", 2, 60*time.Second)
		pods, err := c.pods(t.Context(), "job=fits")
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range pods {
			if p.Labels[v1alpha1.PodGroupLabel] == "" || !strings.HasPrefix(p.Labels[v1alpha1.PodGroupLabel], "job-fits-") {
				t.Errorf("pod %s: pod group label %q, want the derived group", p.Name, p.Labels[v1alpha1.PodGroupLabel])
			}
		}
	})
	t.Run("a plain Job's pods are placed as they fit, each on its own", func(t *testing.T) {
		c.waitBound("job=plain", 3, 60*time.Second)
		pods, err := c.pods(t.Context(), "job=plain")
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range pods {
			if g := p.Labels[v1alpha1.PodGroupLabel]; g != "" {
				t.Errorf("pod %s joined group %s; a Job that is not Indexed is no gang", p.Name, g)
			}
		}
		_ = plain
	})
	t.Run("an Indexed Job that cannot run whole starts no pod", func(t *testing.T) {
		framework.Eventually(t, 30*time.Second, "too-big's group unschedulable", func(ctx context.Context) (bool, error) {
			g, err := c.getPodGroup(ctx, pg.Name)
			if err != nil {
				return false, err
			}
			cd := meta.FindStatusCondition(g.Status.Conditions, v1alpha1.ConditionSchedulable)
			return cd != nil && cd.Status == metav1.ConditionFalse, fmt.Errorf("conditions %v", g.Status.Conditions)
		})
		if n, _, err := c.bound(t.Context(), "job=too-big"); err != nil || n != 0 {
			t.Fatalf("%d pods of too-big bound (%v), want none", n, err)
		}
	})
	t.Run("gpuplane status shows the derived group and where its size came from", func(t *testing.T) {
		st, err := status.Collect(t.Context(), env.Config, c.scheduler)
		if err != nil {
			t.Fatal(err)
		}
		var out bytes.Buffer
		if err := status.Print(&out, st, true); err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{"DERIVED FROM", c.ns + "/" + pg.Name, "Job.batch " + c.ns + "/too-big: minMember 3 from builtin/batch-job spec.minMember"} {
			if !strings.Contains(out.String(), want) {
				t.Errorf("status -o wide lacks %q:\n%s", want, out.String())
			}
		}
	})
}

// replicaSet creates a ReplicaSet (run by the real ReplicaSet controller;
// kwok keeps its pods running) of n pods asking for gpus GPUs each.
func (c *cluster) replicaSet(name string, n int32, gpus int) {
	c.t.Helper()
	tmpl := c.pod(name).GPUs(gpus).Label("rs", name).Obj()
	rs := &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Namespace: c.ns, Name: name},
		Spec: appsv1.ReplicaSetSpec{Replicas: &n, Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"rs": name}},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: tmpl.Labels}, Spec: tmpl.Spec}}}
	if _, err := env.Client.AppsV1().ReplicaSets(c.ns).Create(c.t.Context(), rs, metav1.CreateOptions{}); err != nil {
		c.t.Fatalf("creating ReplicaSet %s: %v", name, err)
	}
}

// groupingRule creates a cluster-scoped GroupingRule for the test's
// duration.
func (c *cluster) groupingRule(name, group, kind, expr string) {
	c.t.Helper()
	r := &v1alpha1.GroupingRule{TypeMeta: metav1.TypeMeta{APIVersion: v1alpha1.SchemeGroupVersion.String(), Kind: "GroupingRule"},
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       v1alpha1.GroupingRuleSpec{Target: v1alpha1.GroupKind{Group: group, Kind: kind}, MinMember: expr}}
	c.createObj(v1alpha1.GroupingRulesResource, "", r)
	c.t.Cleanup(func() {
		if err := c.dyn.Resource(v1alpha1.GroupingRulesResource).Delete(context.Background(), name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			c.t.Errorf("deleting GroupingRule %s: %v", name, err)
		}
	})
}

// Two workloads that together do not fit never both start in part: one
// runs whole, the other waits whole until room appears. The workloads are
// ReplicaSets made gangs by a GroupingRule that replaces the shipped one,
// as an operator's CRD would be.
func TestCompetingGangsNeverStartInPart(t *testing.T) {
	c := newCluster(t, gpuNodes(2, "compete")...)
	c.groupingRule(c.ns+"-rs", "apps", "ReplicaSet", "object.spec.replicas")
	c.run(adapter.Config{})
	c.replicaSet("a", 3, 4)
	c.replicaSet("b", 3, 4)
	var first, second string
	framework.Eventually(t, 60*time.Second, "one ReplicaSet running whole", func(ctx context.Context) (bool, error) {
		na, _, err := c.bound(ctx, "rs=a")
		if err != nil {
			return false, err
		}
		nb, _, err := c.bound(ctx, "rs=b")
		if err != nil {
			return false, err
		}
		switch {
		case na == 3 && nb == 0:
			first, second = "a", "b"
		case nb == 3 && na == 0:
			first, second = "b", "a"
		case na > 0 && nb > 0:
			t.Fatalf("both started: %d of a and %d of b bound", na, nb)
		}
		return first != "", fmt.Errorf("%d of a and %d of b bound", na, nb)
	})
	for range 10 {
		if n, _, err := c.bound(t.Context(), "rs="+second); err != nil || n != 0 {
			t.Fatalf("%d pods of %s bound (%v) while %s runs", n, second, err, first)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if err := env.Client.AppsV1().ReplicaSets(c.ns).Delete(t.Context(), first, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, 60*time.Second, first+"'s pods gone", func(ctx context.Context) (bool, error) {
		list, err := env.Client.CoreV1().Pods(c.ns).List(ctx, listBy("rs="+first))
		if err != nil {
			return false, err
		}
		for _, p := range list.Items {
			_ = env.Client.CoreV1().Pods(c.ns).Delete(ctx, p.Name, deleteNow())
		}
		return len(list.Items) == 0, fmt.Errorf("%d pods left", len(list.Items))
	})
	c.waitBound("rs="+second, 3, 60*time.Second)
}

// A Job that is no gang makes no group, but its pods go to the queue the
// Job names (Kueue's label here, which its pods do not carry); a gang's
// PodGroup takes its queue the same way and says where it came from.
func TestWorkloadQueueComesFromTheWorkload(t *testing.T) {
	c := newCluster(t, gpuNodes(1, "jobq")...)
	q := c.ns + "-batch"
	c.queue(q, "", 0, 0)
	c.run(adapter.Config{})
	c.job("plain", 2, 1, false, map[string]string{v1alpha1.KueueQueueLabel: q})
	gang := c.job("gang", 2, 1, true, map[string]string{v1alpha1.KueueQueueLabel: q})
	c.waitBound("job=plain", 2, 60*time.Second)
	c.waitBound("job=gang", 2, 60*time.Second)
	pods, err := c.pods(t.Context(), "job=plain")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods {
		if p.Labels[v1alpha1.QueueLabel] != q || p.Labels[v1alpha1.PodGroupLabel] != "" {
			t.Errorf("pod %s: queue label %q, group %q; want queue %s and no group", p.Name, p.Labels[v1alpha1.QueueLabel], p.Labels[v1alpha1.PodGroupLabel], q)
		}
	}
	pg := c.derivedGroup("Job", "gang", string(gang.UID))
	if pg.Spec.MinMember != 2 || pg.Spec.Queue != q {
		t.Errorf("PodGroup %s: minMember %d queue %q, want 2 in %s", pg.Name, pg.Spec.MinMember, pg.Spec.Queue, q)
	}
	if from := pg.Annotations[v1alpha1.DerivedFromAnnotation]; !strings.Contains(from, "label "+v1alpha1.KueueQueueLabel) {
		t.Errorf("derived-from %q does not say where the queue came from", from)
	}
}

// A GroupingRule replaces the shipped rule for its kind; one that does not
// compile says so on its status, and one that fails on a workload holds
// the pods with the field named rather than scheduling them one by one.
func TestGroupingRules(t *testing.T) {
	c := newCluster(t, gpuNodes(1, "rules")...)
	valid := func(name string, want metav1.ConditionStatus, msg string) {
		t.Helper()
		framework.Eventually(t, 30*time.Second, "GroupingRule "+name+" Valid="+string(want), func(ctx context.Context) (bool, error) {
			u, err := c.dyn.Resource(v1alpha1.GroupingRulesResource).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			conds, _, _ := unstructuredSlice(u.Object, "status", "conditions")
			for _, cd := range conds {
				m, _ := cd.(map[string]any)
				if m["type"] == v1alpha1.ConditionValid && m["status"] == string(want) && strings.Contains(fmt.Sprint(m["message"]), msg) {
					return true, nil
				}
			}
			return false, fmt.Errorf("conditions %v", conds)
		})
	}
	rule := c.ns + "-jobs"
	c.groupingRule(rule, "batch", "Job", "object.spec.workers")
	c.groupingRule(c.ns+"-typo", "batch", "CronJob", "object.spec.(")
	c.run(adapter.Config{})
	valid(rule, metav1.ConditionTrue, "in force")
	valid(c.ns+"-typo", metav1.ConditionFalse, "spec.minMember: does not compile")

	c.job("broken", 2, 1, true, nil)
	framework.Eventually(t, 30*time.Second, "a pod of Job broken holds with GroupingFailed", func(ctx context.Context) (bool, error) {
		list, err := env.Client.CoreV1().Pods(c.ns).List(ctx, listBy("job=broken"))
		if err != nil {
			return false, err
		}
		for _, p := range list.Items {
			if p.Spec.NodeName != "" {
				t.Fatalf("pod %s was bound although its group could not be made", p.Name)
			}
			for _, cd := range p.Status.Conditions {
				if cd.Type == corev1.PodScheduled && cd.Reason == "GroupingFailed" && strings.Contains(cd.Message, "spec.minMember: no such key: workers") {
					return true, nil
				}
			}
		}
		return false, fmt.Errorf("%d pods, none with the reason yet", len(list.Items))
	})
	// Fixing the rule lets the job run as a gang of 2.
	if err := c.dyn.Resource(v1alpha1.GroupingRulesResource).Delete(t.Context(), rule, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	c.waitBound("job=broken", 2, 60*time.Second)
}

func unstructuredSlice(obj map[string]any, fields ...string) ([]any, bool, error) {
	cur := any(obj)
	for _, f := range fields {
		m, ok := cur.(map[string]any)
		if !ok {
			return nil, false, nil
		}
		cur = m[f]
	}
	s, ok := cur.([]any)
	return s, ok, nil
}
