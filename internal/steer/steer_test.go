package steer

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	configv1 "github.com/gpuplane/gpuplane/api/config/v1"
	"github.com/gpuplane/gpuplane/api/gpupod"
	"github.com/gpuplane/gpuplane/internal/deviceplugin"
	"github.com/gpuplane/gpuplane/internal/gpu"
	"github.com/gpuplane/gpuplane/internal/sharing"
	"github.com/gpuplane/gpuplane/internal/testutil/build"
)

// steerNode is eight GPUs with the resources config makes of them.
func steerNode(t testing.TB, config string) *sharing.Resource {
	t.Helper()
	var gpus []gpu.Device
	for i := range 8 {
		gpus = append(gpus, gpu.Device{Index: i, Minor: i, UUID: fmt.Sprintf("GPU-%d", i), Name: "NVIDIA H100 80GB HBM3", MemoryMiB: 81559})
	}
	cfg, err := configv1.Load(strings.NewReader(config), configv1.Options{})
	if err != nil {
		t.Fatal(err)
	}
	rs, err := sharing.Build(cfg, gpus)
	if err != nil || len(rs) != 1 {
		t.Fatalf("resources %v, %v", rs, err)
	}
	return rs[0]
}

// placed is a pod bound to the node with the scheduler's choice, created
// age seconds after the first; its containers are not known (Containers
// sets them).
func placed(name string, age int, choice string) *build.PodBuilder {
	return build.Pod("ns", name).UID(name).Created(1_000_000+int64(age)).
		Annotation(gpupod.GPUsAnnotation, choice).Phase(corev1.PodPending).Containers("")
}

// kubelet plays the kubelet's device manager: the IDs not in use, a
// preferred allocation, and the devices then taken.
type kubelet struct {
	t      *testing.T
	res    *sharing.Resource
	s      *Steerer
	inUse  map[string]bool
	steers int
}

func (k *kubelet) admit(size int) []string {
	k.t.Helper()
	var free []string
	for _, d := range k.res.Devices {
		if !k.inUse[d.ID] {
			free = append(free, d.ID)
		}
	}
	ids, ok := k.s.Steer(k.res, free, nil, size)
	if !ok {
		return nil
	}
	k.steers++
	for _, id := range ids {
		if k.inUse[id] || !slices.Contains(free, id) {
			k.t.Fatalf("steered to %s, which is not free", id)
		}
		k.inUse[id] = true
	}
	return ids
}

func gpusOf(res *sharing.Resource, ids []string) []int {
	var out []int
	for _, id := range ids {
		d, _ := res.Device(id)
		out = append(out, d.GPUIndex)
	}
	slices.Sort(out)
	return out
}

func TestSteerWholeGPUs(t *testing.T) {
	res := steerNode(t, "version: v1\n")
	pods := []*corev1.Pod{placed("a", 0, "5").Obj(), placed("b", 1, "2,7").Obj(), placed("c", 2, "0").Obj()}
	running := placed("done", -5, "1").Phase(corev1.PodRunning).Obj()
	deleting := placed("gone", -4, "3").Obj()
	deleting.DeletionTimestamp = &metav1.Time{Time: time.Now()}
	s := testSteerer(func() []*corev1.Pod { return append([]*corev1.Pod{running, deleting}, pods...) })
	k := &kubelet{t: t, res: res, s: s, inUse: map[string]bool{}}

	// The 2-GPU pod is admitted first: the only pod asking for two.
	if got := gpusOf(res, k.admit(2)); !slices.Equal(got, []int{2, 7}) {
		t.Fatalf("2-GPU pod got GPUs %v, want the scheduler's 2 and 7", got)
	}
	// Then the 1-GPU pods, oldest first; running and deleted pods never
	// take a request.
	if got := gpusOf(res, k.admit(1)); !slices.Equal(got, []int{5}) {
		t.Fatalf("first 1-GPU pod got %v, want 5", got)
	}
	if got := gpusOf(res, k.admit(1)); !slices.Equal(got, []int{0}) {
		t.Fatalf("second 1-GPU pod got %v, want 0", got)
	}
	// A pod the scheduler did not place: the resource's preference.
	if ids := k.admit(1); ids != nil {
		t.Fatalf("steered %v for a pod nobody chose GPUs for", ids)
	}
}

func TestSteerContainerByContainer(t *testing.T) {
	res := steerNode(t, "version: v1\n")
	// The kubelet allocates container by container: the oldest pod's two
	// 1-GPU containers come first, though what is left of its choice is
	// two GPUs and a younger pod's is exactly one.
	pods := []*corev1.Pod{
		placed("pair", 0, "1,4").Containers("nvidia.com/gpu", 1, 1).Obj(),
		placed("big", 1, "2,3").Containers("nvidia.com/gpu", 2).Obj(),
		placed("cpu", 2, "6").Containers("cpu-only.example.com/thing", 1).Obj(),
		placed("one", 3, "0").Containers("nvidia.com/gpu", 1).Obj(),
	}
	s := testSteerer(func() []*corev1.Pod { return pods })
	k := &kubelet{t: t, res: res, s: s, inUse: map[string]bool{}}
	for i, want := range [][]int{{1}, {4}, {2, 3}, {0}} {
		if got := gpusOf(res, k.admit(len(want))); !slices.Equal(got, want) {
			t.Fatalf("container %d got GPUs %v, want %v", i, got, want)
		}
	}
	// The pod that asks for no GPU of this resource is never steered to.
	if ids := k.admit(1); ids != nil {
		t.Fatalf("steered %v to a pod that does not ask for nvidia.com/gpu", ids)
	}
}

func TestSteerAfterAFailedAdmission(t *testing.T) {
	res := steerNode(t, "version: v1\n")
	s := testSteerer(func() []*corev1.Pod { return []*corev1.Pod{placed("a", 0, "6").Obj()} })
	k := &kubelet{t: t, res: res, s: s, inUse: map[string]bool{}}
	first := k.admit(1)
	// The kubelet restarted before the allocation took: GPU 6 is free
	// again and the pod is admitted anew; it gets GPU 6 again.
	k.inUse = map[string]bool{}
	if again := k.admit(1); !slices.Equal(again, first) || !slices.Equal(gpusOf(res, again), []int{6}) {
		t.Fatalf("re-admitted pod got %v, want %v (GPU 6)", again, first)
	}
	// Allocated now: a second request finds no pod waiting.
	if ids := k.admit(1); ids != nil {
		t.Fatalf("steered %v though the only pod holds its GPU", ids)
	}
}

func TestSteerChosenGPUTaken(t *testing.T) {
	res := steerNode(t, "version: v1\n")
	s := testSteerer(func() []*corev1.Pod { return []*corev1.Pod{placed("a", 0, "4").Obj()} })
	k := &kubelet{t: t, res: res, s: s, inUse: map[string]bool{}}
	d, _ := res.Device("GPU-4")
	k.inUse[d.ID] = true // another scheduler's pod took GPU 4
	if ids := k.admit(1); ids != nil {
		t.Fatalf("steered %v: the chosen GPU is taken, the resource's preference should decide", ids)
	}
}

func TestSteerTimeSlicedShares(t *testing.T) {
	res := steerNode(t, "version: v1\nsharing:\n  timeSlicing:\n    resources:\n    - name: nvidia.com/gpu\n      replicas: 4\n")
	pods := []*corev1.Pod{placed("a", 0, "3:250").Obj(), placed("b", 1, "3:250").Obj(), placed("c", 2, "6:250").Obj()}
	s := testSteerer(func() []*corev1.Pod { return pods })
	k := &kubelet{t: t, res: res, s: s, inUse: map[string]bool{}}
	for i, want := range []int{3, 3, 6} {
		if got := gpusOf(res, k.admit(1)); !slices.Equal(got, []int{want}) {
			t.Fatalf("shared pod %d got a replica of GPU %v, want GPU %d", i, got, want)
		}
	}
}

// TestSteerSeveralReplicasOfOneGPU: a pod asking nvidia.com/gpu: 2 on GPUs
// time-sliced 4 ways under that name, which gpuplane-scheduler placed as
// two replicas of GPU 3 ("3:500"), gets two replicas of GPU 3; one asking
// three of GPU 5 ("5:750") three of GPU 5.
func TestSteerSeveralReplicasOfOneGPU(t *testing.T) {
	res := steerNode(t, "version: v1\nsharing:\n  timeSlicing:\n    resources:\n    - name: nvidia.com/gpu\n      replicas: 4\n")
	pods := []*corev1.Pod{
		placed("a", 0, "3:500").Containers("nvidia.com/gpu", 2).Obj(),
		placed("b", 1, "5:750").Containers("nvidia.com/gpu", 3).Obj(),
		placed("c", 2, "3:500").Containers("nvidia.com/gpu", 2).Obj(),
	}
	s := testSteerer(func() []*corev1.Pod { return pods })
	k := &kubelet{t: t, res: res, s: s, inUse: map[string]bool{}}
	for i, tc := range []struct {
		size int
		want []int
	}{{2, []int{3, 3}}, {3, []int{5, 5, 5}}, {2, []int{3, 3}}} {
		if got := gpusOf(res, k.admit(tc.size)); !slices.Equal(got, tc.want) {
			t.Fatalf("pod %d got replicas of GPUs %v, want %v", i, got, tc.want)
		}
	}
}

func TestSteerIgnoresBadChoices(t *testing.T) {
	res := steerNode(t, "version: v1\n")
	s := testSteerer(func() []*corev1.Pod {
		return []*corev1.Pod{placed("bad", 0, "99").Obj(), placed("twice", 1, "1,1").Obj(), placed("good", 2, "3").Obj()}
	})
	k := &kubelet{t: t, res: res, s: s, inUse: map[string]bool{}}
	if got := gpusOf(res, k.admit(1)); !slices.Equal(got, []int{3}) {
		t.Fatalf("got %v, want the good pod's GPU 3", got)
	}
}

func testSteerer(pods func() []*corev1.Pod) *Steerer {
	return New(pods, nil, 8, slog.New(slog.DiscardHandler))
}

// TestSteerBeforeTheWatchShowsThePod: the kubelet admits a pod the watch
// has not shown yet; a fresh list has it.
func TestSteerBeforeTheWatchShowsThePod(t *testing.T) {
	res := steerNode(t, "version: v1\n")
	s := testSteerer(func() []*corev1.Pod { return nil })
	lists := 0
	s.fresh = func() ([]*corev1.Pod, error) { lists++; return []*corev1.Pod{placed("new", 0, "6").Obj()}, nil }
	k := &kubelet{t: t, res: res, s: s, inUse: map[string]bool{}}
	if got := gpusOf(res, k.admit(1)); !slices.Equal(got, []int{6}) || lists != 1 {
		t.Fatalf("got GPUs %v after %d lists, want GPU 6 after one", got, lists)
	}
	// The next pod the watch has not shown either is found at once.
	s.fresh = func() ([]*corev1.Pod, error) { lists++; return []*corev1.Pod{placed("newer", 1, "2").Obj()}, nil }
	if got := gpusOf(res, k.admit(1)); !slices.Equal(got, []int{2}) || lists != 2 {
		t.Fatalf("got GPUs %v after %d lists, want GPU 2 after two", got, lists)
	}
	// Pods nobody chose GPUs for (another scheduler's) do not cost every
	// admission a list: after one that finds nothing, none for a second.
	s.fresh = func() ([]*corev1.Pod, error) { lists++; return nil, nil }
	for range 5 {
		k.admit(1)
	}
	if lists != 3 {
		t.Fatalf("%d lists after 5 admissions of pods nobody chose for, want 3", lists)
	}
}

// On a time-sliced node whose replicas keep the name nvidia.com/gpu, the
// scheduler may record whole GPUs for pods that ask for replicas: each
// pod gets as many replicas as it asks for, spread over the GPUs chosen,
// and a pod whose containers are served takes no more.
func TestSteerReplicasOfWholeChoices(t *testing.T) {
	res := steerNode(t, "version: v1\nsharing:\n  timeSlicing:\n    resources:\n    - name: nvidia.com/gpu\n      replicas: 4\n")
	pods := []*corev1.Pod{
		placed("a", 0, "2").Containers("nvidia.com/gpu", 1).Obj(),
		placed("b", 1, "3").Containers("nvidia.com/gpu", 1).Obj(),
		placed("c", 2, "6,7").Containers("nvidia.com/gpu", 2).Obj(),
		placed("d", 3, "5").Containers("nvidia.com/gpu", 4).Obj(),
	}
	s := testSteerer(func() []*corev1.Pod { return pods })
	k := &kubelet{t: t, res: res, s: s, inUse: map[string]bool{}}
	for i, tc := range []struct {
		size int
		want []int
	}{{1, []int{2}}, {1, []int{3}}, {2, []int{6, 7}}, {4, []int{5, 5, 5, 5}}} {
		if got := gpusOf(res, k.admit(tc.size)); !slices.Equal(got, tc.want) {
			t.Fatalf("pod %d got replicas of GPUs %v, want %v", i, got, tc.want)
		}
	}
	if ids := k.admit(1); ids != nil {
		t.Fatalf("steered %v though every pod has what it asked for", ids)
	}
}

func TestSteerPassesTheFractionsLimits(t *testing.T) {
	res := steerNode(t, "version: v1\nsharing:\n  timeSlicing:\n    resources:\n    - name: nvidia.com/gpu\n      replicas: 4\n")
	half := placed("half", 0, "2:500").Containers("nvidia.com/gpu", 1).
		Annotation(gpupod.FractionAnnotation, "0.5").Annotation(gpupod.MemoryAnnotation, "30Gi").Obj()
	hami := placed("hami", 1, "3:250").Containers("nvidia.com/gpu", 1).Limit(gpupod.HAMiMemory, "20000").Obj()
	plain := placed("plain", 2, "4").Containers("nvidia.com/gpu", 1).Obj()
	s := testSteerer(func() []*corev1.Pod { return []*corev1.Pod{half, hami, plain} })
	k := &kubelet{t: t, res: res, s: s, inUse: map[string]bool{}}
	for _, want := range []struct {
		milli, mem int64
		ok         bool
	}{{500, 30 << 10, true}, {0, 20000, true}, {0, 0, false}} {
		ids := k.admit(1)
		milli, mem, ok := s.Limits(res, ids)
		if milli != want.milli || mem != want.mem || ok != want.ok {
			t.Fatalf("limits for %v: %d milli, %d MiB, %v; want %+v", ids, milli, mem, ok, want)
		}
	}
	if _, _, ok := s.Limits(res, []string{"GPU-7::0"}); ok {
		t.Fatal("limits for a device nobody was steered to")
	}
}

// What the scheduler's choices leave no room on: a whole GPU chosen for a
// running or a waiting pod, and a time-sliced GPU whose chosen shares
// leave less than a replica. Deleted and finished pods, MIG choices and a
// share that leaves a replica's room do not count.
func TestAvoidWhatTheChoicesFill(t *testing.T) {
	whole := placed("whole", 0, "2").Phase(corev1.PodRunning).Obj()
	finished := placed("finished", 1, "4").Phase(corev1.PodSucceeded).Obj()
	deleting := placed("deleting", 2, "7").Obj()
	deleting.DeletionTimestamp = &metav1.Time{Time: time.Now()}
	pods := []*corev1.Pod{whole, finished, deleting, placed("half-a", 3, "5:500").Obj(), placed("half-b", 4, "5:500").Obj(),
		placed("most", 5, "6:750").Obj(), placed("some", 6, "1:500").Obj(), placed("mig", 7, "3:m3").Obj()}
	s := testSteerer(func() []*corev1.Pod { return pods })
	for _, tc := range []struct {
		config string
		want   []int
	}{
		{"version: v1\n", []int{1, 2, 5, 6}},
		{"version: v1\nsharing:\n  timeSlicing:\n    resources:\n    - name: nvidia.com/gpu\n      replicas: 4\n", []int{2, 5}},
	} {
		avoid := s.Avoid(steerNode(t, tc.config))
		got := slices.Sorted(maps.Keys(avoid))
		if !slices.Equal(got, tc.want) {
			t.Errorf("config %q: avoided GPUs %v, want %v", tc.config, got, tc.want)
		}
	}
}

// A pod another scheduler placed on a node time-sliced four ways: the
// resource's packed preference would give it a replica of the GPU that
// gpuplane-scheduler gave a pod whole (the GPU already in use); it gets
// another GPU. When only that GPU's replicas are left, it gets one of them:
// the kubelet allocates whatever the preference says.
func TestPreferenceLeavesTheChosenGPUs(t *testing.T) {
	res := steerNode(t, "version: v1\nsharing:\n  allocationPolicy: packed\n  timeSlicing:\n    resources:\n    - name: nvidia.com/gpu\n      replicas: 4\n")
	exclusive := placed("exclusive", 0, "0").Containers("nvidia.com/gpu", 1).Phase(corev1.PodRunning).Obj()
	srv, err := deviceplugin.NewServer(deviceplugin.ServerOptions{Resource: res, Dir: t.TempDir(),
		Steer: testSteerer(func() []*corev1.Pod { return []*corev1.Pod{exclusive} })})
	if err != nil {
		t.Fatal(err)
	}
	prefer := func(available []string) []string {
		t.Helper()
		resp, err := srv.GetPreferredAllocation(context.Background(), &pluginapi.PreferredAllocationRequest{ContainerRequests: []*pluginapi.ContainerPreferredAllocationRequest{{
			AvailableDeviceIDs: available, AllocationSize: 1}}})
		if err != nil {
			t.Fatal(err)
		}
		return resp.ContainerResponses[0].DeviceIDs
	}
	// The exclusive pod holds GPU-0::0; everything else is free.
	var free []string
	for _, d := range res.Devices {
		if d.ID != "GPU-0::0" {
			free = append(free, d.ID)
		}
	}
	if got := gpusOf(res, prefer(free)); slices.Contains(got, 0) {
		t.Errorf("another scheduler's pod got a replica of GPU %v, the one chosen whole for a gpuplane pod", got)
	}
	if got := gpusOf(res, prefer([]string{"GPU-0::1", "GPU-0::2"})); !slices.Equal(got, []int{0}) {
		t.Errorf("with only GPU 0's replicas free, got GPU %v, want 0", got)
	}
}
