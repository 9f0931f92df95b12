package scheduler_test

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/gpuplane/gpuplane/api/scheduling/v1alpha1"
	"github.com/gpuplane/gpuplane/internal/adapter"
	"github.com/gpuplane/gpuplane/test/integration/framework"
)

// asSchedulerServiceAccount applies the chart's scheduler RBAC
// (deploy/scheduler) and returns a client configuration that acts as the
// scheduler's ServiceAccount, so a test finds out whether the rights the
// chart grants are enough.
func asSchedulerServiceAccount(t *testing.T) *rest.Config {
	t.Helper()
	dir := filepath.Join(framework.RepoRoot(), "deploy", "scheduler")
	for _, f := range []string{"00-namespace.yaml", "rbac.yaml"} {
		if out, err := env.Kubectl("apply", "--server-side", "-f", filepath.Join(dir, f)); err != nil {
			t.Fatalf("kubectl apply -f %s: %v\n%s", f, err, out)
		}
	}
	cfg := rest.CopyConfig(env.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: schedulerUser,
		Groups: []string{"system:serviceaccounts", "system:serviceaccounts:gpuplane-system", "system:authenticated"}}
	return cfg
}

// schedulerMayGet fails the test unless the chart's RBAC lets the scheduler
// get resource of group in namespace ns. The owner walk goes on quietly past
// an owner it may not read (an unknown kind is no workload), so a missing
// right would not show as a failure anywhere else.
func schedulerMayGet(t *testing.T, ns, group, resource string) {
	t.Helper()
	sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
		User:               schedulerUser,
		Groups:             []string{"system:serviceaccounts", "system:serviceaccounts:gpuplane-system", "system:authenticated"},
		ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: ns, Verb: "get", Group: group, Resource: resource},
	}}
	out, err := env.Client.AuthorizationV1().SubjectAccessReviews().Create(t.Context(), sar, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !out.Status.Allowed {
		t.Errorf("the chart's RBAC does not let gpuplane-scheduler get %s.%s: %s (add it to scheduler.workloadKinds)", resource, group, out.Status.Reason)
	}
}

// cronJobRuns lists the Jobs cj's controller created, oldest first.
func (c *cluster) cronJobRuns(ctx context.Context, cj *batchv1.CronJob) ([]batchv1.Job, error) {
	list, err := env.Client.BatchV1().Jobs(c.ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	var out []batchv1.Job
	for _, j := range list.Items {
		if ref := metav1.GetControllerOf(&j); ref != nil && ref.UID == cj.UID {
			out = append(out, j)
		}
	}
	for i := 1; i < len(out); i++ {
		for k := i; k > 0 && out[k].CreationTimestamp.Before(&out[k-1].CreationTimestamp); k-- {
			out[k], out[k-1] = out[k-1], out[k]
		}
	}
	return out, nil
}

// A CronJob submitted as it is, with no PodGroup written by hand, runs
// through the real CronJob controller; each Job it creates is a gang by the
// shipped Job rule (Indexed, completions = parallelism), a group of its
// own owned by that Job, in the queue the Job template's labels name. The
// scheduler runs as its ServiceAccount with the chart's RBAC, which lets it
// walk from the Job up to the CronJob.
func TestCronJobRunsAreGangs(t *testing.T) {
	c := newCluster(t, gpuNodes(2, "cron")...)
	q := c.ns + "-nightly"
	c.queue(q, "", 0, 0)
	c.restrictQueue(q, c.ns)
	cfg := asSchedulerServiceAccount(t)
	schedulerMayGet(t, c.ns, "batch", "cronjobs")
	schedulerMayGet(t, c.ns, "batch", "jobs")
	c.run(adapter.Config{RESTConfig: cfg})

	// A pod of 8 GPUs fills one of the two nodes: the other holds two of
	// a run's three pods of 4 GPUs, not the gang.
	c.create(c.pod("filler").GPUs(8))
	env.WaitPodPhase(t, c.ns, "filler", corev1.PodRunning, 30*time.Second)
	pods := int32(3)
	mode := batchv1.IndexedCompletion
	tmpl := c.pod("nightly").GPUs(4).Label("cron", "nightly").Obj()
	tmpl.Spec.RestartPolicy = corev1.RestartPolicyNever
	cj := &batchv1.CronJob{ObjectMeta: metav1.ObjectMeta{Namespace: c.ns, Name: "nightly"},
		Spec: batchv1.CronJobSpec{Schedule: "* * * * *", ConcurrencyPolicy: batchv1.ForbidConcurrent,
			JobTemplate: batchv1.JobTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{v1alpha1.QueueLabel: q}},
				Spec: batchv1.JobSpec{Parallelism: &pods, Completions: &pods, CompletionMode: &mode,
					Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: tmpl.Labels}, Spec: tmpl.Spec}}}}}
	cj, err := env.Client.BatchV1().CronJobs(c.ns).Create(t.Context(), cj, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// The controller starts the most recent run it missed since
	// status.lastScheduleTime: a time two minutes back makes it start one
	// now rather than at the next minute boundary.
	framework.Eventually(t, 30*time.Second, "the CronJob's lastScheduleTime set back", func(ctx context.Context) (bool, error) {
		cur, err := env.Client.BatchV1().CronJobs(c.ns).Get(ctx, cj.Name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		cur.Status.LastScheduleTime = &metav1.Time{Time: time.Now().Add(-2 * time.Minute).Truncate(time.Minute)}
		_, err = env.Client.BatchV1().CronJobs(c.ns).UpdateStatus(ctx, cur, metav1.UpdateOptions{})
		return err == nil, err
	})

	var first batchv1.Job
	framework.Eventually(t, 60*time.Second, "the CronJob's first run", func(ctx context.Context) (bool, error) {
		runs, err := c.cronJobRuns(ctx, cj)
		if err != nil || len(runs) == 0 {
			return false, err
		}
		first = runs[0]
		return true, nil
	})
	pg := c.derivedGroup("Job", first.Name, string(first.UID))
	from := pg.Annotations[v1alpha1.DerivedFromAnnotation]
	if pg.Spec.MinMember != 3 || pg.Spec.Queue != q || !strings.Contains(from, "minMember 3 from builtin/batch-job") || !strings.Contains(from, "label "+v1alpha1.QueueLabel) {
		t.Errorf("PodGroup %s: minMember %d, queue %q, derived-from %q; want 3 from the shipped Job rule, in queue %s from the Job's label",
			pg.Name, pg.Spec.MinMember, pg.Spec.Queue, from, q)
	}
	firstPods := "batch.kubernetes.io/job-name=" + first.Name

	t.Run("a run that cannot start whole starts no pod", func(t *testing.T) {
		framework.Eventually(t, 30*time.Second, "the first run's group waits", func(ctx context.Context) (bool, error) {
			g, err := c.getPodGroup(ctx, pg.Name)
			if err != nil {
				return false, err
			}
			cd := meta.FindStatusCondition(g.Status.Conditions, v1alpha1.ConditionSchedulable)
			return cd != nil && cd.Status == metav1.ConditionFalse && strings.Contains(cd.Message, "gang 2/3 placeable"), fmt.Errorf("conditions %v", g.Status.Conditions)
		})
		if n, total, err := c.bound(t.Context(), firstPods); err != nil || n != 0 || total != 3 {
			t.Fatalf("%d of %d pods of %s bound (%v), want 0 of 3", n, total, first.Name, err)
		}
	})

	t.Run("with room the run starts whole in its queue", func(t *testing.T) {
		if err := env.Client.CoreV1().Pods(c.ns).Delete(t.Context(), "filler", deleteNow()); err != nil {
			t.Fatal(err)
		}
		c.waitBound(firstPods, 3, 60*time.Second)
		ps, err := c.pods(t.Context(), firstPods)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range ps {
			if p.Labels[v1alpha1.PodGroupLabel] != pg.Name {
				t.Errorf("pod %s: group label %q, want %s", p.Name, p.Labels[v1alpha1.PodGroupLabel], pg.Name)
			}
		}
	})

	t.Run("the next run is a group of its own", func(t *testing.T) {
		// kwok completes the pods as soon as they run; the controller
		// starts the next run at the next minute boundary.
		var second batchv1.Job
		framework.Eventually(t, 90*time.Second, "the CronJob's second run", func(ctx context.Context) (bool, error) {
			runs, err := c.cronJobRuns(ctx, cj)
			if err != nil {
				return false, err
			}
			for _, j := range runs {
				if j.UID != first.UID {
					second = j
					return true, nil
				}
			}
			return false, fmt.Errorf("%d runs", len(runs))
		})
		pg2 := c.derivedGroup("Job", second.Name, string(second.UID))
		if pg2.Name == pg.Name || pg2.Spec.MinMember != 3 || pg2.Spec.Queue != q {
			t.Errorf("second run's PodGroup %s: minMember %d, queue %q; want a group other than %s, of 3, in %s", pg2.Name, pg2.Spec.MinMember, pg2.Spec.Queue, pg.Name, q)
		}
		c.waitBound("batch.kubernetes.io/job-name="+second.Name, 3, 60*time.Second)
	})
}
