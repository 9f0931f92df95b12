// Package helm_test installs gpuplane's Helm chart with Helm's own Go SDK
// into a real etcd and kube-apiserver: every object goes through the API
// server's validation, admission and RBAC; the scheduler then runs under
// exactly the chart's RBAC (impersonating its ServiceAccount), upgrades the
// CRDs a previous chart left, and the uninstall leaves nothing of the
// release behind.
package helm_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"

	"github.com/gpuplane/gpuplane/api/scheduling/v1alpha1"
	helmchart "github.com/gpuplane/gpuplane/deploy/helm"
	"github.com/gpuplane/gpuplane/internal/adapter"
	"github.com/gpuplane/gpuplane/internal/localcluster"
	"github.com/gpuplane/gpuplane/test/integration/framework"
)

var env *framework.Env

func TestMain(m *testing.M) {
	os.Exit(framework.Main(m, localcluster.DefaultConfig(), &env))
}

const (
	namespace = helmchart.DefaultNamespace
	release   = "gpuplane"
	// removedField is the Queue field the previous chart's CRD lacks.
	removedField = "reclaim"
)

var crdResource = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// helmConfig is Helm's action configuration for the test's cluster.
func helmConfig(t *testing.T) *action.Configuration {
	t.Helper()
	flags := genericclioptions.NewConfigFlags(false)
	kubeconfig, ns := env.ControlPlane.Kubeconfig(), namespace
	flags.KubeConfig, flags.Namespace = &kubeconfig, &ns
	cfg := new(action.Configuration)
	if err := cfg.Init(flags, namespace, "secret", func(format string, v ...any) { t.Logf("helm: "+format, v...) }); err != nil {
		t.Fatalf("helm: %v", err)
	}
	return cfg
}

// previousChart is the chart as an earlier version shipped it: its Queue
// CRD lacks removedField.
func previousChart(t *testing.T) *chart.Chart {
	t.Helper()
	c, err := helmchart.Load()
	if err != nil {
		t.Fatal(err)
	}
	c.Metadata.Version = "0.0.9"
	for _, f := range c.Files {
		if !strings.HasSuffix(f.Name, "_queues.yaml") || !strings.HasPrefix(f.Name, "crds/") {
			continue
		}
		var crd map[string]any
		if err := yaml.Unmarshal(f.Data, &crd); err != nil {
			t.Fatal(err)
		}
		for _, v := range nested[[]any](t, crd, "spec", "versions") {
			props := nested[map[string]any](t, v.(map[string]any), "schema", "openAPIV3Schema", "properties", "spec", "properties")
			if _, ok := props[removedField]; !ok {
				t.Fatalf("the Queue CRD has no spec.%s to remove", removedField)
			}
			delete(props, removedField)
		}
		if f.Data, err = yaml.Marshal(crd); err != nil {
			t.Fatal(err)
		}
		return c
	}
	t.Fatal("the chart has no Queue CRD in crds/")
	return nil
}

func nested[T any](t *testing.T, m map[string]any, path ...string) T {
	t.Helper()
	v, ok, err := unstructured.NestedFieldNoCopy(m, path...)
	out, isT := v.(T)
	if !ok || err != nil || !isT {
		t.Fatalf("no %s in the CRD (%v)", strings.Join(path, "."), err)
	}
	return out
}

func dyn(t *testing.T) dynamic.Interface {
	t.Helper()
	d, err := dynamic.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func queue(name string, reclaim string) *unstructured.Unstructured {
	spec := map[string]any{"resources": []any{map[string]any{"name": "nvidia.com/gpu", "guaranteed": "4"}}}
	if reclaim != "" {
		spec[removedField] = reclaim
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": v1alpha1.SchemeGroupVersion.String(), "kind": "Queue",
		"metadata": map[string]any{"name": name}, "spec": spec,
	}}
}

// asScheduler is the chart's scheduler ServiceAccount, by impersonation.
func asScheduler() *rest.Config {
	c := rest.CopyConfig(env.Config)
	c.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:" + namespace + ":gpuplane-scheduler",
		Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + namespace, "system:authenticated"}}
	return c
}

// TestInstallUpgradeUninstall is the chart's life on a cluster.
func TestInstallUpgradeUninstall(t *testing.T) {
	ctx := t.Context()
	d := dyn(t)
	cfg := helmConfig(t)

	current, err := helmchart.Load()
	if err != nil {
		t.Fatal(err)
	}

	// Install the previous chart version; create a Queue and a PodGroup.
	in := action.NewInstall(cfg)
	in.ReleaseName, in.Namespace, in.CreateNamespace, in.Timeout = release, namespace, true, 2*time.Minute
	values := map[string]any{"scheduler": map[string]any{"replicas": 1}, "admission": map[string]any{"kaiPods": true, "hamiPods": true}}
	if _, err := in.RunWithContext(ctx, previousChart(t), values); err != nil {
		t.Fatalf("helm install: %v", err)
	}
	waitCRD(t, d, "queues."+v1alpha1.GroupName, false)
	queues := d.Resource(v1alpha1.QueuesResource)
	if _, err := queues.Create(ctx, queue("before", "Never"), metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating a Queue: %v", err)
	}
	if got, _ := queues.Get(ctx, "before", metav1.GetOptions{}); got != nil {
		if _, ok, _ := unstructured.NestedString(got.Object, "spec", removedField); ok {
			t.Fatalf("the previous chart's CRD kept spec.%s: the test's premise is wrong", removedField)
		}
	}
	pg := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": v1alpha1.SchemeGroupVersion.String(), "kind": "PodGroup",
		"metadata": map[string]any{"name": "before", "namespace": "default"}, "spec": map[string]any{"minMember": int64(2), "queue": "before"},
	}}
	if _, err := d.Resource(v1alpha1.PodGroupsResource).Namespace("default").Create(ctx, pg, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating a PodGroup: %v", err)
	}
	for _, o := range []struct {
		gvr      schema.GroupVersionResource
		ns, name string
	}{
		{schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "daemonsets"}, namespace, "gpuplane-agent"},
		{schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}, namespace, "gpuplane-scheduler"},
		{schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}, namespace, "gpuplane-agent-config"},
		{schema.GroupVersionResource{Group: "admissionregistration.k8s.io", Version: "v1", Resource: "mutatingadmissionpolicies"}, "", "gpuplane-hide-gpus"},
		{schema.GroupVersionResource{Group: "admissionregistration.k8s.io", Version: "v1", Resource: "validatingadmissionpolicies"}, "", "gpuplane-agent-own-node"},
	} {
		if _, err := d.Resource(o.gvr).Namespace(o.ns).Get(ctx, o.name, metav1.GetOptions{}); err != nil {
			t.Errorf("after install: %s %s: %v", o.gvr.Resource, o.name, err)
		}
	}

	// A scheduler that may not change CRDs refuses to run on the older one.
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	refuse := adapter.Config{RESTConfig: asScheduler(), Logger: quiet, ServeAddr: ""}
	runCtx, cancel := context.WithTimeout(ctx, time.Minute)
	err = adapter.Run(runCtx, refuse)
	cancel()
	if err == nil || !strings.Contains(err.Error(), "older than this scheduler") || !strings.Contains(err.Error(), "spec."+removedField) {
		t.Fatalf("scheduler on an older CRD without --manage-crds: %v, want a refusal naming spec.%s", err, removedField)
	}

	// An upgrade with a typo in its values is refused, naming the key,
	// and the release stays as it was.
	bad := action.NewUpgrade(cfg)
	bad.Namespace = namespace
	if _, err := bad.RunWithContext(ctx, release, current, map[string]any{"schedular": map[string]any{"replicas": 1}}); err == nil || !strings.Contains(err.Error(), "schedular") {
		t.Fatalf("helm upgrade with a typo: %v, want an error naming schedular", err)
	}
	if rel, err := action.NewGet(cfg).Run(release); err != nil || rel.Version != 1 || rel.Chart.Metadata.Version != "0.0.9" {
		t.Fatalf("after a refused upgrade the release is %v (%v), want revision 1 of chart 0.0.9", rel, err)
	}

	// helm upgrade to the current chart leaves crds/ alone, as Helm does.
	up := action.NewUpgrade(cfg)
	up.Namespace, up.Timeout = namespace, 2*time.Minute
	if _, err := up.RunWithContext(ctx, release, current, values); err != nil {
		t.Fatalf("helm upgrade: %v", err)
	}
	if !crdLacks(t, d, removedField) {
		t.Fatal("helm upgraded the CRD in crds/ by itself: the test's premise is wrong")
	}

	// The scheduler, under exactly the chart's RBAC, upgrades it at start.
	schedCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- adapter.Run(schedCtx, adapter.Config{RESTConfig: asScheduler(), Logger: quiet, ManageCRDs: true,
			LeaseName: "gpuplane-scheduler", LeaseNamespace: namespace, Identity: "helm-test",
			LeaseDuration: 3 * time.Second, RenewDeadline: 2 * time.Second, RetryPeriod: 200 * time.Millisecond})
	}()
	defer func() {
		stop()
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("scheduler: %v", err)
		}
	}()
	waitCRD(t, d, "queues."+v1alpha1.GroupName, true)
	waitServed(t, queues)
	if _, err := queues.Create(ctx, queue("after", "Never"), metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating a Queue after the upgrade: %v", err)
	}
	got, err := queues.Get(ctx, "after", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if v, _, _ := unstructured.NestedString(got.Object, "spec", removedField); v != "Never" {
		t.Errorf("after the upgrade spec.%s is %q, want Never: the new field is not served", removedField, v)
	}
	for _, name := range []string{"before", "after"} {
		if _, err := queues.Get(ctx, name, metav1.GetOptions{}); err != nil {
			t.Errorf("Queue %s after the upgrade: %v", name, err)
		}
	}
	if _, err := d.Resource(v1alpha1.PodGroupsResource).Namespace("default").Get(ctx, "before", metav1.GetOptions{}); err != nil {
		t.Errorf("PodGroup before after the upgrade: %v", err)
	}
	stop()
	if err := <-done; err != nil && !errors.Is(err, context.Canceled) && !errors.Is(err, adapter.ErrLostLeadership) {
		t.Errorf("scheduler: %v", err)
	}
	done <- nil

	// Uninstall: nothing of the release is left; the CRDs and the
	// Queues and PodGroups in them stay (Helm never deletes crds/).
	un := action.NewUninstall(cfg)
	un.Wait, un.Timeout = true, 2*time.Minute
	if _, err := un.Run(release); err != nil {
		t.Fatalf("helm uninstall: %v", err)
	}
	if left := leftovers(t, d); len(left) > 0 {
		t.Errorf("after helm uninstall these objects are left: %s", strings.Join(left, ", "))
	}
	for _, name := range []string{"before", "after"} {
		if _, err := queues.Get(ctx, name, metav1.GetOptions{}); err != nil {
			t.Errorf("Queue %s after the uninstall: %v", name, err)
		}
	}
}

// crdLacks reports whether the installed Queue CRD lacks spec.<field>.
func crdLacks(t *testing.T, d dynamic.Interface, field string) bool {
	t.Helper()
	u, err := d.Resource(crdResource).Get(t.Context(), "queues."+v1alpha1.GroupName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range nested[[]any](t, u.Object, "spec", "versions") {
		props := nested[map[string]any](t, v.(map[string]any), "schema", "openAPIV3Schema", "properties", "spec", "properties")
		if _, ok := props[field]; ok {
			return false
		}
	}
	return true
}

// waitCRD waits until the CRD is established and, with withField, serves
// spec.<removedField>.
func waitCRD(t *testing.T, d dynamic.Interface, name string, withField bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		u, err := d.Resource(crdResource).Get(t.Context(), name, metav1.GetOptions{})
		if err == nil {
			conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
			est := slices.ContainsFunc(conds, func(c any) bool {
				m, _ := c.(map[string]any)
				return m["type"] == "Established" && m["status"] == "True"
			})
			if est && (!withField || !crdLacks(t, d, removedField)) {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("CRD %s not established%s within a minute (%v)", name, map[bool]string{true: " with spec." + removedField}[withField], err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// waitServed waits until the API server serves spec.removedField of
// Queues. It reads the CRD object's new schema in a handler of its own, a
// moment after the object changed: until then it prunes the field. A
// server-side dry run shows which schema is served without storing
// anything.
func waitServed(t *testing.T, queues dynamic.NamespaceableResourceInterface) {
	t.Helper()
	framework.Eventually(t, time.Minute, "the API server serving spec."+removedField+" of Queues", func(ctx context.Context) (bool, error) {
		got, err := queues.Create(ctx, queue("probe", "Never"), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err != nil {
			return false, err
		}
		v, _, _ := unstructured.NestedString(got.Object, "spec", removedField)
		return v == "Never", fmt.Errorf("a dry-run Queue came back with spec.%s %q", removedField, v)
	})
}

// leftovers lists the objects labelled part of gpuplane, of every kind the
// chart creates, that still exist.
func leftovers(t *testing.T, d dynamic.Interface) []string {
	t.Helper()
	kinds := []schema.GroupVersionResource{
		{Group: "apps", Version: "v1", Resource: "daemonsets"},
		{Group: "apps", Version: "v1", Resource: "deployments"},
		{Version: "v1", Resource: "configmaps"},
		{Version: "v1", Resource: "services"},
		{Version: "v1", Resource: "serviceaccounts"},
		{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "clusterroles"},
		{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "clusterrolebindings"},
		{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "roles"},
		{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "rolebindings"},
		{Group: "admissionregistration.k8s.io", Version: "v1", Resource: "validatingadmissionpolicies"},
		{Group: "admissionregistration.k8s.io", Version: "v1", Resource: "validatingadmissionpolicybindings"},
		{Group: "admissionregistration.k8s.io", Version: "v1", Resource: "mutatingadmissionpolicies"},
		{Group: "admissionregistration.k8s.io", Version: "v1", Resource: "mutatingadmissionpolicybindings"},
		{Version: "v1", Resource: "secrets"},
		{Group: "policy", Version: "v1", Resource: "poddisruptionbudgets"},
		{Group: "resource.k8s.io", Version: "v1", Resource: "deviceclasses"},
	}
	return framework.ReleaseLeftovers(t, d, namespace, kinds)
}
