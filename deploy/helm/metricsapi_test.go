package helmchart

import (
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// The custom metrics API, when enabled: the APIService trusts the CA that
// signed the generated serving certificate for the Service's DNS name, the
// server reads the agents' metrics Service, and without the agents the
// chart refuses.
func TestMetricsAPI(t *testing.T) {
	c, err := Load()
	if err != nil {
		t.Fatal(err)
	}
	r, err := Render(c, map[string]any{"metricsAPI": map[string]any{"enabled": true}}, "gp", "gpu-infra")
	if err != nil {
		t.Fatal(err)
	}
	text := r["metricsapi/metricsapi.yaml"]
	objs := map[string]map[string]any{}
	for doc := range strings.SplitSeq(text, "\n---\n") {
		var o map[string]any
		if err := yaml.Unmarshal([]byte(doc), &o); err != nil {
			t.Fatalf("%v\n%s", err, doc)
		}
		if o == nil {
			continue
		}
		objs[o["kind"].(string)+"/"+o["metadata"].(map[string]any)["name"].(string)] = o
	}
	for _, want := range []string{"Secret/gp-gpuplane-metrics-api-tls", "ServiceAccount/gp-gpuplane-metrics-api", "ClusterRole/gp-gpuplane-metrics-api",
		"ClusterRoleBinding/gp-gpuplane-metrics-api-auth-delegator", "RoleBinding/gp-gpuplane-metrics-api-auth-reader",
		"Deployment/gp-gpuplane-metrics-api", "Service/gp-gpuplane-metrics-api", "APIService/v1beta2.custom.metrics.k8s.io"} {
		if objs[want] == nil {
			t.Errorf("no %s among %v", want, keys(objs))
		}
	}
	api := objs["APIService/v1beta2.custom.metrics.k8s.io"]
	secret := objs["Secret/gp-gpuplane-metrics-api-tls"]
	if api == nil || secret == nil {
		t.FailNow()
	}
	spec := api["spec"].(map[string]any)
	ca := secret["data"].(map[string]any)["ca.crt"]
	if spec["caBundle"] != ca || ca == "" {
		t.Errorf("APIService caBundle %v, want the Secret's ca.crt", spec["caBundle"])
	}
	crt, err := base64.StdEncoding.DecodeString(secret["data"].(map[string]any)["tls.crt"].(string))
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(crt)
	if block == nil {
		t.Fatalf("tls.crt holds no PEM block: %q", crt)
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	if err := cert.VerifyHostname("gp-gpuplane-metrics-api.gpu-infra.svc"); err != nil {
		t.Errorf("the serving certificate is not for the Service's DNS name, which kube-apiserver checks: %v", err)
	}
	if !strings.Contains(text, "--agents=gpu-infra/gp-gpuplane-agent-metrics") {
		t.Errorf("the server does not read the agents' metrics Service:\n%s", text)
	}
	if _, err := Render(c, map[string]any{"metricsAPI": map[string]any{"enabled": true}, "agent": map[string]any{"enabled": false}}, "gp", "gpu-infra"); err == nil ||
		!strings.Contains(err.Error(), "needs agent.enabled") {
		t.Errorf("without agents: %v, want a refusal naming agent.enabled", err)
	}
}

func keys(m map[string]map[string]any) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}
