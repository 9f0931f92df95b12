package dev_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/gpuplane/gpuplane/api/gpunode"
	"github.com/gpuplane/gpuplane/api/gpupod"
	"github.com/gpuplane/gpuplane/internal/cli/dev"
	"github.com/gpuplane/gpuplane/internal/localcluster"
	"github.com/gpuplane/gpuplane/test/integration/framework"
)

// gpuplane runs the built CLI with the state directory and returns its
// combined output and exit code.
func gpuplane(t *testing.T, stateDir string, args ...string) (string, int) {
	t.Helper()
	return gpuplaneWithLifeline(t, stateDir, os.Getpid(), args...)
}

// gpuplaneWithLifeline is gpuplane with the cluster tied to process
// lifeline instead of this test binary.
func gpuplaneWithLifeline(t *testing.T, stateDir string, lifeline int, args ...string) (string, int) {
	t.Helper()
	// Not the test's context: cleanups run `dev down` after it ends.
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	args = append(args, "--state-dir", stateDir)
	cmd := exec.CommandContext(ctx, filepath.Join(binDir, "gpuplane"), args...)
	// A cluster must not outlive this test binary, even when it is killed.
	cmd.Env = append(os.Environ(), dev.LifelineEnv+"="+strconv.Itoa(lifeline))
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return out.String(), 0
	case errors.As(err, &exit):
		return out.String(), exit.ExitCode()
	default:
		t.Fatalf("running gpuplane %v: %v\n%s", args, err, out.String())
		return "", -1
	}
}

// cluster starts a dev cluster in a fresh state directory and makes sure
// it is down when the test ends, whatever happened.
func cluster(t *testing.T, upArgs ...string) (stateDir string, client kubernetes.Interface) {
	t.Helper()
	framework.RequireBinaries(t, localcluster.Config{BinDir: cpBinDir, ControllerManager: true, Scheduler: true})
	base, err := os.MkdirTemp("", "dev-")
	if err != nil {
		t.Fatal(err)
	}
	stateDir = filepath.Join(base, "s")
	t.Cleanup(func() {
		if _, err := os.Stat(stateDir); err == nil {
			out, code := gpuplane(t, stateDir, "dev", "down")
			if code != 0 {
				t.Errorf("cleanup: dev down exited %d:\n%s", code, out)
			}
		}
		_ = os.RemoveAll(base)
	})
	args := append([]string{"dev", "up", "--bin-dir", cpBinDir, "--agent-binary", filepath.Join(binDir, "gpuplane-agent")}, upArgs...)
	out, code := gpuplane(t, stateDir, args...)
	if code != 0 {
		t.Fatalf("dev up exited %d:\n%s\nsupervisor log:\n%s", code, out, readFile(filepath.Join(stateDir, "supervisor.log")))
	}
	kubeconfig := filepath.Join(stateDir, "kubeconfig")
	if !strings.Contains(out, "export KUBECONFIG="+kubeconfig) {
		t.Errorf("dev up did not say how to use the cluster:\n%s", out)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	client, err = kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return stateDir, client
}

func readFile(path string) string {
	b, _ := os.ReadFile(path)
	return string(b)
}

// recordedPids returns the supervisor's pid and every pid in state.json.
func recordedPids(t *testing.T, stateDir string) map[string]int {
	t.Helper()
	var st dev.State
	if err := json.Unmarshal([]byte(readFile(filepath.Join(stateDir, "state.json"))), &st); err != nil {
		t.Fatalf("reading state.json: %v", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(readFile(filepath.Join(stateDir, "supervisor.pid"))))
	if err != nil {
		t.Fatalf("reading supervisor.pid: %v", err)
	}
	pids := map[string]int{"supervisor": pid}
	for k, v := range st.Pids {
		pids[k] = v
	}
	return pids
}

// alive reports whether pid runs (zombies do not count).
func alive(pid int) bool {
	if syscall.Kill(pid, 0) != nil {
		return false
	}
	stat := readFile("/proc/" + strconv.Itoa(pid) + "/stat")
	i := strings.LastIndexByte(stat, ')')
	return i >= 0 && i+2 < len(stat) && stat[i+2] != 'Z' && stat[i+2] != 'X'
}

func TestUpStatusDown(t *testing.T) {
	stateDir, client := cluster(t, "--nodes", "1", "--profile", "dgxh100")

	t.Run("the node is Ready with 8 GPUs", func(t *testing.T) {
		n, err := client.CoreV1().Nodes().Get(t.Context(), "gpu-node-1", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if q := n.Status.Allocatable["nvidia.com/gpu"]; !framework.NodeReady(n) || q.Value() != 8 {
			t.Errorf("node Ready=%v nvidia.com/gpu=%s, want Ready with 8", framework.NodeReady(n), q.String())
		}
	})

	t.Run("the agent says on the node that its GPUs are on offer", func(t *testing.T) {
		framework.Eventually(t, 30*time.Second, "the GPUReady condition", func(ctx context.Context) (bool, error) {
			n, err := client.CoreV1().Nodes().Get(ctx, "gpu-node-1", metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			for _, c := range n.Status.Conditions {
				if c.Type == gpunode.ConditionGPUReady {
					if c.Status != corev1.ConditionTrue || c.Reason != gpunode.ReasonAgentReady || !strings.Contains(c.Message, "8 GPUs offered as nvidia.com/gpu") {
						return false, fmt.Errorf("GPUReady=%s %s: %s", c.Status, c.Reason, c.Message)
					}
					return true, nil
				}
			}
			return false, errors.New("no GPUReady condition yet")
		})
	})

	t.Run("kube-scheduler places a GPU pod that then runs", func(t *testing.T) {
		pod := framework.Pod("default", "smoke").GPUs(2).Obj()
		if _, err := client.CoreV1().Pods("default").Create(t.Context(), pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		framework.Eventually(t, 60*time.Second, "pod smoke Running with 2 GPUs", func(ctx context.Context) (bool, error) {
			p, err := client.CoreV1().Pods("default").Get(ctx, "smoke", metav1.GetOptions{})
			if err != nil || p.Status.Phase != corev1.PodRunning {
				return false, err
			}
			a, err := gpupod.ReadAllocation(p)
			return err == nil && a != nil && len(a.DeviceIDs("nvidia.com/gpu")) == 2, err
		})
	})

	t.Run("status reports the node and the components", func(t *testing.T) {
		out, code := gpuplane(t, stateDir, "dev", "status", "-o", "json", "--allocations")
		if code != 0 {
			t.Fatalf("dev status exited %d:\n%s", code, out)
		}
		var st dev.Status
		if err := json.Unmarshal([]byte(out), &st); err != nil {
			t.Fatalf("dev status -o json: %v\n%s", err, out)
		}
		if !st.Running || st.Phase != dev.PhaseReady || !st.APIServerReady || len(st.Nodes) != 1 {
			t.Fatalf("status %+v, want running, ready, one node", st)
		}
		if r := st.Nodes[0].Resources; len(r) != 1 || r[0].Name != "nvidia.com/gpu" || r[0].Capacity != 8 {
			t.Errorf("node resources %+v, want nvidia.com/gpu 8", r)
		}
		for _, c := range st.Components {
			if !c.Running {
				t.Errorf("component %s (pid %d) not running", c.Name, c.Pid)
			}
		}
		if len(st.Allocations) != 1 || st.Allocations[0].Pod != "default/smoke" || len(st.Allocations[0].Devices) != 2 {
			t.Errorf("allocations %+v, want default/smoke with 2 devices", st.Allocations)
		}
	})

	t.Run("a second up refuses and starts nothing", func(t *testing.T) {
		before := recordedPids(t, stateDir)
		out, code := gpuplane(t, stateDir, "dev", "up", "--bin-dir", cpBinDir)
		if code != 1 || !strings.Contains(out, "already running") || !strings.Contains(out, "gpuplane dev down") {
			t.Errorf("second dev up exited %d:\n%s\nwant 1 and a message pointing at dev down", code, out)
		}
		if after := recordedPids(t, stateDir); len(after) != len(before) || after["supervisor"] != before["supervisor"] {
			t.Errorf("pids changed from %v to %v", before, after)
		}
	})

	t.Run("down stops every process and removes the state", func(t *testing.T) {
		pids := recordedPids(t, stateDir)
		if len(pids) < 5 {
			t.Fatalf("recorded pids %v: want supervisor, etcd, kube-apiserver, kube-controller-manager, kube-scheduler, agent", pids)
		}
		out, code := gpuplane(t, stateDir, "dev", "down")
		if code != 0 || !strings.Contains(out, "stopped the dev cluster") {
			t.Fatalf("dev down exited %d:\n%s", code, out)
		}
		for name, pid := range pids {
			if alive(pid) {
				t.Errorf("%s (pid %d) outlived dev down", name, pid)
			}
		}
		if _, err := os.Stat(stateDir); !os.IsNotExist(err) {
			t.Errorf("state directory still there: %v", err)
		}
	})

	t.Run("down again says nothing runs", func(t *testing.T) {
		out, code := gpuplane(t, stateDir, "dev", "down")
		if code != 0 || !strings.Contains(out, "no dev cluster is running") {
			t.Errorf("second dev down exited %d:\n%s", code, out)
		}
	})
}

func TestStaleState(t *testing.T) {
	// A pid that existed and is gone: a crashed supervisor's.
	done := exec.Command("true")
	if err := done.Run(); err != nil {
		t.Fatal(err)
	}
	dead := done.ProcessState.Pid()
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"status", []string{"dev", "status"}, "no dev cluster is running"},
		{"down", []string{"dev", "down"}, "removed the stale state"},
		{"up with no nodes is a usage error", []string{"dev", "up", "--nodes", "0"}, "no nodes"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			stateDir := filepath.Join(t.TempDir(), "s")
			if err := os.MkdirAll(stateDir, 0o750); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(stateDir, "supervisor.pid"), []byte(strconv.Itoa(dead)), 0o600); err != nil {
				t.Fatal(err)
			}
			out, _ := gpuplane(t, stateDir, tt.args...)
			if !strings.Contains(out, tt.want) {
				t.Errorf("gpuplane %v:\n%s\nwant it to say %q", tt.args, out, tt.want)
			}
		})
	}
}

// TestCrashedSupervisor kills the supervisor outright: every process it
// started must die with it, and the next command must notice the stale
// state and clean it.
func TestCrashedSupervisor(t *testing.T) {
	stateDir, _ := cluster(t, "--nodes", "1")
	pids := recordedPids(t, stateDir)
	if err := syscall.Kill(pids["supervisor"], syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, 30*time.Second, "every process of the cluster gone", func(context.Context) (bool, error) {
		for name, pid := range pids {
			if alive(pid) {
				return false, fmt.Errorf("%s (pid %d) still alive", name, pid)
			}
		}
		return true, nil
	})
	for _, tt := range []struct {
		name string
		args []string
		want string
	}{
		{"status", []string{"dev", "status"}, "no dev cluster is running"},
		{"down", []string{"dev", "down"}, "removed the stale state"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			out, code := gpuplane(t, stateDir, tt.args...)
			if code != 0 || !strings.Contains(out, tt.want) {
				t.Errorf("gpuplane %v exited %d:\n%s\nwant it to say %q", tt.args, code, out, tt.want)
			}
		})
	}
}

// TestGPUPlaneScheduler runs gpuplane-scheduler beside kube-scheduler: a pod
// that names it is placed by it and runs on a simulated node.
func TestGPUPlaneScheduler(t *testing.T) {
	stateDir, client := cluster(t, "--nodes", "1", "--scheduler", "gpuplane")
	pods := []struct{ name, scheduler string }{{"by-gpuplane", "gpuplane-scheduler"}, {"by-default", ""}}
	for _, p := range pods {
		t.Run(p.name, func(t *testing.T) {
			b := framework.Pod("default", p.name).GPUs(2)
			if p.scheduler != "" {
				b = b.SchedulerName(p.scheduler)
			}
			if _, err := client.CoreV1().Pods("default").Create(t.Context(), b.Obj(), metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			framework.Eventually(t, 60*time.Second, "pod "+p.name+" Running with 2 GPUs", func(ctx context.Context) (bool, error) {
				got, err := client.CoreV1().Pods("default").Get(ctx, p.name, metav1.GetOptions{})
				if err != nil || got.Status.Phase != corev1.PodRunning {
					return false, err
				}
				a, err := gpupod.ReadAllocation(got)
				return err == nil && a != nil && len(a.DeviceIDs("nvidia.com/gpu")) == 2, err
			})
		})
	}
	if pids := recordedPids(t, stateDir); pids["gpuplane-scheduler"] == 0 || pids["kube-scheduler"] == 0 {
		t.Errorf("recorded pids %v, want gpuplane-scheduler and kube-scheduler", pids)
	}
}

// TestLifeline ties a cluster to a process and ends that process: the
// supervisor must stop the cluster on its own, as it does when a test
// binary that started it is killed.
func TestLifeline(t *testing.T) {
	framework.RequireBinaries(t, localcluster.Config{BinDir: cpBinDir, ControllerManager: true, Scheduler: true})
	holder := exec.Command("sleep", "600")
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = holder.Process.Kill(); _ = holder.Wait() })
	base, err := os.MkdirTemp("", "dev-")
	if err != nil {
		t.Fatal(err)
	}
	stateDir := filepath.Join(base, "s")
	t.Cleanup(func() {
		if _, err := os.Stat(stateDir); err == nil {
			_, _ = gpuplane(t, stateDir, "dev", "down")
		}
		_ = os.RemoveAll(base)
	})
	out, code := gpuplaneWithLifeline(t, stateDir, holder.Process.Pid, "dev", "up", "--nodes", "1", "--bin-dir", cpBinDir,
		"--agent-binary", filepath.Join(binDir, "gpuplane-agent"))
	if code != 0 {
		t.Fatalf("dev up exited %d:\n%s", code, out)
	}
	pids := recordedPids(t, stateDir)
	if err := holder.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = holder.Wait()
	framework.Eventually(t, time.Minute, "the cluster stopped after its lifeline ended", func(context.Context) (bool, error) {
		for name, pid := range pids {
			if alive(pid) {
				return false, fmt.Errorf("%s (pid %d) still alive", name, pid)
			}
		}
		return true, nil
	})
}
