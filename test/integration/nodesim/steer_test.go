package nodesim_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/gpuplane/gpuplane/api/gpupod"
	"github.com/gpuplane/gpuplane/test/integration/framework"
)

// boundWithChoice is a pod bound to node as gpuplane-scheduler binds it:
// the node name and the GPUs it chose (gpupod.GPUsAnnotation).
func boundWithChoice(ns, name, node, resource string, count int, choice string) *corev1.Pod {
	return framework.Pod(ns, name).NodeName(node).Limit(corev1.ResourceName(resource), fmt.Sprint(count)).
		Annotation(gpupod.GPUsAnnotation, choice).Obj()
}

// TestNodeHonoursTheSchedulersChoice: pods bound with the GPUs
// gpuplane-scheduler chose, created back to back, get exactly those GPUs
// from the kubelet's device manager through the agent, where the plugin's
// own preference would have chosen others (packed from GPU 0); shares of a
// time-sliced GPU go to replicas of the GPU chosen. A pod the scheduler
// did not place keeps the plugin's preference.
func TestNodeHonoursTheSchedulersChoice(t *testing.T) {
	t.Run("whole GPUs", func(t *testing.T) {
		const nodeName = "sim-h100-steer"
		nodeWithAPI(t, nodeName, "dgxh100", "")
		waitCapacity(t, nodeName, map[string]int64{gpuRes: 8})
		ns := env.CreateNamespace(t)
		want := map[string][]int{"a": {5}, "b": {1, 6}, "c": {3}, "d": {7}, "e": {0, 2, 4}}
		for _, name := range []string{"a", "b", "c", "d", "e"} {
			gpus := want[name]
			choice := ""
			for i, g := range gpus {
				if i > 0 {
					choice += ","
				}
				choice += fmt.Sprint(g)
			}
			createPod(t, boundWithChoice(ns, name, nodeName, gpuRes, len(gpus), choice))
		}
		index, _ := topology(t, nodeName)
		for name, gpus := range want {
			var got []int
			for _, id := range allocation(t, ns, name).DeviceIDs(gpuRes) {
				got = append(got, index[id].Index)
			}
			slices.Sort(got)
			if !slices.Equal(got, gpus) {
				t.Errorf("pod %s got GPUs %v, the scheduler chose %v", name, got, gpus)
			}
		}
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
		}
	})
}
