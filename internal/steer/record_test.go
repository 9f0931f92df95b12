package steer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/gpuplane/gpuplane/api/gpupod"
	"github.com/gpuplane/gpuplane/internal/sharing"
)

// kubeletAllocations is a PodResources API answering what it is given.
type kubeletAllocations struct {
	pods []*podresourcesv1.PodResources
	err  error
}

func (k *kubeletAllocations) List(context.Context) (*podresourcesv1.ListPodResourcesResponse, error) {
	return &podresourcesv1.ListPodResourcesResponse{PodResources: k.pods}, k.err
}

// holding is a pod whose one container holds ids of res.
func holding(name string, res *sharing.Resource, ids ...string) *podresourcesv1.PodResources {
	return &podresourcesv1.PodResources{Name: name, Namespace: "ns", Containers: []*podresourcesv1.ContainerResources{{
		Name: "main", Devices: []*podresourcesv1.ContainerDevices{{ResourceName: res.Name, DeviceIds: ids}},
	}}}
}

// idsOf returns the IDs of res's devices that match, in order.
func idsOf(res *sharing.Resource, match func(d *sharing.Device) bool) []string {
	var out []string
	for i := range res.Devices {
		if match(&res.Devices[i]) {
			out = append(out, res.Devices[i].ID)
		}
	}
	return out
}

// recorded runs one round and returns the patches it wrote, pod=value.
func recorded(t *testing.T, r *Recorder, patches *[]string) []string {
	t.Helper()
	*patches = (*patches)[:0]
	if err := r.Round(t.Context()); err != nil {
		t.Fatal(err)
	}
	return *patches
}

func TestRecordWhatTheKubeletGave(t *testing.T) {
	whole := steerNode(t, "version: v1\n")
	replicas := steerNode(t, "version: v1\nsharing:\n  timeSlicing:\n    renameByDefault: true\n    resources:\n    - name: nvidia.com/gpu\n      replicas: 4\n")
	onGPU := func(g int) func(d *sharing.Device) bool {
		return func(d *sharing.Device) bool { return d.GPUIndex == g }
	}
	kubelet := &kubeletAllocations{pods: []*podresourcesv1.PodResources{
		holding("swapped", whole, append(idsOf(whole, onGPU(5)), idsOf(whole, onGPU(2))...)...),
		holding("quarter", replicas, idsOf(replicas, onGPU(3))[:1]...),
		holding("all-replicas", replicas, idsOf(replicas, onGPU(6))...),
		holding("same", whole, idsOf(whole, onGPU(1))...),
		holding("foreign", &sharing.Resource{Name: "example.com/fpga"}, "fpga-0"),
		holding("unknown-id", whole, "GPU-not-here"),
	}}
	pods := []*corev1.Pod{
		placed("swapped", 0, "2,7").Phase(corev1.PodRunning).Obj(),
		placed("quarter", 1, "3:250").Phase(corev1.PodRunning).Obj(),
		placed("all-replicas", 2, "6").Phase(corev1.PodRunning).Obj(),
		placed("same", 3, "1").Phase(corev1.PodRunning).Annotation(gpupod.HeldAnnotation, "1").Obj(),
		placed("foreign", 4, "").Phase(corev1.PodRunning).Obj(),
		placed("unknown-id", 5, "4").Phase(corev1.PodRunning).Obj(),
		placed("pending", 6, "0").Obj(),
	}
	stale := placed("stale", 7, "0").Phase(corev1.PodRunning).Annotation(gpupod.HeldAnnotation, "0").Obj()
	pods = append(pods, stale)
	var patches []string
	fail := map[string]bool{}
	var served *sharing.Served
	r := NewRecorder(kubelet, func() *sharing.Served { return served }, func() []*corev1.Pod { return pods }, func(_ context.Context, ns, name string, uid types.UID, value string) error {
		patches = append(patches, fmt.Sprintf("%s=%s", name, value))
		if fail[name] {
			return errors.New("forbidden")
		}
		return nil
	}, 8, slog.New(slog.DiscardHandler))

	if got := recorded(t, r, &patches); len(got) != 0 {
		t.Fatalf("patched %v before the plugin's resources were known", got)
	}
	served = sharing.NewServed([]*sharing.Resource{whole, replicas})
	got := strings.Join(recorded(t, r, &patches), " ")
	// The record says what the kubelet gave, whatever was chosen; a
	// running pod that holds none of the plugin's devices loses its
	// record; a pod not admitted yet, one whose record is right and ones
	// that hold nothing to record are left alone.
	if want := "swapped=2,5 quarter=3:250 all-replicas=6 stale="; got != want {
		t.Fatalf("patches %q, want %q", got, want)
	}

	// Written records are not written again; a write that failed is not
	// retried with the same value, but is with a new one.
	for _, p := range pods {
		switch p.Name {
		case "swapped":
			p.Annotations[gpupod.HeldAnnotation] = "2,5"
		case "quarter":
			p.Annotations[gpupod.HeldAnnotation] = "3:250"
		case "all-replicas":
			p.Annotations[gpupod.HeldAnnotation] = "6"
		case "foreign", "unknown-id", "stale":
			delete(p.Annotations, gpupod.HeldAnnotation)
		}
	}
	kubelet.pods = append(kubelet.pods, holding("pending", whole, idsOf(whole, onGPU(0))...))
	fail["pending"] = true
	if got := strings.Join(recorded(t, r, &patches), " "); got != "pending=0" {
		t.Fatalf("patches %q, want only the newly admitted pod", got)
	}
	if got := recorded(t, r, &patches); len(got) != 0 {
		t.Fatalf("patches %v: a failed write was retried with the same value", got)
	}
	kubelet.pods[len(kubelet.pods)-1] = holding("pending", whole, idsOf(whole, onGPU(4))...)
	if got := strings.Join(recorded(t, r, &patches), " "); got != "pending=4" {
		t.Fatalf("patches %q, want the new value tried", got)
	}

	kubelet.err = errors.New("socket absent")
	if err := r.Round(t.Context()); err == nil {
		t.Fatal("a PodResources API that does not answer is not an error")
	}
}

func TestHeldPatch(t *testing.T) {
	set, err := HeldPatch("u-1", "0,1")
	if err != nil || string(set) != `{"metadata":{"annotations":{"gpuplane.io/gpus-held":"0,1"},"uid":"u-1"}}` {
		t.Fatalf("set patch %s, %v", set, err)
	}
	del, err := HeldPatch("u-1", "")
	if err != nil || string(del) != `{"metadata":{"annotations":{"gpuplane.io/gpus-held":null},"uid":"u-1"}}` {
		t.Fatalf("remove patch %s, %v", del, err)
	}
}
