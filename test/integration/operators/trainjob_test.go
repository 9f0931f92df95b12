package operators_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/gpuplane/gpuplane/test/integration/framework"
)

var (
	trainJobs        = schema.GroupVersionResource{Group: "trainer.kubeflow.org", Version: "v1alpha1", Resource: "trainjobs"}
	trainingRuntimes = schema.GroupVersionResource{Group: "trainer.kubeflow.org", Version: "v1alpha1", Resource: "trainingruntimes"}
)

// startTrainer runs Kubeflow Trainer's controller manager (v2, pinned in
// tools/operators/trainer) with its CRDs, beside the JobSet controller it
// hands each TrainJob's JobSet to. JobSet's defaulting webhook is
// registered with the API server, since the JobSets are the trainer's,
// not the test's. The trainer manages its webhook certificate itself, into
// a Secret and a ValidatingWebhookConfiguration it expects to exist in its
// namespace; the configuration here has no webhook, so the API server never
// calls it and the controllers run as they do behind it.
func startTrainer(t *testing.T, ns string) {
	t.Helper()
	port, certDir := startJobSet(t)
	env.RegisterMutatingWebhooks(t, "jobset-"+ns, ns, port, certDir, framework.WebhookRoute{Name: "mjobset.jobset.x-k8s.io", Path: "/mutate-jobset-x-k8s-io-v1alpha2-jobset",
		Rule: admissionregistrationv1.Rule{APIGroups: []string{"jobset.x-k8s.io"}, APIVersions: []string{"v1alpha2"}, Resources: []string{"jobsets"}}})
	env.InstallCRDs(t, filepath.Join(operatorsDir(t), "trainer-crds"))
	ctx := t.Context()
	const trainerNS = "kubeflow-system"
	if _, err := env.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: trainerNS}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: trainerNS, Name: "kubeflow-trainer-webhook-cert"}}
	if _, err := env.Client.CoreV1().Secrets(trainerNS).Create(ctx, secret, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	vwc := &admissionregistrationv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "validator.trainer.kubeflow.org"}}
	if _, err := env.Client.AdmissionregistrationV1().ValidatingWebhookConfigurations().Create(ctx, vwc, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	startProcess(t, "trainer", "--kubeconfig", env.ControlPlane.Kubeconfig(),
		"--metrics-bind-address=0", "--health-probe-bind-address=0", "--webhook-server-port="+strconv.Itoa(freePort(t)))
	// In a cluster the kubelet mounts the Secret where the trainer waits
	// for its certificate before it starts its controllers; here the test
	// does (the same fixed path as training-operator v1's).
	framework.Eventually(t, 60*time.Second, "the trainer's certificate", func(ctx context.Context) (bool, error) {
		s, err := env.Client.CoreV1().Secrets(trainerNS).Get(ctx, secret.Name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		if len(s.Data["tls.crt"]) == 0 || len(s.Data["tls.key"]) == 0 {
			return false, errors.New("not written yet")
		}
		if err := os.MkdirAll(trainingCertDir, 0o700); err != nil {
			return false, err
		}
		for _, f := range []string{"tls.key", "ca.crt", "tls.crt"} {
			if err := os.WriteFile(filepath.Join(trainingCertDir, f), s.Data[f], 0o600); err != nil {
				return false, err
			}
		}
		return true, nil
	})
}

// trainingRuntime creates a TrainingRuntime whose trainer nodes take gpus
// GPUs each, and which, with initializer, first runs a one-pod
// dataset-initializer Job the nodes depend on.
func (c *cluster) trainingRuntime(name string, gpus int, initializer bool) {
	c.t.Helper()
	podSpec := func(container string, gpus int) map[string]any {
		spec := c.podSpec(gpus)
		spec["containers"].([]any)[0].(map[string]any)["name"] = container
		return spec
	}
	job := func(name, ancestor, container string, gpus int) map[string]any {
		return map[string]any{"name": name, "template": map[string]any{
			"metadata": map[string]any{"labels": map[string]any{"trainer.kubeflow.org/trainjob-ancestor-step": ancestor}},
			"spec":     map[string]any{"template": map[string]any{"spec": podSpec(container, gpus)}},
		}}
	}
	node := job("node", "trainer", "node", gpus)
	jobs := []any{node}
	if initializer {
		node["dependsOn"] = []any{map[string]any{"name": "dataset-initializer", "status": "Complete"}}
		jobs = []any{job("dataset-initializer", "dataset-initializer", "dataset-initializer", 1), node}
	}
	rt := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainingRuntime",
		"metadata": map[string]any{"name": name, "namespace": c.ns},
		"spec": map[string]any{
			"mlPolicy": map[string]any{"numNodes": int64(1)},
			"template": map[string]any{"spec": map[string]any{"replicatedJobs": jobs}},
		},
	}}
	if _, err := c.dyn.Resource(trainingRuntimes).Namespace(c.ns).Create(c.t.Context(), rt, metav1.CreateOptions{}); err != nil {
		c.t.Fatalf("creating TrainingRuntime %s: %v", name, err)
	}
}

// trainJob creates a TrainJob of numNodes trainer nodes on runtime, as its
// users write it.
func (c *cluster) trainJob(name, runtime string, numNodes int64) {
	c.t.Helper()
	tj := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
		"metadata": map[string]any{"name": name, "namespace": c.ns},
		"spec": map[string]any{
			"runtimeRef": map[string]any{"name": runtime, "kind": "TrainingRuntime", "apiGroup": "trainer.kubeflow.org"},
			"trainer":    map[string]any{"numNodes": numNodes},
		},
	}}
	if _, err := c.dyn.Resource(trainJobs).Namespace(c.ns).Create(c.t.Context(), tj, metav1.CreateOptions{}); err != nil {
		c.t.Fatalf("creating TrainJob %s: %v", name, err)
	}
}

// trainJobPods selects a TrainJob's pods of one replicated Job: the
// trainer names the JobSet after the TrainJob.
func trainJobPods(name, replicatedJob string) string {
	return "jobset.sigs.k8s.io/jobset-name=" + name + ",jobset.sigs.k8s.io/replicatedjob-name=" + replicatedJob
}

// A TrainJob submitted through Kubeflow Trainer, with no PodGroup written,
// has its trainer nodes gang-scheduled: one that fits is bound whole, one
// that cannot binds none of its nodes though most would fit, and a runtime
// with an initializer runs it alone first, then its nodes whole (a gang
// that counted the initializer would wait for nodes made only after it
// finished).
func TestTrainJobNodesAreOneGang(t *testing.T) {
	c := newCluster(t, 2) // 16 GPUs
	startTrainer(t, c.ns)
	c.runScheduler()
	c.trainingRuntime("gpu", 4, false)
	c.trainJob("fits", "gpu", 2)    // 2 nodes x 4 GPUs
	c.trainJob("too-big", "gpu", 5) // 5 x 4 GPUs: 4 of them would fit
	framework.Eventually(t, 120*time.Second, "TrainJob fits bound whole", func(ctx context.Context) (bool, error) {
		n, total, err := c.bound(ctx, trainJobPods("fits", "node"))
		return err == nil && n == 2, fmt.Errorf("%d of %d bound (%w)", n, total, err)
	})
	framework.Eventually(t, 90*time.Second, "too-big's five nodes made and refused whole", func(ctx context.Context) (bool, error) {
		n, total, err := c.bound(ctx, trainJobPods("too-big", "node"))
		if n > 0 {
			t.Fatalf("%d of too-big's %d nodes bound: a gang of 5 x 4 GPUs cannot fit 16 GPUs", n, total)
		}
		mm, refused, gerr := c.derivedGroups(ctx)
		var name string
		for g := range mm {
			if strings.HasPrefix(g, "trainjob-too-big-trainer-") {
				name = g
			}
		}
		return err == nil && gerr == nil && total == 5 && refused[name] && mm[name] == 5,
			fmt.Errorf("%d pods, group %q minMember %d unschedulable %v (%w, %w)", total, name, mm[name], refused[name], err, gerr)
	})

	c.trainingRuntime("gpu-with-init", 4, true)
	c.trainJob("with-init", "gpu-with-init", 2)
	framework.Eventually(t, 120*time.Second, "with-init's initializer run alone, then its nodes bound whole", func(ctx context.Context) (bool, error) {
		i, it, err := c.bound(ctx, trainJobPods("with-init", "dataset-initializer"))
		if err != nil {
			return false, err
		}
		n, nt, err := c.bound(ctx, trainJobPods("with-init", "node"))
		return err == nil && i == 1 && n == 2, fmt.Errorf("initializer %d/%d, nodes %d/%d bound (%w)", i, it, n, nt, err)
	})
	mm, _, err := c.derivedGroups(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for g, m := range mm {
		if strings.Contains(g, "initializer") {
			t.Errorf("PodGroup %s (minMember %d): an initializer runs alone, with no group", g, m)
		}
		if strings.HasPrefix(g, "trainjob-with-init-trainer-") && m != 2 {
			t.Errorf("PodGroup %s: minMember %d, want with-init's 2 nodes", g, m)
		}
	}
}
