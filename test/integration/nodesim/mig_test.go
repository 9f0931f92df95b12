package nodesim_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/gpuplane/gpuplane/api/gpunode"
	climig "github.com/gpuplane/gpuplane/internal/cli/mig"
	"github.com/gpuplane/gpuplane/internal/nodesim"
	"github.com/gpuplane/gpuplane/test/integration/framework"
)

// migConfig is the mig-parted config of the MIG tests' ConfigMap.
const migConfig = `version: v1
mig-configs:
  all-disabled:
    - devices: all
      mig-enabled: false
  gpu3-3g:
    - devices: all
      mig-enabled: false
    - devices: [3]
      mig-enabled: true
      mig-devices: {"3g.40gb": 2}
  gpu3-5-3g:
    - devices: all
      mig-enabled: false
    - devices: [3, 5]
      mig-enabled: true
      mig-devices: {"3g.40gb": 2}
  all-3g:
    - devices: all
      mig-enabled: true
      mig-devices: {"3g.40gb": 2}
  gpu3-too-big:
    - devices: [3]
      mig-enabled: true
      mig-devices: {"3g.40gb": 3}
`

const mig3g = "nvidia.com/mig-3g.40gb"

// migNode starts a simulated DGX H100 whose agent re-partitions GPUs by
// the node's nvidia.com/mig.config label and a ConfigMap in ns.
func migNode(t testing.TB, name, ns string, extra ...string) *nodesim.Simulator {
	t.Helper()
	return migNodeOf(t, "dgxh100", migConfig, name, ns, extra...)
}

// migNodeOf is migNode on another simulated model, with its own config.
func migNodeOf(t testing.TB, profile, config, name, ns string, extra ...string) *nodesim.Simulator {
	t.Helper()
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "mig-parted-config"}, Data: map[string]string{"config.yaml": config}}
	if _, err := env.Client.CoreV1().ConfigMaps(ns).Create(t.Context(), cm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	args := append([]string{"--mig-strategy", "mixed", "--mig-config-map", ns + "/mig-parted-config", "--mig-eviction-timeout", "3s"}, extra...)
	return startNode(t, name, profile, "", env.ControlPlane.Kubeconfig(), args...)
}

func labelMIG(t testing.TB, node, config string) {
	t.Helper()
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"labels": map[string]string{gpunode.LabelMIGConfig: config}}})
	if _, err := env.Client.CoreV1().Nodes().Patch(t.Context(), node, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
}

// waitMIGState waits for the state label and the condition's reason (and
// a message containing msg, when given).
func waitMIGState(t *testing.T, node, state, reason string, timeout time.Duration, msg ...string) *corev1.NodeCondition {
	t.Helper()
	var cond *corev1.NodeCondition
	framework.Eventually(t, timeout, fmt.Sprintf("node %s: %s=%s, reason %s", node, gpunode.LabelMIGConfigState, state, reason), func(ctx context.Context) (bool, error) {
		got, c, err := framework.MIGState(ctx, env.Client, node)
		if err != nil {
			return false, err
		}
		cond = c
		if cond == nil || got != state || cond.Reason != reason {
			return false, fmt.Errorf("state %q, condition %+v", got, cond)
		}
		for _, m := range msg {
			if !strings.Contains(cond.Message, m) {
				return false, fmt.Errorf("condition message %q lacks %q", cond.Message, m)
			}
		}
		return true, nil
	})
	return cond
}

// waitNodeEvent waits for an event on the Node with the reason and a
// message containing msg.
func waitNodeEvent(t *testing.T, node, reason, msg string) {
	t.Helper()
	framework.Eventually(t, 60*time.Second, fmt.Sprintf("a %s event on node %s saying %q", reason, node, msg), func(ctx context.Context) (bool, error) {
		evs, err := env.Client.CoreV1().Events("").List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.kind=Node,involvedObject.name=" + node + ",reason=" + reason})
		if err != nil {
			return false, err
		}
		var seen []string
		for _, e := range evs.Items {
			if strings.Contains(e.Message, msg) {
				return true, nil
			}
			seen = append(seen, e.Message)
		}
		return false, fmt.Errorf("events: %q", seen)
	})
}

// onePodPerGPU runs a one-GPU pod on each of the node's 8 GPUs and returns
// pod name -> GPU index.
func onePodPerGPU(t *testing.T, s *nodesim.Simulator, node, ns string) map[string]int {
	t.Helper()
	for i := range 8 {
		createPod(t, framework.Pod(ns, fmt.Sprintf("p%d", i)).GPUs(1).NodeName(node).Obj())
	}
	index, _ := topology(t, node)
	out := map[string]int{}
	for i := range 8 {
		name := fmt.Sprintf("p%d", i)
		ids := allocation(t, ns, name).DeviceIDs(gpuRes)
		if len(ids) != 1 {
			t.Fatalf("pod %s got %v", name, ids)
		}
		out[name] = index[ids[0]].Index
	}
	return out
}

func podOn(gpus map[string]int, gpu int) string {
	for p, g := range gpus {
		if g == gpu {
			return p
		}
	}
	return ""
}

// TestMIGReconfigureOneGPU changes GPU 3 of a busy DGX H100 through the
// node's label: bad configs fail before anything moves; a good one evicts
// GPU 3's pod alone, re-partitions GPU 3 while the pods on the other seven
// GPUs keep running with the same devices (PodResources), and the new MIG
// resources are allocatable without an agent restart; a PodDisruptionBudget
// that blocks an eviction shows in the state until it allows it.
func TestMIGReconfigureOneGPU(t *testing.T) {
	const nodeName = "sim-h100-mig"
	ns := env.CreateNamespace(t)
	s := migNode(t, nodeName, ns)
	waitCapacity(t, nodeName, map[string]int64{gpuRes: 8})
	gpus := onePodPerGPU(t, s, nodeName, ns)
	before := listPodResources(t, s)

	stillRunning := func(t *testing.T, except ...string) {
		t.Helper()
		now := listPodResources(t, s)
		for name := range gpus {
			skip := false
			for _, e := range except {
				skip = skip || e == name
			}
			if skip {
				continue
			}
			p, err := env.Client.CoreV1().Pods(ns).Get(t.Context(), name, metav1.GetOptions{})
			if err != nil || p.Status.Phase != corev1.PodRunning || p.DeletionTimestamp != nil {
				t.Errorf("pod %s on GPU %d disturbed: %v %v", name, gpus[name], err, p.Status.Phase)
				continue
			}
			if !sameSet(now[ns+"/"+name][gpuRes], before[ns+"/"+name][gpuRes]) {
				t.Errorf("pod %s: PodResources %v, was %v", name, now[ns+"/"+name], before[ns+"/"+name])
			}
		}
	}

	t.Run("bad input fails before anything moves", func(t *testing.T) {
		for _, tc := range []struct{ label, want string }{
			{"gpu3-too-big", `mig-configs.gpu3-too-big[0].mig-devices."3g.40gb": the layout does not fit the GPU: 3 devices asked, the GPU holds at most 2`},
			{"no-such-config", `no config named "no-such-config"`},
		} {
			labelMIG(t, nodeName, tc.label)
			waitMIGState(t, nodeName, gpunode.MIGConfigStateFailed, gpunode.ReasonMIGInvalidConfig, 60*time.Second, tc.want, "the GPUs keep their layout")
			stillRunning(t)
		}
		waitCapacity(t, nodeName, map[string]int64{gpuRes: 8})
	})

	victim := podOn(gpus, 3)
	t.Run("GPU 3 alone is re-partitioned", func(t *testing.T) {
		labelMIG(t, nodeName, "gpu3-3g")
		cond := waitMIGState(t, nodeName, gpunode.MIGConfigStateSuccess, gpunode.ReasonMIGApplied, 90*time.Second)
		if cond.Status != corev1.ConditionTrue {
			t.Errorf("condition %+v", cond)
		}
		// The condition's message may already be a later pass's ("GPUs 0,
		// ..., 7 are in config"); the Node's events keep each step.
		waitNodeEvent(t, nodeName, "MIGConfig"+gpunode.ReasonMIGApplied, "GPU 3: whole GPU -> mig: 2x3g.40gb; other GPUs untouched")
		waitCapacity(t, nodeName, map[string]int64{gpuRes: 7, mig3g: 2})
		framework.Eventually(t, 60*time.Second, "GPU 3's pod "+victim+" evicted", func(ctx context.Context) (bool, error) {
			_, err := env.Client.CoreV1().Pods(ns).Get(ctx, victim, metav1.GetOptions{})
			return apierrors.IsNotFound(err), nil
		})
		stillRunning(t, victim)
		framework.Eventually(t, 30*time.Second, "an event saying why "+victim+" was evicted", func(ctx context.Context) (bool, error) {
			evs, err := env.Client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + victim + ",reason=" + gpunode.EventReasonMIGEviction})
			if err != nil || len(evs.Items) == 0 {
				return false, err
			}
			return strings.Contains(evs.Items[0].Message, "GPUs [3] of node "+nodeName+" are being re-partitioned"), fmt.Errorf("message %q", evs.Items[0].Message)
		})
		createPod(t, framework.Pod(ns, "mig-user").Limit(mig3g, "1").NodeName(nodeName).Obj())
		if ids := allocation(t, ns, "mig-user").DeviceIDs(mig3g); len(ids) != 1 || !strings.HasPrefix(ids[0], "MIG-") {
			t.Errorf("mig-user got %v", ids)
		}
	})

	t.Run("gpuplane mig plan shows GPU 5 and its pod", func(t *testing.T) {
		var res *climig.Result
		// The agent publishes the layout after each pass.
		framework.Eventually(t, 30*time.Second, "a plan from the node's published layout", func(ctx context.Context) (bool, error) {
			var err error
			res, err = climig.Plan(ctx, env.Config, nodeName, "gpu3-5-3g", ns, "mig-parted-config", "config.yaml")
			return err == nil, err
		})
		if len(res.Plan.Changes) != 1 || res.Plan.Changes[0].Index != 5 {
			t.Fatalf("changes %+v, want GPU 5 alone", res.Plan.Changes)
		}
		row := res.GPUs[5]
		if row.From != "whole GPU" || row.To != "mig: 2x3g.40gb" || len(row.Pods) != 1 || row.Pods[0] != ns+"/"+podOn(gpus, 5) {
			t.Errorf("GPU 5 row %+v", row)
		}
		if g3 := res.GPUs[3]; g3.Changes || g3.From != "mig: 2x3g.40gb" {
			t.Errorf("GPU 3 row %+v", g3)
		}
		if _, err := climig.Plan(t.Context(), env.Config, nodeName, "gpu3-too-big", ns, "mig-parted-config", "config.yaml"); err == nil ||
			!strings.Contains(err.Error(), `mig-configs.gpu3-too-big[0].mig-devices."3g.40gb"`) {
			t.Errorf("plan of a config that does not fit: %v", err)
		}
	})

	t.Run("a PodDisruptionBudget blocks and the state says so", func(t *testing.T) {
		blocked := podOn(gpus, 5)
		// The budget protects the pod on GPU 5.
		p, err := env.Client.CoreV1().Pods(ns).Get(t.Context(), blocked, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		p.Labels = map[string]string{"app": "protected"}
		if _, err := env.Client.CoreV1().Pods(ns).Update(t.Context(), p, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		one := intstr.FromInt32(1)
		pdb := &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "protect"},
			Spec: policyv1.PodDisruptionBudgetSpec{MinAvailable: &one, Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "protected"}}}}
		if _, err := env.Client.PolicyV1().PodDisruptionBudgets(ns).Create(t.Context(), pdb, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		framework.Eventually(t, 30*time.Second, "the PDB observed", func(ctx context.Context) (bool, error) {
			got, err := env.Client.PolicyV1().PodDisruptionBudgets(ns).Get(ctx, "protect", metav1.GetOptions{})
			return err == nil && got.Status.ObservedGeneration == got.Generation && got.Status.CurrentHealthy == 1, err
		})
		labelMIG(t, nodeName, "gpu3-5-3g")
		cond := waitMIGState(t, nodeName, gpunode.MIGConfigStateFailed, gpunode.ReasonMIGEvictionBlocked, 90*time.Second)
		if !strings.Contains(cond.Message, ns+"/"+blocked) || !strings.Contains(cond.Message, "disruption budget") {
			t.Errorf("condition message %q does not name the pod and its budget", cond.Message)
		}
		stillRunning(t, victim)
		if err := env.Client.PolicyV1().PodDisruptionBudgets(ns).Delete(t.Context(), "protect", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		waitMIGState(t, nodeName, gpunode.MIGConfigStateSuccess, gpunode.ReasonMIGApplied, 3*time.Minute)
		waitCapacity(t, nodeName, map[string]int64{gpuRes: 6, mig3g: 4})
		stillRunning(t, victim, blocked)
	})
}

// TestMIGResumesAfterAgentKilled kills the agent while it applies a
// layout: the restarted agent starts from what the GPUs have (the
// simulated GPUs keep their MIG state across agent restarts, as real ones
// do) and finishes, touching no other GPU's pods.
func TestMIGResumesAfterAgentKilled(t *testing.T) {
	const nodeName = "sim-h100-mig-restart"
	ns := env.CreateNamespace(t)
	s := migNode(t, nodeName, ns)
	waitCapacity(t, nodeName, map[string]int64{gpuRes: 8})
	gpus := onePodPerGPU(t, s, nodeName, ns)
	before := listPodResources(t, s)
	untouched := func(t *testing.T, except ...string) {
		t.Helper()
		now := listPodResources(t, s)
		for name := range gpus {
			if slices.Contains(except, name) {
				continue
			}
			if !sameSet(now[ns+"/"+name][gpuRes], before[ns+"/"+name][gpuRes]) {
				t.Errorf("pod %s: PodResources %v, was %v", name, now[ns+"/"+name], before[ns+"/"+name])
			}
		}
	}
	// The node simulator restarts a killed agent, as the kubelet does.
	kill := func(t *testing.T) {
		t.Helper()
		pid := s.AgentPid()
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			t.Fatalf("killing the agent (pid %d): %v", pid, err)
		}
	}

	t.Run("killed while the state is pending", func(t *testing.T) {
		labelMIG(t, nodeName, "gpu3-3g")
		phase := ""
		framework.Eventually(t, 60*time.Second, "the state pending", func(ctx context.Context) (bool, error) {
			n, err := env.Client.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			phase = n.Labels[gpunode.LabelMIGConfigState]
			return phase != "", nil
		})
		kill(t)
		t.Logf("agent killed with the state %q", phase)
		waitMIGState(t, nodeName, gpunode.MIGConfigStateSuccess, gpunode.ReasonMIGApplied, 2*time.Minute)
		waitCapacity(t, nodeName, map[string]int64{gpuRes: 7, mig3g: 2})
		untouched(t, podOn(gpus, 3))
	})

	t.Run("killed half way through creating GPU 5's instances", func(t *testing.T) {
		// What a kill between two MIG calls leaves: GPU 5's pod evicted,
		// MIG mode on, one GPU instance without its compute instance.
		victim := podOn(gpus, 5)
		zero := int64(0)
		if err := env.Client.CoreV1().Pods(ns).Delete(t.Context(), victim, metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
			t.Fatal(err)
		}
		framework.Eventually(t, 30*time.Second, "PodResources without "+victim, func(context.Context) (bool, error) {
			_, listed := listPodResources(t, s)[ns+"/"+victim]
			return !listed, nil
		})
		n0, _ := s.AgentRestarts()
		kill(t)
		state := filepath.Join(s.Dir(), "gpu-state.json")
		data, err := os.ReadFile(state)
		if err != nil {
			t.Fatal(err)
		}
		var st struct {
			Version int              `json:"version"`
			GPUs    []map[string]any `json:"gpus"`
		}
		if err := json.Unmarshal(data, &st); err != nil {
			t.Fatal(err)
		}
		for _, g := range st.GPUs {
			if g["index"] == float64(5) {
				g["current"], g["pending"] = true, true
				g["instances"] = []map[string]any{{"profile": "3g.40gb", "start": 4, "size": 4}}
			}
		}
		data, _ = json.Marshal(st)
		if err := os.WriteFile(state, data, 0o600); err != nil {
			t.Fatal(err)
		}
		labelMIG(t, nodeName, "gpu3-5-3g")
		framework.Eventually(t, 60*time.Second, "the agent restarted", func(context.Context) (bool, error) {
			n, _ := s.AgentRestarts()
			return n > n0, nil
		})
		waitMIGState(t, nodeName, gpunode.MIGConfigStateSuccess, gpunode.ReasonMIGApplied, 2*time.Minute)
		// Resumed from what the GPU held: MIG on, no device.
		waitNodeEvent(t, nodeName, "MIGConfig"+gpunode.ReasonMIGApplied, "GPU 5: mig: none -> mig: 2x3g.40gb")
		waitCapacity(t, nodeName, map[string]int64{gpuRes: 6, mig3g: 4})
		untouched(t, podOn(gpus, 3), victim)
	})
}
