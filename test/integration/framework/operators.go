package framework

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"

	"github.com/gpuplane/gpuplane/internal/localcluster"
)

// The workloads of the operators the integration tests run.
var (
	JobSets          = schema.GroupVersionResource{Group: "jobset.x-k8s.io", Version: "v1alpha2", Resource: "jobsets"}
	PyTorchJobs      = schema.GroupVersionResource{Group: "kubeflow.org", Version: "v1", Resource: "pytorchjobs"}
	LeaderWorkerSets = schema.GroupVersionResource{Group: "leaderworkerset.x-k8s.io", Version: "v1", Resource: "leaderworkersets"}
)

// StartOperator runs workload operator name (localcluster.Operator*), built
// into bin/operators by `make operator-bins`, for the test, with args after
// its own, once its CRDs are installed and it says it is ready. Its log goes
// to the test's temporary directory and its last lines into the test's
// output when the test fails; it is stopped when the test ends.
func (e *Env) StartOperator(t testing.TB, name string, args ...string) *localcluster.Operator {
	t.Helper()
	op, err := localcluster.StartOperator(t.Context(), localcluster.OperatorConfig{
		Name: name, Dir: localcluster.OperatorsDir(e.ControlPlane.BinDir()),
		RESTConfig: e.Config, Kubeconfig: e.ControlPlane.Kubeconfig(),
		WorkDir: t.TempDir(), Args: args, ReadyTimeout: 90 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := op.Stop(context.Background(), 10*time.Second); err != nil {
			t.Error(err)
		}
		if t.Failed() {
			if b, err := os.ReadFile(op.LogPath()); err == nil {
				lines := strings.Split(strings.TrimSpace(string(b)), "\n")
				t.Logf("last lines of %s:\n%s", name, strings.Join(lines[max(0, len(lines)-30):], "\n"))
			}
		}
	})
	return op
}

// WebhookRoute is one mutating webhook an operator serves: its name, the
// path it serves, the objects it mutates and, optionally, which of them by
// label.
type WebhookRoute struct {
	Name, Path string
	Rule       admissionregistrationv1.Rule
	Objects    *metav1.LabelSelector
}

// RegisterMutatingWebhooks points the API server at an operator's webhook
// server on loopback (port, with the certificate the operator wrote to
// certDir) for the routes given, in namespace ns only, and removes the
// configuration when the test ends: a webhook that outlived its operator
// would refuse every object it matches.
func (e *Env) RegisterMutatingWebhooks(t *testing.T, name, ns string, port int, certDir string, routes ...WebhookRoute) {
	t.Helper()
	// The CA that signed the server's certificate, or the certificate
	// itself when it signed itself.
	ca, err := os.ReadFile(filepath.Join(certDir, "ca.crt"))
	if err != nil {
		ca, err = os.ReadFile(filepath.Join(certDir, "tls.crt"))
	}
	if err != nil {
		t.Fatal(err)
	}
	mwc := &admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: name}}
	for _, r := range routes {
		mwc.Webhooks = append(mwc.Webhooks, admissionregistrationv1.MutatingWebhook{
			Name:         r.Name,
			ClientConfig: admissionregistrationv1.WebhookClientConfig{URL: new(fmt.Sprintf("https://127.0.0.1:%d%s", port, r.Path)), CABundle: ca},
			Rules: []admissionregistrationv1.RuleWithOperations{{Rule: r.Rule,
				Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update}}},
			NamespaceSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": ns}},
			ObjectSelector:          r.Objects,
			FailurePolicy:           new(admissionregistrationv1.Fail),
			SideEffects:             new(admissionregistrationv1.SideEffectClassNone),
			AdmissionReviewVersions: []string{"v1"},
			TimeoutSeconds:          new(int32(10)),
		})
	}
	if _, err := e.Client.AdmissionregistrationV1().MutatingWebhookConfigurations().Create(t.Context(), mwc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = e.Client.AdmissionregistrationV1().MutatingWebhookConfigurations().Delete(context.Background(), mwc.Name, metav1.DeleteOptions{})
	})
}

// StartLWS runs the LeaderWorkerSet controller (sigs.k8s.io/lws, pinned in
// tools/operators/lws) with its CRD. LWS needs its mutating webhooks: the
// pod webhook gives each leader its group-index label and each worker its
// worker-index, and the LeaderWorkerSet webhook defaults fields the
// controller reads. They are registered with the API server by URL on
// loopback, for LWS pods and objects in namespace ns only, and removed when
// the test ends.
func (e *Env) StartLWS(t *testing.T, ns string) {
	t.Helper()
	port, certDir := e.StartOperator(t, localcluster.OperatorLWS).Webhook()
	e.RegisterMutatingWebhooks(t, "lws-"+ns, ns, port, certDir,
		WebhookRoute{Name: "mleaderworkerset.lws.x-k8s.io", Path: "/mutate-leaderworkerset-x-k8s-io-v1-leaderworkerset",
			Rule: admissionregistrationv1.Rule{APIGroups: []string{"leaderworkerset.x-k8s.io"}, APIVersions: []string{"v1"}, Resources: []string{"leaderworkersets"}}},
		WebhookRoute{Name: "mpod.lws.x-k8s.io", Path: "/mutate--v1-pod",
			Rule:    admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods"}},
			Objects: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "leaderworkerset.sigs.k8s.io/name", Operator: metav1.LabelSelectorOpExists}}}})
}

// CreateLeaderWorkerSet creates a LeaderWorkerSet (retrying while the
// operator's webhook is not serving yet) and waits until the controller
// has made its leaders' StatefulSet.
func (e *Env) CreateLeaderWorkerSet(t TB, dyn dynamic.Interface, obj *unstructured.Unstructured) {
	t.Helper()
	ns, name := obj.GetNamespace(), obj.GetName()
	Eventually(t, 60*time.Second, "LeaderWorkerSet "+name+" created", func(ctx context.Context) (bool, error) {
		_, err := dyn.Resource(LeaderWorkerSets).Namespace(ns).Create(ctx, obj.DeepCopy(), metav1.CreateOptions{})
		return err == nil, err
	})
	// The controller can panic on its first reconcile of a new
	// LeaderWorkerSet, before its cache holds the revision it has just
	// created (kubernetes-sigs/lws#593), and then waits out a back-off that
	// grows with each panic. An update of the object queues a reconcile at
	// once, so the object's annotation is touched until the leaders'
	// StatefulSet exists.
	nudges := 0
	Eventually(t, 60*time.Second, "LeaderWorkerSet "+name+"'s leader StatefulSet", func(ctx context.Context) (bool, error) {
		_, err := e.Client.AppsV1().StatefulSets(ns).Get(ctx, name, metav1.GetOptions{})
		if err == nil || !apierrors.IsNotFound(err) {
			return err == nil, err
		}
		nudges++
		patch := fmt.Sprintf(`{"metadata":{"annotations":{"test.gpuplane.io/nudge":"%d"}}}`, nudges)
		if _, err := dyn.Resource(LeaderWorkerSets).Namespace(ns).Patch(ctx, name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			return false, err
		}
		return false, fmt.Errorf("no StatefulSet %s after %d nudges", name, nudges)
	})
}
