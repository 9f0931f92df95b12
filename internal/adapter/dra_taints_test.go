package adapter

import (
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"

	"github.com/gpuplane/gpuplane/api/dra"
)

// taintDevices taints the named devices of a slice.
func taintDevices(s *resourceapi.ResourceSlice, taint resourceapi.DeviceTaint, devices ...string) *resourceapi.ResourceSlice {
	for i := range s.Spec.Devices {
		for _, d := range devices {
			if s.Spec.Devices[i].Name == d {
				s.Spec.Devices[i].Taints = append(s.Spec.Devices[i].Taints, taint)
			}
		}
	}
	return s
}

func TestDRADeviceTaints(t *testing.T) {
	unhealthy := resourceapi.DeviceTaint{Key: dra.TaintUnhealthy, Value: "xid-79", Effect: resourceapi.DeviceTaintEffectNoSchedule}
	held := resourceapi.DeviceTaint{Key: dra.TaintDevicePlugin, Effect: resourceapi.DeviceTaintEffectNoExecute}
	tests := []struct {
		name string
		// taints of node a's two GPUs and node b's two GPUs.
		a, b        []resourceapi.DeviceTaint
		count       int64
		tolerations []resourceapi.DeviceToleration
		// want is the "node devices" the claim gets, "" when it waits.
		want string
	}{
		{name: "untainted devices of another node", a: []resourceapi.DeviceTaint{unhealthy, held}, b: []resourceapi.DeviceTaint{unhealthy, {}},
			count: 1, want: "b b/gpu-1"},
		{name: "no node has enough untainted devices", a: []resourceapi.DeviceTaint{unhealthy, {}}, b: []resourceapi.DeviceTaint{{}, held},
			count: 2},
		{name: "a toleration of the key with Exists", a: []resourceapi.DeviceTaint{unhealthy, unhealthy}, b: []resourceapi.DeviceTaint{held, held},
			count: 2, tolerations: []resourceapi.DeviceToleration{{Key: dra.TaintUnhealthy, Operator: resourceapi.DeviceTolerationOpExists}}, want: "a a/gpu-0,a/gpu-1"},
		{name: "a toleration of another value", a: []resourceapi.DeviceTaint{unhealthy, unhealthy}, b: []resourceapi.DeviceTaint{held, held},
			count: 1, tolerations: []resourceapi.DeviceToleration{{Key: dra.TaintUnhealthy, Operator: resourceapi.DeviceTolerationOpEqual, Value: "lost"}}},
		{name: "a toleration of another effect", a: []resourceapi.DeviceTaint{held, held}, b: []resourceapi.DeviceTaint{held, held},
			count: 1, tolerations: []resourceapi.DeviceToleration{{Operator: resourceapi.DeviceTolerationOpExists, Effect: resourceapi.DeviceTaintEffectNoSchedule}}},
		{name: "effect None does not prevent allocation", a: []resourceapi.DeviceTaint{{Key: "note", Effect: resourceapi.DeviceTaintEffectNone}, unhealthy},
			b: []resourceapi.DeviceTaint{held, held}, count: 1, want: "a a/gpu-0"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newLoopFixture(t, Config{}, draNode("a"), draNode("b"))
			for node, taints := range map[string][]resourceapi.DeviceTaint{"a": tc.a, "b": tc.b} {
				s := gpuSlice(node, 2, "H100")
				for i, tn := range taints {
					if tn.Key != "" {
						taintDevices(s, tn, s.Spec.Devices[i].Name)
					}
				}
				f.cache.upsertSlice(s)
			}
			f.cache.upsertClass(gpuClass("gpu.gpuplane.io"))
			cl := gpuClaim("c", "gpu.gpuplane.io", tc.count)
			cl.Spec.Devices.Requests[0].Exactly.Tolerations = tc.tolerations
			f.cache.upsertClaim(cl)
			f.cache.upsertPod(claimPod("p", "c"))
			f.cycle()
			log := f.api.claimLog()
			if tc.want == "" {
				if len(log) != 0 || len(f.api.binds) != 0 {
					t.Fatalf("wrote %v, bound %v; want the pod to wait: no node has enough devices its claim tolerates", log, f.api.binds)
				}
				if got := f.status.conditions["ns/p"]; got == "" {
					t.Errorf("the waiting pod says nothing")
				}
				return
			}
			if len(log) != 1 || !strings.HasSuffix(log[0], " "+tc.want) {
				t.Fatalf("claim writes %v, want the claim allocated %q", log, tc.want)
			}
		})
	}
}

func TestDRATaintedDeviceLeavesTheSet(t *testing.T) {
	// A device tainted after the slice was first seen leaves the claim's
	// device set: the core picks the node that still has a free one.
	f := newDRAFixture(t, map[string]int{"a": 1, "b": 1})
	f.cache.upsertSlice(taintDevices(gpuSlice("a", 1, "H100"), resourceapi.DeviceTaint{Key: dra.TaintUnhealthy, Value: "lost", Effect: resourceapi.DeviceTaintEffectNoExecute}, "gpu-0"))
	f.cache.upsertClaim(gpuClaim("c", "gpu.gpuplane.io", 1))
	f.cache.upsertPod(claimPod("p", "c"))
	f.cycle()
	log := f.api.claimLog()
	if len(log) != 1 || !strings.HasSuffix(log[0], " b b/gpu-0") {
		t.Fatalf("claim writes %v, want the claim on b's untainted GPU in the first cycle", log)
	}
}
