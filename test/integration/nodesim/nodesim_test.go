package nodesim_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"
	"k8s.io/utils/ptr"

	"github.com/gpuplane/gpuplane/api/gpupod"
	"github.com/gpuplane/gpuplane/internal/gpu"
	"github.com/gpuplane/gpuplane/internal/gpu/sim"
	"github.com/gpuplane/gpuplane/test/integration/framework"
)

const gpuRes = "nvidia.com/gpu"

// TestWholeGPUs runs pods on a simulated DGX H100 through the real agent.
func TestWholeGPUs(t *testing.T) {
	const nodeName = "sim-h100-whole"
	s := node(t, nodeName, "dgxh100", "")
	waitCapacity(t, nodeName, map[string]int64{gpuRes: 8})
	ns := env.CreateNamespace(t)

	createPod(t, framework.Pod(ns, "one").GPUs(1).NodeName(nodeName).Obj())
	createPod(t, framework.Pod(ns, "four").GPUs(4).NodeName(nodeName).Obj())
	one, four := allocation(t, ns, "one"), allocation(t, ns, "four")

	t.Run("distinct GPUs recorded with their environment", func(t *testing.T) {
		ids1, ids4 := one.DeviceIDs(gpuRes), four.DeviceIDs(gpuRes)
		if len(ids1) != 1 || len(ids4) != 4 {
			t.Fatalf("devices: one=%v four=%v, want 1 and 4", ids1, ids4)
		}
		for _, id := range ids1 {
			if slices.Contains(ids4, id) {
				t.Errorf("GPU %s handed to both pods", id)
			}
		}
		for _, a := range []*gpupod.PodAllocation{one, four} {
			c := a.Containers[0]
			if a.Node != nodeName || c.Name != "main" {
				t.Errorf("allocation %+v, want node %s container main", a, nodeName)
			}
			if len(c.Env["NVIDIA_VISIBLE_DEVICES"]) == 0 && len(c.CDIDevices) == 0 {
				t.Errorf("container got neither NVIDIA_VISIBLE_DEVICES nor CDI devices: %+v", c)
			}
		}
	})

	t.Run("four GPUs all NVLink-connected", func(t *testing.T) {
		index, top := topology(t, nodeName)
		ids := four.DeviceIDs(gpuRes)
		for _, a := range ids {
			if _, ok := index[a]; !ok {
				t.Fatalf("device %s is not a GPU of the simulated node", a)
			}
			for _, b := range ids {
				if a == b {
					continue
				}
				if l, ok := top.Between(index[a].Index, index[b].Index); !ok || l.NVLinks == 0 {
					t.Errorf("GPUs %d and %d are not NVLink-connected (%v)", index[a].Index, index[b].Index, l)
				}
			}
		}
	})

	t.Run("PodResources lists both pods", func(t *testing.T) {
		got := listPodResources(t, s)
		for name, a := range map[string]*gpupod.PodAllocation{"one": one, "four": four} {
			if !sameSet(got[ns+"/"+name][gpuRes], a.DeviceIDs(gpuRes)) {
				t.Errorf("PodResources %s = %v, want %v", name, got[ns+"/"+name], a.DeviceIDs(gpuRes))
			}
		}
	})

	t.Run("a pod asking for more than is free is refused", func(t *testing.T) {
		createPod(t, framework.Pod(ns, "greedy").GPUs(4).NodeName(nodeName).Obj())
		env.WaitPodPhase(t, ns, "greedy", corev1.PodFailed, 30*time.Second)
		p, err := env.Client.CoreV1().Pods(ns).Get(t.Context(), "greedy", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if p.Status.Reason != "OutOf"+gpuRes || !strings.Contains(p.Status.Message, "requested: 4, used: 5, capacity: 8") {
			t.Errorf("status reason %q message %q, want OutOfnvidia.com/gpu with the counts", p.Status.Reason, p.Status.Message)
		}
		framework.Eventually(t, 10*time.Second, "an admission event", func(ctx context.Context) (bool, error) {
			evs, err := env.Client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=greedy"})
			return err == nil && len(evs.Items) > 0 && evs.Items[0].Reason == "OutOf"+gpuRes, err
		})
	})

	t.Run("a pod with a duration completes and frees its GPUs", func(t *testing.T) {
		p := framework.Pod(ns, "short").GPUs(3).NodeName(nodeName).RestartPolicy(corev1.RestartPolicyNever).Obj()
		p.Annotations = map[string]string{gpupod.DurationAnnotation: "1s"}
		createPod(t, p)
		short := allocation(t, ns, "short")
		env.WaitPodPhase(t, ns, "short", corev1.PodSucceeded, 30*time.Second)
		framework.Eventually(t, 10*time.Second, "PodResources without the finished pod", func(context.Context) (bool, error) {
			_, listed := listPodResources(t, s)[ns+"/short"]
			return !listed, nil
		})
		// Its 3 GPUs are free again: a 3-GPU pod fits.
		createPod(t, framework.Pod(ns, "after-short").GPUs(3).NodeName(nodeName).Obj())
		after := allocation(t, ns, "after-short")
		if !sameSet(after.DeviceIDs(gpuRes), short.DeviceIDs(gpuRes)) {
			t.Errorf("after-short got %v, want the freed %v", after.DeviceIDs(gpuRes), short.DeviceIDs(gpuRes))
		}
	})

	t.Run("a failing pod ends Failed", func(t *testing.T) {
		p := framework.Pod(ns, "crash").NodeName(nodeName).RestartPolicy(corev1.RestartPolicyNever).Obj()
		p.Annotations = map[string]string{gpupod.DurationAnnotation: "100ms", gpupod.ExitCodeAnnotation: "3"}
		createPod(t, p)
		env.WaitPodPhase(t, ns, "crash", corev1.PodFailed, 30*time.Second)
		got, err := env.Client.CoreV1().Pods(ns).Get(t.Context(), "crash", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if st := got.Status.ContainerStatuses; len(st) != 1 || st[0].State.Terminated == nil || st[0].State.Terminated.ExitCode != 3 {
			t.Errorf("container statuses %+v, want terminated with exit code 3", st)
		}
	})

	t.Run("deleting a pod frees its GPUs", func(t *testing.T) {
		freed := four.DeviceIDs(gpuRes)
		if err := env.Client.CoreV1().Pods(ns).Delete(t.Context(), "four", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		framework.Eventually(t, 30*time.Second, "pod four gone", func(ctx context.Context) (bool, error) {
			_, err := env.Client.CoreV1().Pods(ns).Get(ctx, "four", metav1.GetOptions{})
			return apierrors.IsNotFound(err), nil
		})
		createPod(t, framework.Pod(ns, "after-four").GPUs(4).NodeName(nodeName).Obj())
		if got := allocation(t, ns, "after-four").DeviceIDs(gpuRes); !sameSet(got, freed) {
			t.Errorf("after-four got %v, want the freed %v", got, freed)
		}
	})

	t.Run("a Job's pods complete and the Job finishes", func(t *testing.T) {
		job := &batchv1.Job{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "train"},
			Spec: batchv1.JobSpec{
				BackoffLimit: ptr.To[int32](0),
				Template: corev1.PodTemplateSpec{
					ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{gpupod.DurationAnnotation: "1s"}},
					Spec: func() corev1.PodSpec {
						spec := framework.Pod(ns, "x").NodeName(nodeName).RestartPolicy(corev1.RestartPolicyNever).Obj().Spec
						return spec
					}(),
				},
			},
		}
		if _, err := env.Client.BatchV1().Jobs(ns).Create(t.Context(), job, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		framework.Eventually(t, 60*time.Second, "Job train complete", func(ctx context.Context) (bool, error) {
			j, err := env.Client.BatchV1().Jobs(ns).Get(ctx, "train", metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			for _, c := range j.Status.Conditions {
				if c.Type == batchv1.JobComplete && c.Status == corev1.ConditionTrue {
					return true, nil
				}
				if c.Type == batchv1.JobFailed && c.Status == corev1.ConditionTrue {
					return false, fmt.Errorf("job failed: %s", c.Message)
				}
			}
			return false, fmt.Errorf("succeeded %d", j.Status.Succeeded)
		})
	})
}

// topology returns the simulated DGX H100's GPUs by UUID, as the agent of
// node sees them, and their links.
func topology(t *testing.T, nodeName string) (map[string]gpu.Device, *gpu.Topology) {
	t.Helper()
	p, err := sim.Load("dgxh100")
	if err != nil {
		t.Fatal(err)
	}
	b, err := sim.New(p, sim.Options{NodeName: nodeName})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = b.Close() }()
	devs, err := b.Devices(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	top, err := b.Topology(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	index := map[string]gpu.Device{}
	for _, d := range devs {
		index[d.UUID] = d
	}
	return index, top
}

// TestSharingAndMIG checks the resources of nodes whose agent shares GPUs.
func TestSharingAndMIG(t *testing.T) {
	const migProfile = `name: dgxh100-mig-mixed
gpus:
  - model: H100-SXM5-80GB
    numaNode: 0
    migEnabled: true
    migDevices: [1g.10gb, 1g.10gb, 1g.10gb, 1g.10gb, 1g.10gb, 1g.10gb, 1g.10gb]
  - model: H100-SXM5-80GB
    numaNode: 0
    migEnabled: true
    migDevices: [3g.40gb, 3g.40gb]
  - model: H100-SXM5-80GB
    count: 6
    numaNodes: [0, 0, 1, 1, 1, 1]
topology:
  nvlink: 18
`
	tests := []struct {
		name, node, profile, config string
		want                        map[string]int64
		// pod asks for one of resource and must get a device of it.
		resource string
	}{
		{
			name: "time-slicing with 4 replicas", node: "sim-h100-ts", profile: "dgxh100",
			config:   "version: v1\nsharing:\n  timeSlicing:\n    resources:\n    - name: nvidia.com/gpu\n      replicas: 4\n",
			want:     map[string]int64{gpuRes: 32},
			resource: gpuRes,
		},
		{
			name: "MIG mixed strategy", node: "sim-h100-mig", profile: migProfile,
			config:   "version: v1\nflags:\n  migStrategy: mixed\n",
			want:     map[string]int64{gpuRes: 6, "nvidia.com/mig-1g.10gb": 7, "nvidia.com/mig-3g.40gb": 2},
			resource: "nvidia.com/mig-1g.10gb",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := node(t, tt.node, tt.profile, tt.config)
			waitCapacity(t, tt.node, tt.want)
			ns := env.CreateNamespace(t)
			for i := range 2 {
				createPod(t, framework.Pod(ns, fmt.Sprintf("p%d", i)).Limit(corev1.ResourceName(tt.resource), "1").NodeName(tt.node).Obj())
			}
			a0, a1 := allocation(t, ns, "p0"), allocation(t, ns, "p1")
			ids0, ids1 := a0.DeviceIDs(tt.resource), a1.DeviceIDs(tt.resource)
			if len(ids0) != 1 || len(ids1) != 1 || ids0[0] == ids1[0] {
				t.Errorf("devices of %s: %v and %v, want one distinct each", tt.resource, ids0, ids1)
			}
			got := listPodResources(t, s)
			if !sameSet(got[ns+"/p0"][tt.resource], ids0) {
				t.Errorf("PodResources p0 = %v, want %v", got[ns+"/p0"], ids0)
			}
		})
	}
}

// TestAgentRestart kills the agent: the simulator starts it again, as the
// kubelet restarts a DaemonSet's container, the plugin registers again,
// and the node keeps the allocations it made before.
func TestAgentRestart(t *testing.T) {
	const nodeName = "sim-h100-restart"
	s := node(t, nodeName, "dgxh100", "")
	waitCapacity(t, nodeName, map[string]int64{gpuRes: 8})
	ns := env.CreateNamespace(t)
	createPod(t, framework.Pod(ns, "before").GPUs(2).NodeName(nodeName).Obj())
	before := allocation(t, ns, "before").DeviceIDs(gpuRes)

	pid := s.AgentPid()
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, 30*time.Second, "the agent restarted", func(context.Context) (bool, error) {
		n, exit := s.AgentRestarts()
		return n == 1 && exit != nil && s.AgentPid() != pid, nil
	})
	waitCapacity(t, nodeName, map[string]int64{gpuRes: 8})

	createPod(t, framework.Pod(ns, "after").GPUs(6).NodeName(nodeName).Obj())
	after := allocation(t, ns, "after").DeviceIDs(gpuRes)
	for _, id := range after {
		if slices.Contains(before, id) {
			t.Errorf("GPU %s of pod before was handed out again after the restart", id)
		}
	}
	if got := listPodResources(t, s)[ns+"/before"][gpuRes]; !sameSet(got, before) {
		t.Errorf("PodResources for pod before = %v, want %v", got, before)
	}
}

// TestInitContainers checks the kubelet's reuse of an init container's
// devices by the containers after it, and the node's allocatable devices
// through PodResources.
func TestInitContainers(t *testing.T) {
	const nodeName = "sim-h100-init"
	s := node(t, nodeName, "dgxh100", "")
	waitCapacity(t, nodeName, map[string]int64{gpuRes: 8})
	ns := env.CreateNamespace(t)

	t.Run("allocatable devices carry their NUMA node", func(t *testing.T) {
		conn, err := grpc.NewClient("unix://"+s.PodResourcesSocket(), grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = conn.Close() }()
		resp, err := podresourcesv1.NewPodResourcesListerClient(conn).GetAllocatableResources(t.Context(), &podresourcesv1.AllocatableResourcesRequest{})
		if err != nil {
			t.Fatal(err)
		}
		numa := map[int64]int{}
		for _, d := range resp.GetDevices() {
			if d.GetResourceName() == gpuRes && len(d.GetTopology().GetNodes()) == 1 {
				numa[d.GetTopology().GetNodes()[0].GetID()]++
			}
		}
		if numa[0] != 4 || numa[1] != 4 {
			t.Errorf("allocatable GPUs per NUMA node %v, want 4 and 4", numa)
		}
	})

	tests := []struct {
		name      string
		init, app []int
		wantTotal int
	}{
		{"app container reuses the init container's GPUs", []int{2}, []int{2}, 2},
		{"two app containers share out a larger init container's GPUs", []int{3}, []int{1, 1}, 2},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			name := fmt.Sprintf("init-%d", i)
			pod := framework.Pod(ns, name).NodeName(nodeName).Obj()
			main := pod.Spec.Containers[0]
			pod.Spec.Containers = nil
			for j, n := range tt.init {
				c := *main.DeepCopy()
				c.Name = fmt.Sprintf("init%d", j)
				c.Resources.Limits = corev1.ResourceList{gpuRes: *resource.NewQuantity(int64(n), resource.DecimalSI)}
				pod.Spec.InitContainers = append(pod.Spec.InitContainers, c)
			}
			for j, n := range tt.app {
				c := *main.DeepCopy()
				c.Name = fmt.Sprintf("app%d", j)
				c.Resources.Limits = corev1.ResourceList{gpuRes: *resource.NewQuantity(int64(n), resource.DecimalSI)}
				pod.Spec.Containers = append(pod.Spec.Containers, c)
			}
			createPod(t, pod)
			a := allocation(t, ns, name)
			initIDs, appIDs := []string{}, []string{}
			for _, c := range a.Containers {
				if c.Init != strings.HasPrefix(c.Name, "init") {
					t.Errorf("container %s recorded with init=%v", c.Name, c.Init)
				}
				if c.Init {
					initIDs = append(initIDs, c.Devices[gpuRes]...)
				} else {
					appIDs = append(appIDs, c.Devices[gpuRes]...)
				}
			}
			for _, id := range appIDs {
				if !slices.Contains(initIDs, id) {
					t.Errorf("app container got %s, not one of the init container's %v", id, initIDs)
				}
			}
			// PodResources lists the app containers only, as the kubelet does.
			if got := listPodResources(t, s)[ns+"/"+name][gpuRes]; len(uniq(got)) != tt.wantTotal || !sameSet(uniq(got), uniq(appIDs)) {
				t.Errorf("PodResources lists %v, want the app containers' %d distinct GPUs %v", got, tt.wantTotal, appIDs)
			}
		})
	}
}

func uniq(ids []string) []string {
	out := slices.Clone(ids)
	slices.Sort(out)
	return slices.Compact(out)
}
