package version

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"

	coordv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/version"
	fakediscovery "k8s.io/client-go/discovery/fake"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/gpuplane/gpuplane/api/buildinfo"
	"github.com/gpuplane/gpuplane/internal/cliutil"
)

func node(name string, annotations map[string]string) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: annotations}}
}

func TestCollectAndPrint(t *testing.T) {
	agent := `{"version":"v0.1.0","commit":"0123456789abcdef0123-dirty","goVersion":"go1.26.0","kubernetesClient":"v0.36.3","platform":"linux/amd64"}`
	sched := `{"version":"v0.1.0","commit":"fedcba","goVersion":"go1.26.0"}`
	holder := "gpuplane-scheduler-7d9-x"
	client := fake.NewClientset(
		node("gpu-a", map[string]string{buildinfo.AgentAnnotation: agent}),
		node("gpu-b", map[string]string{buildinfo.AgentAnnotation: `{"version":"v1\u001b[31mred"}`}),
		node("cpu-only", nil),
		&coordv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "gpuplane-scheduler", Namespace: "gpuplane-system",
			Annotations: map[string]string{buildinfo.SchedulerAnnotation: sched}}, Spec: coordv1.LeaseSpec{HolderIdentity: &holder}},
		&coordv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "kube-scheduler", Namespace: "kube-system"}},
	)
	client.Discovery().(*fakediscovery.FakeDiscovery).FakedServerVersion = &version.Info{GitVersion: "v1.36.3"}
	r := &Report{Client: buildinfo.Info{Version: "v0.1.0", GoVersion: "go1.26.0"}}
	if err := Collect(context.Background(), client, r); err != nil {
		t.Fatal(err)
	}
	if r.Server != "v1.36.3" {
		t.Errorf("server %q", r.Server)
	}
	if len(r.Schedulers) != 1 || r.Schedulers[0].Name != "gpuplane-system/gpuplane-scheduler" || r.Schedulers[0].Holder != holder ||
		r.Schedulers[0].Build == nil || r.Schedulers[0].Build.Commit != "fedcba" {
		t.Errorf("schedulers %+v", r.Schedulers)
	}
	if len(r.Agents) != 2 || r.Agents[0].Name != "gpu-a" || r.Agents[0].Build == nil || r.Agents[0].Build.Version != "v0.1.0" {
		t.Fatalf("agents %+v", r.Agents)
	}
	if bad := r.Agents[1]; bad.Name != "gpu-b" || bad.Build != nil || !strings.Contains(bad.Error, buildinfo.AgentAnnotation) {
		t.Errorf("an agent annotation with a control character: %+v; want it refused with an error naming the annotation", bad)
	}

	var table bytes.Buffer
	if err := write(&table, cliutil.Table, r); err != nil {
		t.Fatal(err)
	}
	out := table.String()
	var squeezed strings.Builder
	for _, line := range strings.Split(out, "\n") {
		squeezed.WriteString(strings.Join(strings.Fields(line), " ") + "\n")
	}
	flat := squeezed.String()
	for _, want := range []string{"client", "scheduler gpuplane-system/gpuplane-scheduler (" + holder + ") v0.1.0 fedcba", "agent gpu-a v0.1.0 0123456789ab-dirty - go1.26.0 v0.36.3 linux/amd64",
		"agent gpu-b invalid - - - - -", "agent gpu-b: annotation " + buildinfo.AgentAnnotation + `: version: "v1\x1b[31mred" has character`, "Kubernetes API server: v1.36.3"} {
		if !strings.Contains(flat, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "\x1b") || strings.Contains(out, "cpu-only") {
		t.Errorf("table prints an untrusted value or a node without an agent:\n%s", out)
	}

	var js bytes.Buffer
	if err := write(&js, cliutil.JSON, r); err != nil {
		t.Fatal(err)
	}
	var back Report
	if err := json.Unmarshal(js.Bytes(), &back); err != nil {
		t.Fatalf("-o json is not JSON: %v\n%s", err, js.String())
	}
	if back.Agents[0].Build.KubernetesClient != "v0.36.3" || back.Client.Version != "v0.1.0" {
		t.Errorf("-o json lost fields: %s", js.String())
	}
}

func TestClientOnly(t *testing.T) {
	cmd := NewCommand()
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetArgs([]string{"--client", "-o", "yaml"})
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "client:\n  goVersion: go") || strings.Contains(out.String(), "agents") {
		t.Errorf("--client -o yaml printed:\n%s", out.String())
	}
}

func TestMissingExplicitKubeconfigFails(t *testing.T) {
	cmd := NewCommand()
	cmd.SetOut(&bytes.Buffer{})
	cmd.SetArgs([]string{"--kubeconfig", "/nonexistent/kubeconfig"})
	err := cmd.Execute()
	if err == nil || !strings.Contains(err.Error(), "kubeconfig") {
		t.Errorf("a missing --kubeconfig: %v", err)
	}
}
