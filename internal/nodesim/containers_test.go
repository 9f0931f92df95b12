package nodesim

import "testing"

func TestImageName(t *testing.T) {
	for ref, want := range map[string]string{
		"ghcr.io/gpuplane/gpuplane-agent:v0.1.0":     "gpuplane-agent",
		"registry:5000/gpuplane/gpuplane-agent":      "gpuplane-agent",
		"gpuplane-scheduler@sha256:0123":             "gpuplane-scheduler",
		"localhost:5000/a/b/gpuplane:v1@sha256:89ab": "gpuplane",
	} {
		if got := imageName(ref); got != want {
			t.Errorf("imageName(%q) = %q, want %q", ref, got, want)
		}
	}
}

func TestExpandVars(t *testing.T) {
	vars := map[string]string{"POD_NAME": "agent-x", "NS": "gpuplane-system"}
	for in, want := range map[string]string{
		"--identity=$(POD_NAME)": "--identity=agent-x",
		"$(NS)/$(POD_NAME)":      "gpuplane-system/agent-x",
		"$(UNKNOWN)":             "$(UNKNOWN)",
		"$$(POD_NAME)":           "$(POD_NAME)",
		"cost: $5":               "cost: $5",
		"$(POD_NAME":             "$(POD_NAME",
		"trailing $":             "trailing $",
	} {
		if got := expandVars(in, vars); got != want {
			t.Errorf("expandVars(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestRewrite(t *testing.T) {
	mounts := []mount{
		{containerPath: "/var/lib/kubelet/pod-resources", hostPath: "/n/pod-resources"},
		{containerPath: "/var/lib/kubelet/device-plugins", hostPath: "/n"},
		{containerPath: "/etc/gpuplane/configs", hostPath: "/n/pods/u/volumes/config"},
	}
	for in, want := range map[string]string{
		"--kubelet-dir=/var/lib/kubelet/device-plugins":                      "--kubelet-dir=/n",
		"--pod-resources-socket=/var/lib/kubelet/pod-resources/kubelet.sock": "--pod-resources-socket=/n/pod-resources/kubelet.sock",
		"/etc/gpuplane/configs/default":                                      "/n/pods/u/volumes/config/default",
		"--config-dir=/etc/gpuplane/configsx":                                "--config-dir=/etc/gpuplane/configsx",
		"--metrics-addr=:9400":                                               "--metrics-addr=127.70.0.1:9400",
		"--serve-address=0.0.0.0:10259":                                      "--serve-address=127.70.0.1:10259",
		"--metrics-addr=127.0.0.1:9400":                                      "--metrics-addr=127.0.0.1:9400",
		":8080":                                                              "127.70.0.1:8080",
		"--labels=node":                                                      "--labels=node",
	} {
		if got := rewrite(in, mounts, "127.70.0.1"); got != want {
			t.Errorf("rewrite(%q) = %q, want %q", in, got, want)
		}
	}
}
