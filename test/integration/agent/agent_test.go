package agent_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gpuplane/gpuplane/api/buildinfo"
	"github.com/gpuplane/gpuplane/api/gpunode"
	"github.com/gpuplane/gpuplane/internal/testutil"
	"github.com/gpuplane/gpuplane/test/integration/framework"
)

// agentProcess is a running gpuplane-agent.
type agentProcess struct {
	cmd  *exec.Cmd
	out  *testutil.Buffer
	done chan error
}

// startAgentProcess runs the built agent with args and stops it (SIGTERM)
// when the test ends, unless the test stopped it already.
func startAgentProcess(t testing.TB, args ...string) *agentProcess {
	t.Helper()
	cmd := exec.Command(buildAgent(t), args...)
	out := &testutil.Buffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &agentProcess{cmd: cmd, out: out, done: make(chan error, 1)}
	go func() { p.done <- cmd.Wait() }()
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			<-p.done
		}
		if t.Failed() {
			t.Logf("agent output:\n%s", out.String())
		}
	})
	return p
}

// stop sends SIGTERM and returns the exit error (nil for exit 0).
func (p *agentProcess) stop() error {
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		return err
	}
	select {
	case err := <-p.done:
		return err
	case <-time.After(30 * time.Second):
		return errors.New("the agent did not exit within 30s of SIGTERM")
	}
}

// TestAgentLabelsItsNode runs the agent binary on a simulated DGX H100
// against the real API server and checks the Node after start and after a
// config reload: GPU Feature Discovery labels with the config's sharing,
// the topology annotation, labels no longer produced removed, and another
// owner's label kept.
func TestAgentLabelsItsNode(t *testing.T) {
	ctx := t.Context()
	const node = "agent-labels-node"
	obj := framework.UnmanagedGPUNode(node).Label("team", "ml").Obj()
	if _, err := env.Client.CoreV1().Nodes().Create(ctx, obj, metav1.CreateOptions{FieldManager: "kubectl"}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Client.CoreV1().Nodes().Delete(context.Background(), node, metav1.DeleteOptions{}) })

	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "config.yaml")
	// Time-sliced, with gfd.timestamp on.
	const shared = "version: v1\nflags:\n  gfd:\n    noTimestamp: false\nsharing:\n  timeSlicing:\n    resources:\n    - name: nvidia.com/gpu\n      replicas: 4\n"
	// Whole GPUs, no timestamp.
	const whole = "version: v1\n"
	if err := os.WriteFile(cfgPath, []byte(shared), 0o600); err != nil {
		t.Fatal(err)
	}
	p := startAgentProcess(t, "--simulate", "dgxh100", "--node-name", node, "--kubeconfig", env.ControlPlane.Kubeconfig(),
		"--config", cfgPath, "--kubelet-dir", filepath.Join(dir, "kubelet"), "--cdi-dir", "", "--metrics-addr", "",
		"--labels-interval", "1s", "--log-level", "debug")

	steps := []struct {
		name    string
		config  string
		want    map[string]string
		present []string
		missing []string
	}{
		{
			name: "time-sliced at start",
			want: map[string]string{
				"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3-SHARED", "nvidia.com/gpu.replicas": "4",
				"nvidia.com/gpu.sharing-strategy": "time-slicing", "nvidia.com/gpu.count": "8",
				"nvidia.com/gpu.family": "hopper", "nvidia.com/mig.strategy": "none",
				"team": "ml",
			},
			present: []string{"nvidia.com/gfd.timestamp", "nvidia.com/gpu.memory", "nvidia.com/cuda.driver-version.major", "nvidia.com/gpu.compute.major"},
		},
		{
			name:   "reload to whole GPUs without a timestamp",
			config: whole,
			want: map[string]string{
				"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", "nvidia.com/gpu.replicas": "1",
				"nvidia.com/gpu.sharing-strategy": "none", "team": "ml",
			},
			missing: []string{"nvidia.com/gfd.timestamp"},
		},
	}
	for _, st := range steps {
		t.Run(st.name, func(t *testing.T) {
			if st.config != "" {
				if err := os.WriteFile(cfgPath, []byte(st.config), 0o600); err != nil {
					t.Fatal(err)
				}
				if err := p.cmd.Process.Signal(syscall.SIGHUP); err != nil {
					t.Fatal(err)
				}
			}
			waitNodeLabels(t, node, st.want, st.present, st.missing, 8)
		})
	}
	// The agent records its build on its Node for gpuplane version.
	framework.Eventually(t, 30*time.Second, "the agent's build on node "+node, func(ctx context.Context) (bool, error) {
		n, err := env.Client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		b, err := buildinfo.Parse(buildinfo.AgentAnnotation, n.Annotations[buildinfo.AgentAnnotation])
		if err != nil {
			return false, err
		}
		return strings.HasPrefix(b.GoVersion, "go") && b.KubernetesClient != "", fmt.Errorf("build %+v", b)
	})
	if err := p.stop(); err != nil {
		t.Errorf("agent exit after SIGTERM: %v, want exit 0", err)
	}
}

// waitNodeLabels waits until node has the wanted label values, has the
// present keys, lacks the missing ones, and carries a topology annotation
// of one NVLink group of gpus GPUs.
func waitNodeLabels(t *testing.T, node string, want map[string]string, present, missing []string, gpus int) {
	t.Helper()
	framework.Eventually(t, 60*time.Second, "labels on node "+node, func(ctx context.Context) (bool, error) {
		n, err := env.Client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		for k, v := range want {
			if n.Labels[k] != v {
				return false, errors.New(k + "=" + n.Labels[k] + ", want " + v)
			}
		}
		for _, k := range present {
			if _, ok := n.Labels[k]; !ok {
				return false, errors.New(k + " missing")
			}
		}
		for _, k := range missing {
			if _, ok := n.Labels[k]; ok {
				return false, errors.New(k + " still present")
			}
		}
		topo, err := gpunode.ParseTopology(n.Annotations[gpunode.TopologyAnnotation])
		if err != nil {
			return false, err
		}
		if topo.GPUs != gpus || len(topo.Groups) != 1 || len(topo.Groups[0].GPUs) != gpus {
			return false, fmt.Errorf("topology annotation %s is not one NVLink group of %d GPUs", n.Annotations[gpunode.TopologyAnnotation], gpus)
		}
		return true, nil
	})
}

// TestAgentMIGLabelsFollowReload runs the agent on a simulated node whose
// H100s are in MIG mode and switches the MIG strategy from mixed to none
// by a config reload: the per-profile MIG labels must leave the Node.
func TestAgentMIGLabelsFollowReload(t *testing.T) {
	ctx := t.Context()
	const node = "agent-mig-node"
	if _, err := env.Client.CoreV1().Nodes().Create(ctx, framework.UnmanagedGPUNode(node).Obj(), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Client.CoreV1().Nodes().Delete(context.Background(), node, metav1.DeleteOptions{}) })
	dir := t.TempDir()
	profile := filepath.Join(dir, "node.yaml")
	const twoMIGGPUs = `version: v1
name: mig-node
gpus:
  - model: H100-SXM5-80GB
    count: 2
    migEnabled: true
    migDevices: ["3g.40gb", "3g.40gb"]
topology:
  pairs:
    - gpus: [0, 1]
      nvlink: 18
`
	cfgPath := filepath.Join(dir, "config.yaml")
	for path, text := range map[string]string{profile: twoMIGGPUs, cfgPath: "version: v1\nflags:\n  migStrategy: mixed\n"} {
		if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	p := startAgentProcess(t, "--simulate", profile, "--node-name", node, "--kubeconfig", env.ControlPlane.Kubeconfig(),
		"--config", cfgPath, "--kubelet-dir", filepath.Join(dir, "kubelet"), "--cdi-dir", "", "--metrics-addr", "",
		"--labels-interval", "0")
	migKeys := []string{"nvidia.com/mig-3g.40gb.count", "nvidia.com/mig-3g.40gb.memory", "nvidia.com/mig-3g.40gb.multiprocessors"}
	t.Run("mixed", func(t *testing.T) {
		waitNodeLabels(t, node, map[string]string{"nvidia.com/mig.strategy": "mixed", "nvidia.com/mig-3g.40gb.count": "4", "nvidia.com/mig.capable": "true"}, migKeys, nil, 2)
	})
	t.Run("reload to none", func(t *testing.T) {
		if err := os.WriteFile(cfgPath, []byte("version: v1\nflags:\n  migStrategy: none\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := p.cmd.Process.Signal(syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
		waitNodeLabels(t, node, map[string]string{"nvidia.com/mig.strategy": "none", "nvidia.com/gpu.count": "2"}, nil, migKeys, 2)
	})
	if err := p.stop(); err != nil {
		t.Errorf("agent exit after SIGTERM: %v, want exit 0", err)
	}
}

// TestAgentConfigFollowsNodeLabel runs the agent with a directory of named
// configs, as the chart mounts its ConfigMap: the Node's
// nvidia.com/device-plugin.config label picks one, and relabelling the
// Node switches the agent to another without a restart or a signal.
func TestAgentConfigFollowsNodeLabel(t *testing.T) {
	ctx := t.Context()
	const node = "agent-config-label-node"
	obj := framework.UnmanagedGPUNode(node).Label("nvidia.com/device-plugin.config", "mig-mixed").Obj()
	if _, err := env.Client.CoreV1().Nodes().Create(ctx, obj, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Client.CoreV1().Nodes().Delete(context.Background(), node, metav1.DeleteOptions{}) })
	dir := t.TempDir()
	profile := filepath.Join(dir, "node.yaml")
	configs := filepath.Join(dir, "configs")
	if err := os.Mkdir(configs, 0o755); err != nil {
		t.Fatal(err)
	}
	for path, text := range map[string]string{
		profile: `version: v1
name: mig-node
gpus:
  - model: H100-SXM5-80GB
    count: 2
    migEnabled: true
    migDevices: ["3g.40gb", "3g.40gb"]
topology:
  pairs:
    - gpus: [0, 1]
      nvlink: 18
`,
		filepath.Join(configs, "default"):   "version: v1\nflags:\n  migStrategy: none\n",
		filepath.Join(configs, "mig-mixed"): "version: v1\nflags:\n  migStrategy: mixed\n",
	} {
		if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	p := startAgentProcess(t, "--simulate", profile, "--node-name", node, "--kubeconfig", env.ControlPlane.Kubeconfig(),
		"--config-dir", configs, "--kubelet-dir", filepath.Join(dir, "kubelet"), "--cdi-dir", "", "--metrics-addr", "",
		"--labels-interval", "0")
	migKeys := []string{"nvidia.com/mig-3g.40gb.count"}
	t.Run("labelled mig-mixed", func(t *testing.T) {
		waitNodeLabels(t, node, map[string]string{"nvidia.com/mig.strategy": "mixed", "nvidia.com/mig-3g.40gb.count": "4"}, migKeys, nil, 2)
	})
	t.Run("label removed: the default", func(t *testing.T) {
		patch := []byte(`{"metadata":{"labels":{"nvidia.com/device-plugin.config":null}}}`)
		if _, err := env.Client.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
		waitNodeLabels(t, node, map[string]string{"nvidia.com/mig.strategy": "none", "nvidia.com/gpu.count": "2"}, nil, migKeys, 2)
	})
	if err := p.stop(); err != nil {
		t.Errorf("agent exit after SIGTERM: %v, want exit 0", err)
	}
}
