package nodesim_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpuplane/gpuplane/api/gpupod"
	"github.com/gpuplane/gpuplane/test/integration/framework"
)

// boundWithChoice is a pod bound to node as gpuplane-scheduler binds it:
// the node name and the GPUs it chose (gpupod.GPUsAnnotation).
func boundWithChoice(ns, name, node, resource string, count int, choice string) *corev1.Pod {
	return framework.Pod(ns, name).NodeName(node).Limit(corev1.ResourceName(resource), fmt.Sprint(count)).
		Annotation(gpupod.GPUsAnnotation, choice).Obj()
}

func gpuList(gpus []int) string {
	parts := make([]string, len(gpus))
	for i, g := range gpus {
		parts[i] = fmt.Sprint(g)
	}
	return strings.Join(parts, ",")
}

// waitHeld waits until the agent has recorded on the pod the GPUs it holds.
func waitHeld(t *testing.T, ns, name, want string) {
	t.Helper()
	framework.Eventually(t, 30*time.Second, fmt.Sprintf("pod %s's record %s=%q", name, gpupod.HeldAnnotation, want), func(ctx context.Context) (bool, error) {
		p, err := env.Client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		got := p.Annotations[gpupod.HeldAnnotation]
		return got == want, fmt.Errorf("recorded %q", got)
	})
}

// TestNodeHonoursTheSchedulersChoice: pods bound with the GPUs
// gpuplane-scheduler chose, created back to back, get exactly those GPUs
// from the kubelet's device manager through the agent, where the plugin's
// own preference would have chosen others (packed from GPU 0); shares of a
// time-sliced GPU go to replicas of the GPU chosen. A pod the scheduler
// did not place keeps the plugin's preference, and when it takes a GPU
// another pod's choice names, that pod gets what is left. Every pod ends
// with the node's record of what it holds.
func TestNodeHonoursTheSchedulersChoice(t *testing.T) {
	t.Run("whole GPUs", func(t *testing.T) {
		const nodeName = "sim-h100-steer"
		nodeWithAPI(t, nodeName, "dgxh100", "")
		waitCapacity(t, nodeName, map[string]int64{gpuRes: 8})
		ns := env.CreateNamespace(t)
		want := map[string][]int{"a": {5}, "b": {1, 6}, "c": {3}, "d": {7}}
		for _, name := range []string{"a", "b", "c", "d"} {
			createPod(t, boundWithChoice(ns, name, nodeName, gpuRes, len(want[name]), gpuList(want[name])))
		}
		index, _ := topology(t, nodeName)
		gpusOf := func(name string) []int {
			var got []int
			for _, id := range allocation(t, ns, name).DeviceIDs(gpuRes) {
				got = append(got, index[id].Index)
			}
			slices.Sort(got)
			return got
		}
		for name, gpus := range want {
			if got := gpusOf(name); !slices.Equal(got, gpus) {
				t.Errorf("pod %s got GPUs %v, the scheduler chose %v", name, got, gpus)
			}
			waitHeld(t, ns, name, gpuList(gpus))
		}

		// A pod nobody chose GPUs for takes one of the three left. The next
		// pod's choice names that GPU and one other, so that pod gets the
		// two left, and the node records what each pod holds, not what was
		// chosen.
		createPod(t, framework.Pod(ns, "plain").GPUs(1).NodeName(nodeName).Obj())
		plain := gpusOf("plain")
		left := slices.DeleteFunc([]int{0, 2, 4}, func(g int) bool { return slices.Contains(plain, g) })
		if len(plain) != 1 || len(left) != 2 {
			t.Fatalf("pod plain got GPUs %v, want one of the three left, 0, 2 and 4", plain)
		}
		waitHeld(t, ns, "plain", gpuList(plain))
		choice := []int{plain[0], left[0]}
		slices.Sort(choice)
		createPod(t, boundWithChoice(ns, "late", nodeName, gpuRes, 2, gpuList(choice)))
		if got := gpusOf("late"); !slices.Equal(got, left) {
			t.Fatalf("pod late, which chose %v, got GPUs %v, want the two left, %v", choice, got, left)
		}
		waitHeld(t, ns, "late", gpuList(left))
	})

	t.Run("time-sliced shares", func(t *testing.T) {
		const nodeName = "sim-h100-steer-shared"
		nodeWithAPI(t, nodeName, "dgxh100", "version: v1\nsharing:\n  timeSlicing:\n    renameByDefault: true\n    resources:\n    - name: nvidia.com/gpu\n      replicas: 4\n")
		const shared = gpuRes + ".shared"
		waitCapacity(t, nodeName, map[string]int64{shared: 32})
		ns := env.CreateNamespace(t)
		want := map[string]int{"s0": 6, "s1": 6, "s2": 2, "s3": 7}
		for _, name := range []string{"s0", "s1", "s2", "s3"} {
			createPod(t, boundWithChoice(ns, name, nodeName, shared, 1, fmt.Sprintf("%d:250", want[name])))
		}
		index, _ := topology(t, nodeName)
		for name, g := range want {
			ids := allocation(t, ns, name).DeviceIDs(shared)
			if len(ids) != 1 {
				t.Fatalf("pod %s got %v, want one replica", name, ids)
			}
			uuid, _, _ := strings.Cut(ids[0], "::")
			if got := index[uuid].Index; got != g {
				t.Errorf("pod %s got a replica of GPU %d, the scheduler chose GPU %d", name, got, g)
			}
			waitHeld(t, ns, name, fmt.Sprintf("%d:250", g))
		}
	})

	// On a node time-sliced under nvidia.com/gpu with the packed policy,
	// the plugin's preference would give a pod nobody chose GPUs for a
	// replica of the GPU already in use: the one gpuplane-scheduler gave
	// a pod whole. It gets a replica of another GPU.
	t.Run("another scheduler's pod beside a GPU chosen whole", func(t *testing.T) {
		const nodeName = "sim-h100-steer-exclusive"
		nodeWithAPI(t, nodeName, "dgxh100", "version: v1\nsharing:\n  allocationPolicy: packed\n  timeSlicing:\n    resources:\n    - name: nvidia.com/gpu\n      replicas: 4\n")
		waitCapacity(t, nodeName, map[string]int64{gpuRes: 32})
		ns := env.CreateNamespace(t)
		createPod(t, boundWithChoice(ns, "exclusive", nodeName, gpuRes, 1, "3"))
		waitHeld(t, ns, "exclusive", "3:250")
		createPod(t, framework.Pod(ns, "plain").GPUs(1).NodeName(nodeName).Obj())
		index, _ := topology(t, nodeName)
		ids := allocation(t, ns, "plain").DeviceIDs(gpuRes)
		if len(ids) != 1 {
			t.Fatalf("pod plain got %v, want one replica", ids)
		}
		uuid, _, _ := strings.Cut(ids[0], "::")
		if g := index[uuid].Index; g == 3 {
			t.Errorf("pod plain got a replica of GPU 3, which gpuplane-scheduler gave pod exclusive whole")
		}
	})
}
