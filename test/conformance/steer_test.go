package conformance

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpuplane/gpuplane/api/gpupod"
	"github.com/gpuplane/gpuplane/internal/gpu/sim"
	"github.com/gpuplane/gpuplane/internal/steer"
	"github.com/gpuplane/gpuplane/internal/testutil/build"
)

// boundPods is the pods bound to the node, as the agent's watch shows them.
type boundPods struct {
	mu   sync.Mutex
	pods []*corev1.Pod
	age  int64
}

func (b *boundPods) list() []*corev1.Pod {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.pods)
}

// bind adds a Pending pod, younger than the ones before, carrying the
// scheduler's GPU choice (none when empty), with one container per count
// asking for that many of resource.
func (b *boundPods) bind(name, choice, res string, counts ...int64) *corev1.Pod {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.age++
	pb := build.Pod("default", name).UID("uid-"+name).Created(1_700_000_000+b.age).
		Phase(corev1.PodPending).Containers(corev1.ResourceName(res), counts...)
	if choice != "" {
		pb.Annotation(gpupod.GPUsAnnotation, choice)
	}
	p := pb.Obj()
	b.pods = append(b.pods, p)
	return p
}

// deleting marks a pod as being deleted, as a delete before the kubelet
// admitted it shows in the watch.
func (b *boundPods) deleting(p *corev1.Pod) {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := metav1.Now()
	p.DeletionTimestamp = &now
}

// finish marks a pod as Succeeded, as the watch shows a pod that ran.
func (b *boundPods) finish(p *corev1.Pod) {
	b.mu.Lock()
	defer b.mu.Unlock()
	p.Status.Phase = corev1.PodSucceeded
}

// TestSteeredToTheSchedulersChoice admits pods through the kubelet's device
// manager, one after the other as the kubelet does: each container gets the
// GPUs gpuplane-scheduler recorded for its pod, through identical requests
// back to back, a kubelet restart in between, a pod deleted before
// admission and a pod of two containers. GPU 0 stays free and no pod
// chooses it, so every choice differs from the plugin's own preference,
// which packs from the lowest free GPU, and each is checked with several
// GPUs free: a plugin that does not steer fails each step.
func TestSteeredToTheSchedulersChoice(t *testing.T) {
	const res = "nvidia.com/gpu"
	k := startKubelet(t)
	bound := &boundPods{}
	n, err := runAgent(t, "dgxh100", "version: v1\n", nil, steer.New(bound.list, nil, 8, nil), 0)
	if err != nil {
		t.Fatal(err)
	}
	k.waitCounts(5*time.Second, res, 8, 8)
	devs, err := n.sim.Devices(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	admit := func(p *corev1.Pod, want ...[]int) {
		t.Helper()
		got, err := k.admitPod(p, res)
		if err != nil {
			t.Fatalf("admitting %s: %v", p.Name, err)
		}
		for i := range want {
			if idx := gpuIndexes(t, devs, got[i]); !slices.Equal(idx, want[i]) {
				t.Errorf("pod %s container %d got GPUs %v, the scheduler chose %v", p.Name, i, idx, want[i])
			}
		}
	}
	// Two identical 1-GPU requests, bound and admitted back to back.
	a, b := bound.bind("a", "5", res, 1), bound.bind("b", "2", res, 1)
	admit(a, []int{5})
	admit(b, []int{2})

	// The kubelet restarts between admissions: its checkpoint keeps a and
	// b's GPUs; the next pod still gets its own.
	active := k.activePods()
	k.shutdown()
	k = startKubelet(t)
	k.mu.Lock()
	k.pods = active
	k.mu.Unlock()
	k.waitCounts(5*time.Second, res, 8, 8)
	admit(bound.bind("c", "1,6", res, 2), []int{1, 6})

	// a and b end: six GPUs are free again.
	for _, p := range []*corev1.Pod{a, b} {
		bound.finish(p)
		k.release(p.UID)
	}

	// A pod deleted before admission is never admitted: the next request
	// goes to the next pod's choice, not to the deleted pod's.
	bound.deleting(bound.bind("d", "7", res, 1))
	admit(bound.bind("e", "3", res, 1), []int{3})

	// Two containers, one GPU each: the oldest pod's containers come first
	// though a younger pod asks for exactly one GPU in one container; that
	// one gets its own GPU with three free.
	pair := bound.bind("pair", "2,7", res, 1, 1)
	single := bound.bind("single", "5", res, 1)
	got, err := k.admitPod(pair, res)
	if err != nil {
		t.Fatal(err)
	}
	if idx := gpuIndexes(t, devs, append(got[0], got[1]...)); !slices.Equal(idx, []int{2, 7}) {
		t.Errorf("pod pair got GPUs %v, the scheduler chose 2 and 7", idx)
	}
	admit(single, []int{5})
}

// TestSteeredToTheChosenMIGInstance: a MIG pod gets an instance on the GPU
// the scheduler chose, not the first GPU's, and a pod nobody chose for
// keeps the plugin's preference.
func TestSteeredToTheChosenMIGInstance(t *testing.T) {
	k := startKubelet(t)
	bound := &boundPods{}
	var profile string
	n, err := runAgent(t, "dgxh100", "version: v1\nflags:\n  migStrategy: mixed\n", func(b *sim.Backend) {
		profile = partition(t, b, 0, 1, 7)
		partition(t, b, 1, 1, 7)
	}, steer.New(bound.list, nil, 8, nil), 0)
	if err != nil {
		t.Fatal(err)
	}
	res := "nvidia.com/mig-" + profile
	k.waitCounts(5*time.Second, res, 14, 14)
	devs, err := n.sim.Devices(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	parent := func(id string) int {
		for _, d := range devs {
			for _, m := range d.MIGDevices {
				if m.UUID == id {
					return m.ParentIndex
				}
			}
		}
		t.Fatalf("%s is no MIG device of the node", id)
		return -1
	}
	for i := range 3 {
		p := bound.bind(fmt.Sprint("mig-", i), "1:m1", res, 1)
		got, err := k.admitPod(p, res)
		if err != nil {
			t.Fatal(err)
		}
		if len(got[0]) != 1 || parent(got[0][0]) != 1 {
			t.Errorf("pod %s got %v, want an instance on GPU 1", p.Name, got[0])
		}
	}
	plain := bound.bind("plain", "", res, 1)
	got, err := k.admitPod(plain, res)
	if err != nil {
		t.Fatal(err)
	}
	if len(got[0]) != 1 {
		t.Fatalf("a pod nobody chose for got %v", got[0])
	}
}

// TestSteeredFractionLimits: on a node sharing its GPUs through MPS, a pod
// that asked for part of a GPU gets a replica of the GPU chosen, and the
// kubelet hands its container the MPS limits of that part (which MPS
// enforces) instead of the replica's even share. The share of a plain
// replica is of the memory the GPU can give: its total less the driver's
// reservation.
func TestSteeredFractionLimits(t *testing.T) {
	const res = "nvidia.com/gpu"
	k := startKubelet(t)
	bound := &boundPods{}
	n, err := runAgent(t, "dgxh100", "version: v1\nsharing:\n  mps:\n    resources:\n    - name: nvidia.com/gpu\n      replicas: 4\n", nil, steer.New(bound.list, nil, 8, nil), 0)
	if err != nil {
		t.Fatal(err)
	}
	k.waitCounts(5*time.Second, res, 32, 32)
	devs, err := n.sim.Devices(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	half := bound.bind("half", "3:500", res, 1)
	half.Annotations[gpupod.FractionAnnotation] = "0.5"
	half.Annotations[gpupod.MemoryAnnotation] = "20Gi"
	plain := bound.bind("plain", "5:250", res, 1)
	for _, tc := range []struct {
		pod                 *corev1.Pod
		gpu                 int
		threads, pinned, fr string
	}{
		{half, 3, "50", "0=20480M", "0.5"},
		{plain, 5, "25", fmt.Sprintf("0=%dM", (devs[5].MemoryMiB-devs[5].ReservedMiB)/4), ""},
	} {
		got, err := k.admitPod(tc.pod, res)
		if err != nil {
			t.Fatal(err)
		}
		if idx := gpuIndexes(t, devs, got[0]); !slices.Equal(idx, []int{tc.gpu}) {
			t.Errorf("pod %s got GPUs %v, the scheduler chose %d", tc.pod.Name, idx, tc.gpu)
		}
		opts, err := k.mgr.GetDeviceRunContainerOptions(t.Context(), tc.pod, &tc.pod.Spec.Containers[0])
		if err != nil {
			t.Fatal(err)
		}
		a := &allocation{opts: opts}
		if a.env("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE") != tc.threads || a.env("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT") != tc.pinned || a.env("GPUPLANE_GPU_FRACTION") != tc.fr {
			t.Errorf("pod %s's container env %v, want %s%% of the threads, %s pinned, fraction %q", tc.pod.Name, opts.Envs, tc.threads, tc.pinned, tc.fr)
		}
	}
}
