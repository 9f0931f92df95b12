package compat_test

import (
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/gpuplane/gpuplane/internal/localcluster"
	"github.com/gpuplane/gpuplane/test/integration/framework"
)

// apiServer is one kube-apiserver the tier runs gpuplane against.
type apiServer struct {
	name  string
	minor string
	// extraArgs are kube-apiserver flags beyond the defaults.
	extraArgs []string
	// mapAt is the apiVersion the chart's MutatingAdmissionPolicies are
	// installed at, empty where the API server serves none.
	mapAt string
	// noDRA: the API server serves no resource.k8s.io/v1.
	noDRA bool
	// workloadAPI is the version of the Workload API turned on; only the
	// Workload API's gang is tested on such a server.
	workloadAPI string
}

// servers lists the API servers of the tier's minors: each with its
// defaults; 1.34 once more with MutatingAdmissionPolicy's beta turned on,
// which the chart then installs at v1beta1, and once more with DRA's API
// turned off (possible up to 1.34: later releases lock DRA on), where the
// chart installs no DeviceClass and gpuplane-scheduler runs without DRA;
// 1.37 once more with the Workload API (scheduling.k8s.io/v1alpha3, where
// 1.36 served v1alpha2) for a gang named by pods' spec.schedulingGroup.
func servers(minors []string) ([]apiServer, error) {
	var out []apiServer
	for _, m := range minors {
		_, minor, ok := strings.Cut(m, ".")
		n, err := strconv.Atoi(minor)
		if !ok || err != nil {
			return nil, fmt.Errorf("%s=%q: %q is not a Kubernetes minor such as 1.34", framework.CompatMinorsEnv, strings.Join(minors, " "), m)
		}
		s := apiServer{name: m, minor: m}
		if n >= 36 {
			s.mapAt = "admissionregistration.k8s.io/v1"
		}
		out = append(out, s)
		if n == 34 || n == 35 {
			out = append(out, apiServer{name: m + "-mutating-admission-policy-beta", minor: m,
				extraArgs: []string{"--feature-gates=MutatingAdmissionPolicy=true", "--runtime-config=admissionregistration.k8s.io/v1beta1=true"},
				mapAt:     "admissionregistration.k8s.io/v1beta1"})
		}
		if n >= 37 {
			out = append(out, apiServer{name: m + "-workload-api", minor: m, workloadAPI: "scheduling.k8s.io/v1alpha3",
				extraArgs: []string{"--feature-gates=GenericWorkload=true", "--runtime-config=scheduling.k8s.io/v1alpha3=true"}})
		}
		if n == 34 {
			out = append(out, apiServer{name: m + "-without-dra", minor: m, mapAt: s.mapAt, noDRA: true,
				extraArgs: []string{"--feature-gates=DynamicResourceAllocation=false", "--runtime-config=resource.k8s.io/v1=false"}})
		}
	}
	return out, nil
}

// start runs etcd, s's kube-apiserver and kwok for the test.
func (s apiServer) start(t *testing.T) *framework.Env {
	t.Helper()
	cfg, err := framework.KubeVersionConfig(localcluster.Config{Kwok: true, ExtraAPIServerArgs: s.extraArgs}, s.minor)
	if err != nil {
		t.Fatal(err)
	}
	env := framework.StartEnv(t, cfg)
	info, err := env.Client.Discovery().ServerVersion()
	if err != nil {
		t.Fatal(err)
	}
	if want := "v" + s.minor + "."; !strings.HasPrefix(info.GitVersion, want) {
		t.Fatalf("the API server is %s, want Kubernetes %s (is %s built from tools/k8s-%s?)", info.GitVersion, s.minor, cfg.KubeBinDir, s.minor)
	}
	t.Logf("kube-apiserver %s", info.GitVersion)
	return env
}

// TestKubernetesVersions runs the tier's checks on each API server, one
// control plane each.
func TestKubernetesVersions(t *testing.T) {
	list, err := servers(framework.CompatMinors())
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range list {
		t.Run(s.name, func(t *testing.T) {
			env := s.start(t)
			if s.workloadAPI != "" {
				t.Run("Workload API gang", func(t *testing.T) { testWorkloadAPI(t, env, s.workloadAPI) })
				return
			}
			t.Run("chart lint and server-side dry run", func(t *testing.T) { testChartDryRun(t, env, s) })
			t.Run("chart install, upgrade and uninstall", func(t *testing.T) { testChartLifecycle(t, env, s) })
			t.Run("scheduling a GPU pod and a gang", func(t *testing.T) { testScheduling(t, env) })
			if !s.noDRA {
				t.Run("DRA claim allocated", func(t *testing.T) { testDRA(t, env) })
			}
		})
	}
}
