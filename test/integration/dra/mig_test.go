package dra_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	apidra "github.com/gpuplane/gpuplane/api/dra"
	"github.com/gpuplane/gpuplane/api/gpunode"
	"github.com/gpuplane/gpuplane/test/integration/framework"
)

// migConfig keeps the profile's layout (GPUs 0 and 1 in MIG mode with no
// static instance, for dynamic MIG claims) or gives GPU 0 or 1 two static
// 3g.40gb instances.
const migConfig = `version: v1
mig-configs:
  dra-dynamic:
    - devices: [0, 1]
      mig-enabled: true
      mig-devices: {}
    - devices: [2, 3, 4]
      mig-enabled: false
  gpu0-3g:
    - devices: [0]
      mig-enabled: true
      mig-devices: {"3g.40gb": 2}
    - devices: [1]
      mig-enabled: true
      mig-devices: {}
    - devices: [2, 3, 4]
      mig-enabled: false
  gpu1-3g:
    - devices: [0]
      mig-enabled: true
      mig-devices: {}
    - devices: [1]
      mig-enabled: true
      mig-devices: {"3g.40gb": 2}
    - devices: [2, 3, 4]
      mig-enabled: false
`

func labelMIG(t *testing.T, node, config string) {
	t.Helper()
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"labels": map[string]string{gpunode.LabelMIGConfig: config}}})
	if _, err := env.Client.CoreV1().Nodes().Patch(t.Context(), node, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
}

// migCondition waits for the MIG state label and condition reason of
// config, written by a pass in the second of since or later, and returns
// the condition.
func migCondition(t *testing.T, node, config, state, reason string, since time.Time) *corev1.NodeCondition {
	t.Helper()
	var cond *corev1.NodeCondition
	framework.Eventually(t, 2*time.Minute, fmt.Sprintf("node %s: config %s %s=%s, reason %s, from %s", node, config, gpunode.LabelMIGConfigState, state, reason, since.Format(time.RFC3339)), func(ctx context.Context) (bool, error) {
		got, c, err := framework.MIGState(ctx, env.Client, node)
		if err != nil {
			return false, err
		}
		cond = c
		if cond == nil || got != state || cond.Reason != reason || cond.LastHeartbeatTime.Time.Before(since.Truncate(time.Second)) ||
			!strings.HasPrefix(cond.Message, "config "+config+":") {
			return false, fmt.Errorf("state %q, condition %+v", got, cond)
		}
		return true, nil
	})
	return cond
}

// nodeEvents are the reasons and messages of the Node's events.
func nodeEvents(t *testing.T, node string) []string {
	t.Helper()
	evs, err := env.Client.CoreV1().Events("").List(t.Context(), metav1.ListOptions{FieldSelector: "involvedObject.kind=Node,involvedObject.name=" + node})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range evs.Items {
		out = append(out, e.Reason+": "+e.Message)
	}
	return out
}

func running(t *testing.T, ns, name string) error {
	t.Helper()
	p, err := env.Client.CoreV1().Pods(ns).Get(t.Context(), name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	if p.Status.Phase != corev1.PodRunning || p.DeletionTimestamp != nil {
		return fmt.Errorf("pod %s/%s is %s (deleting: %v)", ns, name, p.Status.Phase, p.DeletionTimestamp != nil)
	}
	return nil
}

// TestMIGChangeEvictsClaimPods runs the agent's MIG reconciler and DRA
// driver together on one node: a claim's dynamic MIG instance is not
// drift for the reconciler to put back; a label change that re-partitions
// the claim's GPU evicts the claim's pod (through the Eviction API) before
// the GPU changes, leaves a whole-GPU claim on another GPU running, and the
// ResourceSlices afterwards describe the GPU's new devices.
func TestMIGChangeEvictsClaimPods(t *testing.T) {
	const nodeName = "dra-mig"
	ns := env.CreateNamespace(t)
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "mig-parted-config"}, Data: map[string]string{"config.yaml": migConfig}}
	if _, err := env.Client.CoreV1().ConfigMaps(ns).Create(t.Context(), cm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	node(t, nodeName, "--mig-strategy", "mixed", "--mig-config-map", ns+"/mig-parted-config", "--mig-eviction-timeout", "60s")
	start := time.Now()
	labelMIG(t, nodeName, "dra-dynamic")
	migCondition(t, nodeName, "dra-dynamic", gpunode.MIGConfigStateSuccess, gpunode.ReasonMIGApplied, start)

	createTemplate(t, ns, "mig", claimSpec([]request{{name: "gpu", class: "mig-1g.10gb.gpu.gpuplane.io"}}, "", ""))
	createPod(t, onNode(ns, "dyn", nodeName).ClaimTemplate("gpu", "mig").Obj())
	preparedCDI(t, ns, "dyn")
	devs := allocatedDevices(podClaim(t, ns, "dyn"))
	if len(devs) != 1 || !strings.Contains(devs[0], "-mig-1g-10gb-") {
		t.Fatalf("allocated %v, want a dynamic 1g.10gb MIG device", devs)
	}
	gpu := strings.TrimPrefix(strings.SplitN(devs[0], "-mig-", 2)[0], "gpu-")
	createTemplate(t, ns, "a100", claimSpec([]request{{name: "gpu", class: "gpu.gpuplane.io", cel: []string{gpuAttr + `.productName.contains("A100")`}}}, "", ""))
	createPod(t, onNode(ns, "whole", nodeName).ClaimTemplate("gpu", "a100").Obj())
	preparedCDI(t, ns, "whole")

	t.Run("a claim's dynamic instance is not put back", func(t *testing.T) {
		// A ConfigMap edit makes a pass with the label unchanged, as the
		// periodic one does.
		since := time.Now()
		cm.Data["config.yaml"] = migConfig + "# edited\n"
		if _, err := env.Client.CoreV1().ConfigMaps(ns).Update(t.Context(), cm, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		migCondition(t, nodeName, "dra-dynamic", gpunode.MIGConfigStateSuccess, gpunode.ReasonMIGApplied, since)
		if err := running(t, ns, "dyn"); err != nil {
			t.Errorf("the dynamic MIG claim's pod was disturbed: %v", err)
		}
	})

	t.Run("re-partitioning the claim's GPU evicts its pod first", func(t *testing.T) {
		since := time.Now()
		labelMIG(t, nodeName, "gpu"+gpu+"-3g")
		framework.Eventually(t, 2*time.Minute, "pod dyn evicted", func(ctx context.Context) (bool, error) {
			_, err := env.Client.CoreV1().Pods(ns).Get(ctx, "dyn", metav1.GetOptions{})
			return apierrors.IsNotFound(err), err
		})
		migCondition(t, nodeName, "gpu"+gpu+"-3g", gpunode.MIGConfigStateSuccess, gpunode.ReasonMIGApplied, since)
		evs, err := env.Client.CoreV1().Events(ns).List(t.Context(), metav1.ListOptions{FieldSelector: "involvedObject.name=dyn,reason=" + gpunode.EventReasonMIGEviction})
		if err != nil {
			t.Fatal(err)
		}
		if len(evs.Items) == 0 || !strings.Contains(evs.Items[0].Message, "GPUs ["+gpu+"] of node "+nodeName+" are being re-partitioned") {
			t.Errorf("no eviction event naming GPU %s on pod dyn: %+v", gpu, evs.Items)
		}
		// Had the GPU changed under the prepared claim, the agent would
		// have refused to destroy its instance and failed the pass.
		for _, e := range nodeEvents(t, nodeName) {
			if strings.Contains(e, gpunode.ReasonMIGApplyFailed) || strings.Contains(e, gpunode.ReasonMIGRolledBack) {
				t.Errorf("node event %q", e)
			}
		}
		if err := running(t, ns, "whole"); err != nil {
			t.Errorf("the A100 claim's pod was disturbed: %v", err)
		}
	})

	t.Run("the ResourceSlices show the new layout", func(t *testing.T) {
		static := []string{"gpu-" + gpu + "-mig-3g-40gb-0-4", "gpu-" + gpu + "-mig-3g-40gb-4-4"}
		framework.Eventually(t, 60*time.Second, "ResourceSlices with GPU "+gpu+"'s static 3g.40gb devices", func(ctx context.Context) (bool, error) {
			devs, err := sliceDevices(ctx, nodeName)
			if err != nil {
				return false, err
			}
			for name, d := range devs {
				for _, tn := range d.Taints {
					if tn.Key == apidra.TaintMIGChanging {
						return false, fmt.Errorf("%s still tainted %s", name, tn.Key)
					}
				}
			}
			for _, name := range static {
				d, ok := devs[name]
				if !ok {
					return false, fmt.Errorf("no device %s", name)
				}
				if len(d.Taints) > 0 {
					return false, fmt.Errorf("%s tainted %v", name, d.Taints)
				}
			}
			// A 1g.10gb spot overlapping a static instance cannot be
			// created while it exists.
			small := devs["gpu-"+gpu+"-mig-1g-10gb-0-1"]
			if len(small.Taints) != 1 || small.Taints[0].Key != apidra.TaintMIGLayout {
				return false, fmt.Errorf("gpu-%s-mig-1g-10gb-0-1 taints %v, want %s", gpu, small.Taints, apidra.TaintMIGLayout)
			}
			return true, nil
		})
		framework.Eventually(t, 60*time.Second, "nvidia.com/mig-3g.40gb allocatable", func(ctx context.Context) (bool, error) {
			n, err := env.Client.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			q := n.Status.Allocatable["nvidia.com/mig-3g.40gb"]
			return q.Value() == 2, fmt.Errorf("allocatable %s", q.String())
		})
		// A claim for the static layout's profile is prepared on it.
		createTemplate(t, ns, "big", claimSpec([]request{{name: "gpu", class: "mig-3g.40gb.gpu.gpuplane.io",
			cel: []string{gpuAttr + `.parentIndex == ` + gpu}}}, "", ""))
		createPod(t, onNode(ns, "big", nodeName).ClaimTemplate("gpu", "big").Obj())
		preparedCDI(t, ns, "big")
		if got := allocatedDevices(podClaim(t, ns, "big")); len(got) != 1 || (got[0] != static[0] && got[0] != static[1]) {
			t.Errorf("allocated %v, want one of %v", got, static)
		}
	})
}
