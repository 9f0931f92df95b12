package operators_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// webhookRoute is one mutating webhook an operator serves: its name, the
// path it serves, the objects it mutates and, optionally, which of them by
// label.
type webhookRoute struct {
	name, path string
	rule       admissionregistrationv1.Rule
	objects    *metav1.LabelSelector
}

// registerMutatingWebhooks points the API server at an operator's
// webhook server on loopback (port, with the certificate servingCert wrote
// to certDir) for the routes given, in namespace ns only, and removes the
// configuration when the test ends: a webhook that outlived its operator
// would refuse every object it matches.
func registerMutatingWebhooks(t *testing.T, name, ns string, port int, certDir string, routes ...webhookRoute) {
	t.Helper()
	ca, err := os.ReadFile(filepath.Join(certDir, "tls.crt"))
	if err != nil {
		t.Fatal(err)
	}
	mwc := &admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: name}}
	for _, r := range routes {
		mwc.Webhooks = append(mwc.Webhooks, admissionregistrationv1.MutatingWebhook{
			Name:         r.name,
			ClientConfig: admissionregistrationv1.WebhookClientConfig{URL: new(fmt.Sprintf("https://127.0.0.1:%d%s", port, r.path)), CABundle: ca},
			Rules: []admissionregistrationv1.RuleWithOperations{{Rule: r.rule,
				Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update}}},
			NamespaceSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": ns}},
			ObjectSelector:          r.objects,
			FailurePolicy:           new(admissionregistrationv1.Fail),
			SideEffects:             new(admissionregistrationv1.SideEffectClassNone),
			AdmissionReviewVersions: []string{"v1"},
			TimeoutSeconds:          new(int32(10)),
		})
	}
	if _, err := env.Client.AdmissionregistrationV1().MutatingWebhookConfigurations().Create(t.Context(), mwc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = env.Client.AdmissionregistrationV1().MutatingWebhookConfigurations().Delete(context.Background(), mwc.Name, metav1.DeleteOptions{})
	})
}
