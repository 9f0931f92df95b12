package nodesim_test

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpuplane/gpuplane/api/gpunode"
	"github.com/gpuplane/gpuplane/test/integration/framework"
)

// TestMIGRollsBack: the driver of a running agent's GPU 3 refuses to
// create 3g.40gb instances. The label asking for them evicts GPU 3's pod,
// fails to apply, puts GPU 3 back as it was (a whole GPU), says so in the
// state and the condition, and advertises the old devices again; the
// other GPUs' pods are untouched.
func TestMIGRollsBack(t *testing.T) {
	const nodeName = "sim-h100-mig-rollback"
	ns := env.CreateNamespace(t)
	control := framework.FreeLoopbackAddr(t)
	s := migNode(t, nodeName, ns, "--simulate-control-addr", control)
	waitCapacity(t, nodeName, map[string]int64{gpuRes: 8})
	gpus := onePodPerGPU(t, s, nodeName, ns)
	before := listPodResources(t, s)

	framework.SimFault(t, control, "/fail?op=CreateGPUInstance&gpu=3&profile=3g.40gb&message=the+driver+refuses+3g.40gb")
	labelMIG(t, nodeName, "gpu3-3g")
	cond := waitMIGState(t, nodeName, gpunode.MIGConfigStateFailed, gpunode.ReasonMIGRolledBack, 2*time.Minute,
		"GPU 3: the driver refused mig: 2x3g.40gb", "the driver refuses 3g.40gb", "rolled back to whole GPU")
	if cond.Status != corev1.ConditionFalse {
		t.Errorf("condition %+v", cond)
	}
	// The old devices are offered again: 8 whole GPUs, no MIG resource.
	waitCapacity(t, nodeName, map[string]int64{gpuRes: 8})
	n, err := env.Client.CoreV1().Nodes().Get(t.Context(), nodeName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if q, ok := n.Status.Capacity[mig3g]; ok && q.Value() != 0 {
		t.Errorf("%s capacity %s after the roll-back", mig3g, q.String())
	}
	now := listPodResources(t, s)
	for name, g := range gpus {
		if g == 3 {
			if _, listed := now[ns+"/"+name]; listed {
				t.Errorf("GPU 3's pod %s was not evicted before the apply", name)
			}
			continue
		}
		if !sameSet(now[ns+"/"+name][gpuRes], before[ns+"/"+name][gpuRes]) {
			t.Errorf("pod %s on GPU %d: PodResources %v, was %v", name, g, now[ns+"/"+name], before[ns+"/"+name])
		}
	}
	// GPU 3 takes pods again.
	createPod(t, framework.Pod(ns, "after").GPUs(1).NodeName(nodeName).Obj())
	if ids := allocation(t, ns, "after").DeviceIDs(gpuRes); len(ids) != 1 {
		t.Errorf("a pod after the roll-back got %v", ids)
	}
	waitNodeEvent(t, nodeName, "MIGConfig"+gpunode.ReasonMIGRolledBack, "rolled back to whole GPU")
	if !strings.Contains(cond.Message, "gpuplane-agent mig apply --simulate") {
		t.Errorf("condition message %q says nothing of how to check a layout", cond.Message)
	}
}

// migConfigA100 is the A100 (40GB) version of the tests' configs.
const migConfigA100 = `version: v1
mig-configs:
  gpu3-3g:
    - devices: all
      mig-enabled: false
    - devices: [3]
      mig-enabled: true
      mig-devices: {"3g.20gb": 2}
`

// TestMIGReconfigureOneGPUA100 is the re-partition of one GPU on a
// simulated DGX A100: GPU 3's pod alone is evicted, GPU 3 becomes two
// 3g.20gb devices, and the other seven pods keep their GPUs.
func TestMIGReconfigureOneGPUA100(t *testing.T) {
	const nodeName = "sim-a100-mig"
	const mig3g20 = "nvidia.com/mig-3g.20gb"
	ns := env.CreateNamespace(t)
	s := migNodeOf(t, "dgxa100", migConfigA100, nodeName, ns)
	waitCapacity(t, nodeName, map[string]int64{gpuRes: 8})
	gpus := onePodPerGPU(t, s, nodeName, ns)
	before := listPodResources(t, s)

	labelMIG(t, nodeName, "gpu3-3g")
	waitMIGState(t, nodeName, gpunode.MIGConfigStateSuccess, gpunode.ReasonMIGApplied, 90*time.Second)
	waitNodeEvent(t, nodeName, "MIGConfig"+gpunode.ReasonMIGApplied, "GPU 3: whole GPU -> mig: 2x3g.20gb; other GPUs untouched")
	waitCapacity(t, nodeName, map[string]int64{gpuRes: 7, mig3g20: 2})
	now := listPodResources(t, s)
	for name, g := range gpus {
		if g == 3 {
			if _, listed := now[ns+"/"+name]; listed {
				t.Errorf("GPU 3's pod %s is still listed", name)
			}
			continue
		}
		if !sameSet(now[ns+"/"+name][gpuRes], before[ns+"/"+name][gpuRes]) {
			t.Errorf("pod %s on GPU %d: PodResources %v, was %v", name, g, now[ns+"/"+name], before[ns+"/"+name])
		}
	}
	createPod(t, framework.Pod(ns, "mig-user").Limit(mig3g20, "1").NodeName(nodeName).Obj())
	if ids := allocation(t, ns, "mig-user").DeviceIDs(mig3g20); len(ids) != 1 || !strings.HasPrefix(ids[0], "MIG-") {
		t.Errorf("mig-user got %v", ids)
	}
}
