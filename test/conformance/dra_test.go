package conformance

import (
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	cdiapi "tags.cncf.io/container-device-interface/pkg/cdi"

	apidra "github.com/gpuplane/gpuplane/api/dra"
	"github.com/gpuplane/gpuplane/internal/cdi"
)

// wholeGPU keeps the published whole GPUs.
func wholeGPU(d resourceapi.Device) bool {
	a := d.Attributes[apidra.AttrType]
	return a.StringValue != nil && *a.StringValue == apidra.TypeGPU
}

// namedDevice keeps the published device of that name.
func namedDevice(name string) func(resourceapi.Device) bool {
	return func(d resourceapi.Device) bool { return d.Name == name }
}

// deviceUUID is the uuid attribute the driver published for a device.
func deviceUUID(t testing.TB, n *draNode, device string) string {
	t.Helper()
	items, err := n.slices(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range items {
		for _, d := range s.Spec.Devices {
			if d.Name == device {
				if u := d.Attributes[apidra.AttrUUID].StringValue; u != nil {
					return *u
				}
			}
		}
	}
	t.Fatalf("device %s has no published uuid", device)
	return ""
}

// TestDRARegistration: the kubelet's plugin manager finds the driver by
// its registration socket and hands it to the DRA manager; a pod whose
// claim names the driver cannot be prepared before that, and the driver
// is dropped when its socket goes away.
func TestDRARegistration(t *testing.T) {
	client := apiServer(t)
	installClasses(t, client)
	ns := namespace(t, client)
	n := newDRANode(t, client, "dgxh100")
	k := startDRAKubelet(n)

	pod := claimPod(ns, "early", n.name, "gpu")
	allocatedClaim(t, client, ns, "gpu", n.name, "gpu-0", n.name, "", pod)
	_, err := k.admit(pod)
	if err == nil || !strings.Contains(err.Error(), "DRA driver "+apidra.DriverName+" is not registered") {
		t.Fatalf("prepare before the driver registered: %v, want the kubelet's not-registered error", err)
	}

	n.startDriver()
	took := k.waitRegistered(10 * time.Second)
	t.Logf("registered %v after the driver served its sockets", took)
	if _, err := os.Stat(n.registryDir + "/" + apidra.DriverName + "-reg.sock"); err != nil {
		t.Errorf("the driver's registration socket: %v", err)
	}
	if _, err := k.admit(pod); err != nil {
		t.Fatalf("prepare once the driver registered: %v", err)
	}
	if err := k.remove(pod); err != nil {
		t.Fatal(err)
	}

	n.stopDriver()
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, err := k.plugins.GetPlugin(apidra.DriverName)
		if err != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the kubelet still has the driver 10s after its registration socket went away")
		}
		time.Sleep(10 * time.Millisecond) // polling interval
	}
}

// TestDRAPrepare: a pod with a claim allocated from the driver's
// ResourceSlice is prepared; the container gets exactly the CDI devices
// the driver wrote, which resolve in the driver's CDI spec to the
// allocated GPU; a claim shared by two pods is prepared once and
// unprepared when the last of them is removed.
func TestDRAPrepare(t *testing.T) {
	client := apiServer(t)
	installClasses(t, client)
	ns := namespace(t, client)
	n := newDRANode(t, client, "dgxh100")
	k := startDRAKubelet(n)
	d := n.startDriver()
	k.waitRegistered(10 * time.Second)
	pool, device := n.publishedDevice(wholeGPU)

	first, second := claimPod(ns, "first", n.name, "shared"), claimPod(ns, "second", n.name, "shared")
	claim := allocatedClaim(t, client, ns, "shared", pool, device, n.name, "", first, second)
	got, err := k.admit(first)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{cdi.ClaimDeviceID(string(claim.UID), device)}
	t.Run("the container gets the driver's CDI devices", func(t *testing.T) {
		if len(got) != 1 || !slices.Equal(got[0], want) {
			t.Fatalf("the kubelet hands the container %v, want %v", got, want)
		}
		if p := d.Prepared(); !slices.Equal(p, []string{string(claim.UID)}) {
			t.Errorf("the driver has prepared %v, want the claim %s", p, claim.UID)
		}
	})
	t.Run("the CDI devices resolve in the driver's spec", func(t *testing.T) {
		cache, err := cdiapi.NewCache(cdiapi.WithSpecDirs(n.cdiDir), cdiapi.WithAutoRefresh(false))
		if err != nil {
			t.Fatal(err)
		}
		for _, id := range got[0] {
			dev := cache.GetDevice(id)
			if dev == nil {
				t.Fatalf("CDI device %s is not in the driver's specs (%v)", id, cache.ListDevices())
			}
			env := dev.GetSpec().ContainerEdits.Env
			if u := deviceUUID(t, n, device); !slices.Contains(env, "NVIDIA_VISIBLE_DEVICES="+u) {
				t.Errorf("the spec of %s sets %v, want NVIDIA_VISIBLE_DEVICES=%s (the allocated %s)", id, env, u, device)
			}
		}
	})
	t.Run("a shared claim is unprepared with its last pod", func(t *testing.T) {
		again, err := k.admit(second)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(again[0], want) {
			t.Errorf("the second pod gets %v, want %v", again[0], want)
		}
		if err := k.remove(first); err != nil {
			t.Fatal(err)
		}
		if p := d.Prepared(); len(p) != 1 {
			t.Errorf("after the first pod the driver has %v prepared, want the claim still", p)
		}
		if err := k.remove(second); err != nil {
			t.Fatal(err)
		}
		if p := d.Prepared(); len(p) != 0 {
			t.Errorf("after the last pod the driver still has %v prepared", p)
		}
		if _, err := os.Stat(cdi.ClaimSpecPath(n.cdiDir, string(claim.UID))); !os.IsNotExist(err) {
			t.Errorf("the claim's CDI spec is still there: %v", err)
		}
		if k.mgr.PodMightNeedToUnprepareResources(second.UID) {
			t.Error("the kubelet still records the pod's claim")
		}
	})
}

// TestDRADriverRestart: the driver restarts between prepare and unprepare.
// The kubelet's unprepare, while the driver is away, fails and keeps the
// claim in the kubelet's checkpoint; once the driver is back (from its own
// checkpoint) the unprepare succeeds and undoes the prepare. With the
// kubelet restarted as well, its DRA manager reads the claim's CDI devices
// back from its checkpoint.
func TestDRADriverRestart(t *testing.T) {
	client := apiServer(t)
	installClasses(t, client)
	ns := namespace(t, client)

	t.Run("unprepare waits for the driver", func(t *testing.T) {
		n := newDRANode(t, client, "dgxh100")
		k := startDRAKubelet(n)
		n.startDriver()
		k.waitRegistered(10 * time.Second)
		pool, device := n.publishedDevice(wholeGPU)
		pod := claimPod(ns, "waits", n.name, "waits")
		claim := allocatedClaim(t, client, ns, "waits", pool, device, n.name, "", pod)
		if _, err := k.admit(pod); err != nil {
			t.Fatal(err)
		}
		n.stopDriver()
		if err := k.remove(pod); err == nil {
			t.Fatal("unprepare succeeded with the driver stopped")
		} else {
			t.Logf("unprepare with the driver stopped: %v", err)
		}
		if !k.mgr.PodMightNeedToUnprepareResources(pod.UID) {
			t.Fatal("a failed unprepare dropped the claim from the kubelet's record")
		}
		d := n.startDriver()
		if p := d.Prepared(); !slices.Equal(p, []string{string(claim.UID)}) {
			t.Fatalf("the restarted driver has %v prepared, want %s from its checkpoint", p, claim.UID)
		}
		k.waitRegistered(10 * time.Second)
		waitUnprepared(t, k, pod)
		if p := d.Prepared(); len(p) != 0 {
			t.Errorf("the driver still has %v prepared", p)
		}
		if _, err := os.Stat(cdi.ClaimSpecPath(n.cdiDir, string(claim.UID))); !os.IsNotExist(err) {
			t.Errorf("the claim's CDI spec is still there: %v", err)
		}
	})

	t.Run("the kubelet's checkpoint", func(t *testing.T) {
		n := newDRANode(t, client, "dgxh100")
		k := startDRAKubelet(n)
		n.startDriver()
		k.waitRegistered(10 * time.Second)
		pool, device := n.publishedDevice(wholeGPU)
		pod := claimPod(ns, "checkpoint", n.name, "checkpoint")
		claim := allocatedClaim(t, client, ns, "checkpoint", pool, device, n.name, "", pod)
		before, err := k.admit(pod)
		if err != nil {
			t.Fatal(err)
		}
		n.stopDriver()
		k.shutdown()

		d := n.startDriver()
		k = startDRAKubelet(n, pod)
		after, err := k.containerDevices(pod)
		if err != nil {
			t.Fatalf("the restarted kubelet does not know the pod's claim: %v", err)
		}
		if !slices.Equal(after[0], before[0]) {
			t.Errorf("after the restarts the container gets %v, before %v", after[0], before[0])
		}
		k.waitRegistered(10 * time.Second)
		if err := k.remove(pod); err != nil {
			t.Fatal(err)
		}
		if p := d.Prepared(); len(p) != 0 {
			t.Errorf("the driver still has %v prepared", p)
		}
		if _, err := os.Stat(cdi.ClaimSpecPath(n.cdiDir, string(claim.UID))); !os.IsNotExist(err) {
			t.Errorf("the claim's CDI spec is still there: %v", err)
		}
	})
}

// waitUnprepared retries unprepare, as the kubelet's pod worker does,
// until it succeeds.
func waitUnprepared(t testing.TB, k *draKubelet, pod *corev1.Pod) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		err := k.remove(pod)
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("unprepare still fails 15s after the driver came back: %v", err)
		}
		time.Sleep(20 * time.Millisecond) // polling interval
	}
}

// TestDRAPrepareRefused: a claim the driver or the kubelet refuses fails
// the pod's prepare with the reason, prepares nothing, and leaves nothing
// for the pod's removal to undo.
func TestDRAPrepareRefused(t *testing.T) {
	client := apiServer(t)
	installClasses(t, client)
	ns := namespace(t, client)
	n := newDRANode(t, client, "dgxh100")
	k := startDRAKubelet(n)
	d := n.startDriver()
	k.waitRegistered(10 * time.Second)
	pool, device := n.publishedDevice(wholeGPU)

	badConfig := `{"apiVersion":"gpu.gpuplane.io/v1alpha1","kind":"GpuConfig","sharing":{"strategy":"TimeSlicing"},"sharingMode":"exclusive"}`
	_, configErr := apidra.DecodeConfig([]byte(badConfig))
	if configErr == nil {
		t.Fatal("the bad config decodes")
	}
	mpsOnMIG := `{"apiVersion":"gpu.gpuplane.io/v1alpha1","kind":"MigDeviceConfig"}`
	tests := []struct {
		name   string
		device string
		config string
		// reserved says whether the claim is reserved for the pod.
		reserved bool
		want     []string
	}{
		{
			name: "opaque config with an unknown field", device: device, config: badConfig, reserved: true,
			want: []string{"NodePrepareResources failed for ResourceClaim", configErr.Error()},
		},
		{
			name: "config of the wrong kind for the device", device: device, config: mpsOnMIG, reserved: true,
			want: []string{"NodePrepareResources failed for ResourceClaim", "is a whole GPU: its config must be kind GpuConfig, not MigDeviceConfig"},
		},
		{
			name: "a device the node does not have", device: "gpu-99", reserved: true,
			want: []string{"NodePrepareResources failed for ResourceClaim", "device gpu-99 is not one of this node's"},
		},
		{
			name: "a claim not reserved for the pod", device: device,
			want: []string{"is not allowed to use ResourceClaim"},
		},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			name := "refused-" + string(rune('a'+i))
			pod := claimPod(ns, name, n.name, name)
			var reserved []*corev1.Pod
			if tt.reserved {
				reserved = append(reserved, pod)
			}
			claim := allocatedClaim(t, client, ns, name, pool, tt.device, n.name, tt.config, reserved...)
			_, err := k.admit(pod)
			if err == nil {
				t.Fatal("prepared")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("prepare failed with %q, want it to say %q", err, w)
				}
			}
			if p := d.Prepared(); len(p) != 0 {
				t.Errorf("the driver has %v prepared", p)
			}
			if _, err := os.Stat(cdi.ClaimSpecPath(n.cdiDir, string(claim.UID))); !os.IsNotExist(err) {
				t.Errorf("a CDI spec was written for the refused claim: %v", err)
			}
			if err := k.remove(pod); err != nil {
				t.Errorf("removing the pod: %v", err)
			}
			if k.mgr.PodMightNeedToUnprepareResources(pod.UID) {
				t.Error("the kubelet still records the refused pod's claim")
			}
		})
	}
}
