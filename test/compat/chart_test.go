package compat_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chartutil"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/restmapper"

	helmchart "github.com/gpuplane/gpuplane/deploy/helm"
	"github.com/gpuplane/gpuplane/test/integration/framework"
)

const (
	namespace = helmchart.DefaultNamespace
	release   = "gpuplane"
)

// values are the chart values the tier installs with: one scheduler
// replica, nothing else changed.
func values() map[string]any {
	return map[string]any{"scheduler": map[string]any{"replicas": 1}}
}

func helmConfig(t *testing.T, env *framework.Env) *action.Configuration {
	t.Helper()
	cfg, err := helmchart.ActionConfig(env.ControlPlane.Kubeconfig(), namespace, func(format string, v ...any) { t.Logf("helm: "+format, v...) })
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// testChartDryRun lints the chart for the API server's version, renders
// it against the API server (helm's server dry run: .Capabilities from
// its discovery) and sends every rendered object to it with a server-side
// dry run, so each passes the API server's own validation.
func testChartDryRun(t *testing.T, env *framework.Env, s apiServer) {
	ctx := t.Context()
	info, err := env.Client.Discovery().ServerVersion()
	if err != nil {
		t.Fatal(err)
	}
	kv, err := chartutil.ParseKubeVersion(info.GitVersion)
	if err != nil {
		t.Fatal(err)
	}
	lint := action.NewLint()
	lint.Namespace, lint.KubeVersion = namespace, kv
	res := lint.Run([]string{filepath.Join(framework.RepoRoot(), "deploy", "helm", helmchart.Name)}, values())
	for _, m := range res.Messages {
		t.Logf("helm lint: %s", m)
	}
	if len(res.Errors) > 0 {
		t.Fatalf("helm lint on Kubernetes %s: %v", info.GitVersion, errors.Join(res.Errors...))
	}

	c, err := helmchart.Load()
	if err != nil {
		t.Fatal(err)
	}
	in := action.NewInstall(helmConfig(t, env))
	in.ReleaseName, in.Namespace, in.DryRun, in.DryRunOption = release, namespace, true, "server"
	rel, err := in.RunWithContext(ctx, c, values())
	if err != nil {
		t.Fatalf("helm install --dry-run=server: %v", err)
	}
	// Namespaced objects are checked in the release's namespace, which a
	// dry run does not make.
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}
	if _, err := env.Client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	dyn, mapper := clients(t, env)
	kinds := map[string]int{}
	dec := utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(rel.Manifest), 4096)
	for {
		var obj unstructured.Unstructured
		if err := dec.Decode(&obj.Object); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("decoding the rendered chart: %v", err)
		}
		if len(obj.Object) == 0 {
			continue
		}
		gvk := obj.GroupVersionKind()
		m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err != nil {
			t.Errorf("%s %s: the API server does not serve it: %v", gvk, obj.GetName(), err)
			continue
		}
		ri := dyn.Resource(m.Resource)
		var r dynamic.ResourceInterface = ri
		if m.Scope.Name() == meta.RESTScopeNameNamespace {
			r = ri.Namespace(namespace)
		}
		if _, err := r.Create(ctx, &obj, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}, FieldValidation: "Strict"}); err != nil {
			t.Errorf("server-side dry run of %s %s: %v", gvk, obj.GetName(), err)
		}
		kinds[gvk.GroupVersion().String()+" "+gvk.Kind]++
	}
	if got := kinds[s.mapAt+" MutatingAdmissionPolicy"]; s.mapAt != "" && got == 0 {
		t.Errorf("no MutatingAdmissionPolicy rendered at %s, which the API server serves (rendered: %v)", s.mapAt, kinds)
	}
	for k, n := range kinds {
		if strings.HasSuffix(k, " MutatingAdmissionPolicy") && !strings.HasPrefix(k, s.mapAt+" ") {
			t.Errorf("%d MutatingAdmissionPolicies rendered as %s, want them at %q", n, k, s.mapAt)
		}
	}
	if has := kinds["resource.k8s.io/v1 DeviceClass"] > 0; has == s.noDRA {
		t.Errorf("DeviceClasses rendered: %v, with resource.k8s.io/v1 served: %v (rendered: %v)", has, !s.noDRA, kinds)
	}
}

func clients(t *testing.T, env *framework.Env) (dynamic.Interface, meta.RESTMapper) {
	t.Helper()
	dyn, err := dynamic.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	return dyn, restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(env.Client.Discovery()))
}

// testChartLifecycle installs the chart, upgrades it with one more
// admission policy turned on, and uninstalls it: the policies exist at the
// version served, or NOTES.txt says they are off; nothing of the release
// is left behind.
func testChartLifecycle(t *testing.T, env *framework.Env, s apiServer) {
	ctx := t.Context()
	cfg := helmConfig(t, env)
	dyn, _ := clients(t, env)
	c, err := helmchart.Load()
	if err != nil {
		t.Fatal(err)
	}
	in := action.NewInstall(cfg)
	in.ReleaseName, in.Namespace, in.CreateNamespace, in.Timeout = release, namespace, true, 2*time.Minute
	rel, err := in.RunWithContext(ctx, c, values())
	if err != nil {
		t.Fatalf("helm install: %v", err)
	}
	off := strings.Contains(rel.Info.Notes, "Off on this cluster: admission.hideGPUs, admission.gpuFractionDevice")
	if off != (s.mapAt == "") {
		t.Errorf("NOTES.txt says the admission policies are off: %v, want %v:\n%s", off, s.mapAt == "", rel.Info.Notes)
	}
	objects := []struct {
		gvr      schema.GroupVersionResource
		ns, name string
	}{
		{schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "daemonsets"}, namespace, "gpuplane-agent"},
		{schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}, namespace, "gpuplane-scheduler"},
		{schema.GroupVersionResource{Group: "admissionregistration.k8s.io", Version: "v1", Resource: "validatingadmissionpolicies"}, "", "gpuplane-agent-own-node"},
	}
	if !s.noDRA {
		objects = append(objects, struct {
			gvr      schema.GroupVersionResource
			ns, name string
		}{schema.GroupVersionResource{Group: "resource.k8s.io", Version: "v1", Resource: "deviceclasses"}, "", "gpu.gpuplane.io"})
	} else if !strings.Contains(rel.Info.Notes, "Off on this cluster: DRA (agent.dra)") {
		t.Errorf("NOTES.txt does not say DRA is off:\n%s", rel.Info.Notes)
	}
	for _, o := range objects {
		if _, err := dyn.Resource(o.gvr).Namespace(o.ns).Get(ctx, o.name, metav1.GetOptions{}); err != nil {
			t.Errorf("after install: %s %s: %v", o.gvr.Resource, o.name, err)
		}
	}
	policies := mapResource(s.mapAt)
	if s.mapAt != "" {
		if _, err := dyn.Resource(policies).Get(ctx, "gpuplane-hide-gpus", metav1.GetOptions{}); err != nil {
			t.Errorf("after install: MutatingAdmissionPolicy gpuplane-hide-gpus at %s: %v", s.mapAt, err)
		}
		checkFractionDevice(t, env)
	}

	// An upgrade that turns one more policy on installs it where the API
	// server serves MutatingAdmissionPolicy, and renders by the same
	// capabilities.
	up := action.NewUpgrade(cfg)
	up.Namespace, up.Timeout = namespace, 2*time.Minute
	more := values()
	more["admission"] = map[string]any{"kaiPods": true}
	rel, err = up.RunWithContext(ctx, release, c, more)
	if err != nil {
		t.Fatalf("helm upgrade: %v", err)
	}
	if rel.Version != 2 {
		t.Errorf("after the upgrade the release is revision %d, want 2", rel.Version)
	}
	if s.mapAt != "" {
		if _, err := dyn.Resource(policies).Get(ctx, "gpuplane-kai-pods", metav1.GetOptions{}); err != nil {
			t.Errorf("after the upgrade: MutatingAdmissionPolicy gpuplane-kai-pods at %s: %v", s.mapAt, err)
		}
	} else if !strings.Contains(rel.Info.Notes, "admission.kaiPods") {
		t.Errorf("after the upgrade NOTES.txt does not say admission.kaiPods is off:\n%s", rel.Info.Notes)
	}

	un := action.NewUninstall(cfg)
	un.Wait, un.Timeout = true, 2*time.Minute
	if _, err := un.Run(release); err != nil {
		t.Fatalf("helm uninstall: %v", err)
	}
	if left := leftovers(t, dyn, s); len(left) > 0 {
		t.Errorf("after helm uninstall these objects are left: %s", strings.Join(left, ", "))
	}
}

// mapResource is MutatingAdmissionPolicies at apiVersion.
func mapResource(apiVersion string) schema.GroupVersionResource {
	gv, _ := schema.ParseGroupVersion(apiVersion)
	return gv.WithResource("mutatingadmissionpolicies")
}

// checkFractionDevice shows the installed policies at work: a pod that
// asks for half a GPU by annotation gets a GPU device from
// gpu-fraction-device (a server-side dry run, once the API server has
// loaded the policy).
func checkFractionDevice(t *testing.T, env *framework.Env) {
	t.Helper()
	ns := env.CreateNamespace(t)
	p := framework.Pod(ns, "half").Annotation("gpu-fraction", "0.5").Obj()
	framework.Eventually(t, time.Minute, "gpu-fraction-device giving a pod a GPU device", func(ctx context.Context) (bool, error) {
		got, err := env.Client.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err != nil {
			return false, err
		}
		q := got.Spec.Containers[0].Resources.Limits[framework.ResourceGPU]
		return q.Value() == 1, fmt.Errorf("the pod's limits are %v", got.Spec.Containers[0].Resources.Limits)
	})
}

// leftovers lists the objects labelled part of gpuplane that remain, of
// every kind the chart makes that the API server serves, and Helm's
// release records.
func leftovers(t *testing.T, dyn dynamic.Interface, s apiServer) []string {
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
	}
	if !s.noDRA {
		kinds = append(kinds, schema.GroupVersionResource{Group: "resource.k8s.io", Version: "v1", Resource: "deviceclasses"})
	}
	if s.mapAt != "" {
		kinds = append(kinds, mapResource(s.mapAt), mapResource(s.mapAt).GroupVersion().WithResource("mutatingadmissionpolicybindings"))
	}
	return framework.ReleaseLeftovers(t, dyn, namespace, kinds)
}
