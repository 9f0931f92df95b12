package conformance

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	apidra "github.com/gpuplane/gpuplane/api/dra"
	"github.com/gpuplane/gpuplane/internal/cdi"
	"github.com/gpuplane/gpuplane/internal/nodesim"
)

// TestDRANodeSimulatorAgrees runs the same claims through the kubelet's
// DRA manager on one node and through the node simulator (which plays the
// kubelet in `gpuplane dev up` and the integration tier) on another, each
// with its own driver, and wants the same answers: the driver's CDI
// devices for a prepared claim, and the kubelet's message, word for word,
// for a refused one.
func TestDRANodeSimulatorAgrees(t *testing.T) {
	client := apiServer(t)
	installClasses(t, client)

	a := newDRANode(t, client, "dgxh100")
	k := startDRAKubelet(a)
	a.startDriver()
	k.waitRegistered(10 * time.Second)

	b := newDRANode(t, client, "dgxh100")
	s := startNodeSim(t, client, b)
	b.startDriver()
	deadline := time.Now().Add(10 * time.Second)
	for !slices.Contains(s.DRADrivers(), apidra.DriverName) {
		if time.Now().After(deadline) {
			t.Fatal("the node simulator did not register the driver within 10s")
		}
		time.Sleep(10 * time.Millisecond) // polling interval
	}
	poolA, deviceA := a.publishedDevice(wholeGPU)
	poolB, deviceB := b.publishedDevice(namedDevice(deviceA))

	badConfig := `{"apiVersion":"gpu.gpuplane.io/v1alpha1","kind":"GpuConfig","sharingMode":"exclusive"}`
	tests := []struct {
		name     string
		config   string
		reserved bool
	}{
		{name: "prepared", reserved: true},
		{name: "refused by the driver", config: badConfig, reserved: true},
		{name: "not reserved for the pod"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			nsA, nsB := namespace(t, client), namespace(t, client)
			serviceAccount(t, client, nsB)

			pod := claimPod(nsA, "p", a.name, "gpu")
			var reserved []*corev1.Pod
			if tt.reserved {
				reserved = append(reserved, pod)
			}
			claimA := allocatedClaim(t, client, nsA, "gpu", poolA, deviceA, a.name, tt.config, reserved...)
			kubeletDevices, kubeletErr := k.admit(pod)

			simPod := claimPod(nsB, "p", b.name, "gpu")
			simPod.UID = ""
			simPod, err := client.CoreV1().Pods(nsB).Create(t.Context(), simPod, metav1.CreateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			reserved = nil
			if tt.reserved {
				reserved = append(reserved, simPod)
			}
			claimB := allocatedClaim(t, client, nsB, "gpu", poolB, deviceB, b.name, tt.config, reserved...)

			if kubeletErr == nil {
				got := simDevices(t, client, nsB, "p")
				want := kubeletDevices[0]
				for i := range want {
					want[i] = strings.Replace(want[i], string(claimA.UID), string(claimB.UID), 1)
				}
				if !slices.Equal(got["gpu"], want) {
					t.Errorf("the node simulator records %v, the kubelet gives %v (with the claim's UID)", got["gpu"], want)
				}
				if want := []string{cdi.ClaimDeviceID(string(claimB.UID), deviceB)}; !slices.Equal(got["gpu"], want) {
					t.Errorf("the node simulator records %v, the driver wrote %v", got["gpu"], want)
				}
				return
			}
			want := "Failed to prepare dynamic resources: " + kubeletErr.Error()
			for from, to := range map[string]string{string(pod.UID): string(simPod.UID), string(claimA.UID): string(claimB.UID)} {
				want = strings.ReplaceAll(want, from, to)
			}
			waitSimEvent(t, client, nsB, "p", want)
		})
	}
}

// startNodeSim runs the node simulator as node n, its plugin directories
// the ones n's driver serves.
func startNodeSim(t testing.TB, client kubernetes.Interface, n *draNode) *nodesim.Simulator {
	t.Helper()
	dir, err := os.MkdirTemp("", "nodesim-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	s, err := nodesim.Start(t.Context(), nodesim.Config{NodeName: n.name, Dir: dir, Client: client})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Stop(context.Background()); err != nil {
			t.Errorf("stopping the node simulator: %v", err)
		}
	})
	n.registryDir = s.PluginRegistryDir()
	n.pluginDir = filepath.Join(s.PluginsDir(), apidra.DriverName)
	n.stateFile = filepath.Join(n.pluginDir, "checkpoint.json")
	return s
}

// serviceAccount creates the namespace's default ServiceAccount, which
// kube-apiserver's admission wants before it takes pods (no
// kube-controller-manager makes it here).
func serviceAccount(t testing.TB, client kubernetes.Interface, ns string) {
	t.Helper()
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}
	if _, err := client.CoreV1().ServiceAccounts(ns).Create(t.Context(), sa, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// simDevices waits for the node simulator to run the pod and returns the
// CDI devices it recorded for its claims.
func simDevices(t testing.TB, client kubernetes.Interface, ns, name string) map[string][]string {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		p, err := client.CoreV1().Pods(ns).Get(t.Context(), name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if p.Status.Phase == corev1.PodRunning {
			var got map[string][]string
			if err := json.Unmarshal([]byte(p.Annotations[apidra.PodClaimsAnnotation]), &got); err != nil {
				t.Fatalf("the pod runs without a readable %s: %v", apidra.PodClaimsAnnotation, err)
			}
			return got
		}
		if time.Now().After(deadline) {
			t.Fatalf("pod %s/%s is %s after 30s", ns, name, p.Status.Phase)
		}
		time.Sleep(20 * time.Millisecond) // polling interval
	}
}

// waitSimEvent waits for the node simulator to record a
// FailedPrepareDynamicResources event of the pod saying want; it retries
// the pod meanwhile, and says other things while the claim is being
// written.
func waitSimEvent(t testing.TB, client kubernetes.Interface, ns, name, want string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		evs, err := client.CoreV1().Events(ns).List(t.Context(), metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var seen []string
		for _, e := range evs.Items {
			if e.InvolvedObject.Name != name || e.Reason != "FailedPrepareDynamicResources" {
				continue
			}
			if e.Message == want {
				return
			}
			seen = append(seen, e.Message)
		}
		if time.Now().After(deadline) {
			t.Fatalf("the node simulator never said what the kubelet says:\n\t%s\nit said:\n\t%s", want, strings.Join(seen, "\n\t"))
		}
		time.Sleep(20 * time.Millisecond) // polling interval
	}
}
