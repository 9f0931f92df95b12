package dra

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	dracel "k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/utils/ptr"

	apidra "github.com/gpuplane/gpuplane/api/dra"
	"github.com/gpuplane/gpuplane/internal/scheduler/model"
)

const h100 = `device.attributes["gpu.gpuplane.io"].productName == "H100"`

func selectors(exprs ...string) []resourceapi.DeviceSelector {
	var out []resourceapi.DeviceSelector
	for _, e := range exprs {
		out = append(out, resourceapi.DeviceSelector{CEL: &resourceapi.CELDeviceSelector{Expression: e}})
	}
	return out
}

// allRequest asks for all the devices its selectors pass.
func allRequest(name string, sel ...string) resourceapi.DeviceRequest {
	return resourceapi.DeviceRequest{Name: name, Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: "gpu.gpuplane.io",
		AllocationMode: resourceapi.DeviceAllocationModeAll, Selectors: selectors(sel...)}}
}

// sub is a subrequest for count devices its selectors pass.
func sub(name string, count int64, sel ...string) resourceapi.DeviceSubRequest {
	return resourceapi.DeviceSubRequest{Name: name, DeviceClassName: "gpu.gpuplane.io", AllocationMode: resourceapi.DeviceAllocationModeExactCount,
		Count: count, Selectors: selectors(sel...)}
}

func evalSpecs(nodes []NodeDevices, reqs ...[]resourceapi.DeviceRequest) *DeviceSet {
	var specs []ClaimSpec
	for _, r := range reqs {
		specs = append(specs, ClaimSpec{Requests: r})
	}
	return EvalDeviceSet(nodes, specs, map[string]*resourceapi.DeviceClass{"gpu.gpuplane.io": gpuClass()}, dracel.NewCache(8, CELFeatures))
}

// migNode is a node whose one GPU is in MIG mode with a 1g device,
// after whole GPUs of the products given.
func migNode(node string, whole ...string) NodeDevices {
	n := gpus(node, whole...)
	name := fmt.Sprintf("gpu-%d-mig-1g", len(whole))
	d := &Device{Pool: node, Name: name, Slices: 1, Profile: "1g.10gb", Dev: &resourceapi.Device{Name: name,
		Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{apidra.AttrType: {StringValue: ptr.To(apidra.TypeMIG)}}}}
	n.Devs = append(n.Devs, &Device{Pool: node, Slices: 7, MIGs: []*Device{d}})
	return n
}

// TestEvalAllSets: a request for all the devices that match makes a set
// of every matching GPU of each node, as the allocator collects them; a
// node where one of them cannot be given is out, and what the core cannot
// place is refused naming the field.
func TestEvalAllSets(t *testing.T) {
	tainted := func(n NodeDevices, g int) NodeDevices {
		n.Devs[g].Dev.Taints = []resourceapi.DeviceTaint{{Key: "k", Effect: resourceapi.DeviceTaintEffectNoSchedule}}
		return n
	}
	capacity := allRequest("gpu")
	capacity.Exactly.Capacity = &resourceapi.CapacityRequirements{Requests: map[resourceapi.QualifiedName]resource.Quantity{apidra.CapacityMemory: resourceQuantity("1Gi")}}
	for _, tt := range []struct {
		name      string
		nodes     []NodeDevices
		reqs      []resourceapi.DeviceRequest
		wantMasks []uint64
		wantCount int
		wantCode  string
		wantErr   string
	}{
		{name: "every matching GPU, the most on a node counted", nodes: []NodeDevices{gpus("a", "H100", "A100", "H100"), gpus("b", "H100")},
			reqs: []resourceapi.DeviceRequest{allRequest("gpu", h100)}, wantMasks: []uint64{0b101, 0b1}, wantCount: 2},
		{name: "a matching GPU tainted against it rules its node out", nodes: []NodeDevices{gpus("a", "H100", "H100"), tainted(gpus("b", "H100", "H100"), 1)},
			reqs: []resourceapi.DeviceRequest{allRequest("gpu", h100)}, wantMasks: []uint64{0b11, 0}, wantCount: 2},
		{name: "a tainted GPU the selectors skip does not", nodes: []NodeDevices{tainted(gpus("a", "H100", "A100"), 1)},
			reqs: []resourceapi.DeviceRequest{allRequest("gpu", h100)}, wantMasks: []uint64{0b1}, wantCount: 1},
		{name: "matching MIG devices rule their node out", nodes: []NodeDevices{gpus("a", "H100"), migNode("b", "H100", "H100")},
			reqs: []resourceapi.DeviceRequest{allRequest("gpu")}, wantMasks: []uint64{0b1, 0}, wantCount: 1},
		{name: "MIG devices the selectors skip do not", nodes: []NodeDevices{migNode("a", "H100", "H100")},
			reqs: []resourceapi.DeviceRequest{allRequest("gpu", `device.attributes["gpu.gpuplane.io"].type == "gpu"`)}, wantMasks: []uint64{0b11}, wantCount: 2},
		{name: "nothing matches anywhere", nodes: []NodeDevices{gpus("a", "A100")}, reqs: []resourceapi.DeviceRequest{allRequest("gpu", h100)},
			wantMasks: []uint64{0}, wantCount: 0},
		{name: "only MIG devices match", nodes: []NodeDevices{migNode("a")}, reqs: []resourceapi.DeviceRequest{allRequest("gpu")},
			wantCode: "UnsupportedClaim", wantErr: `spec.devices.requests[0] ("gpu").exactly.allocationMode: All selects MIG devices`},
		{name: "beside another request", nodes: []NodeDevices{gpus("a", "H100", "A100")},
			reqs:     []resourceapi.DeviceRequest{allRequest("gpu", h100), {Name: "one", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: "gpu.gpuplane.io", Count: 1}}},
			wantCode: "UnsupportedClaim", wantErr: `spec.devices.requests[0] ("gpu").exactly.allocationMode: All beside other requests`},
		{name: "with capacity", nodes: []NodeDevices{gpus("a", "H100")}, reqs: []resourceapi.DeviceRequest{capacity},
			wantCode: "UnsupportedClaim", wantErr: `spec.devices.requests[0] ("gpu").exactly.capacity: allocationMode All with capacity`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s := evalSpecs(tt.nodes, tt.reqs)
			if tt.wantCode != "" {
				if s.ErrCode != tt.wantCode || !strings.Contains(s.Err, tt.wantErr) {
					t.Fatalf("set error %s %q, want %s containing %q", s.ErrCode, s.Err, tt.wantCode, tt.wantErr)
				}
				return
			}
			if s.Err != "" || !s.All || fmt.Sprint(s.Masks) != fmt.Sprint(tt.wantMasks) || s.Count != tt.wantCount {
				t.Fatalf("set %q all %v masks %b count %d, want all, masks %b count %d", s.Err, s.All, s.Masks, s.Count, tt.wantMasks, tt.wantCount)
			}
		})
	}
}

// TestEvalFirstAvailable: requests with subrequests make one alternative
// per combination, in the allocator's order (the first request's choice
// the most significant), each a set of its own naming its picks; a
// subrequest the allocator refuses refuses the claim.
func TestEvalFirstAvailable(t *testing.T) {
	nodes := []NodeDevices{gpus("a", "H100", "A100", "H100")}
	prio := func(name string, subs ...resourceapi.DeviceSubRequest) resourceapi.DeviceRequest {
		return resourceapi.DeviceRequest{Name: name, FirstAvailable: subs}
	}
	t.Run("one request", func(t *testing.T) {
		s := evalSpecs(nodes, []resourceapi.DeviceRequest{prio("gpu", sub("two", 2, h100), sub("any", 1))})
		if s.Err != "" || len(s.FirstOf) != 2 {
			t.Fatalf("set %q with %d alternatives, want 2", s.Err, len(s.FirstOf))
		}
		two, any := s.FirstOf[0], s.FirstOf[1]
		if two.Masks[0] != 0b101 || two.Count != 2 || !slices.Equal(two.Picks, []Pick{{0, "gpu", "two"}}) ||
			any.Masks[0] != 0b111 || any.Count != 1 || !slices.Equal(any.Picks, []Pick{{0, "gpu", "any"}}) {
			t.Fatalf("alternatives %+v and %+v", two, any)
		}
	})
	t.Run("two claims, the first's choice first", func(t *testing.T) {
		s := evalSpecs(nodes, []resourceapi.DeviceRequest{prio("x", sub("x0", 1), sub("x1", 1))}, []resourceapi.DeviceRequest{prio("y", sub("y0", 1), sub("y1", 1))})
		var got []string
		for _, alt := range s.FirstOf {
			got = append(got, fmt.Sprint(alt.Picks))
		}
		want := []string{"[{0 x x0} {1 y y0}]", "[{0 x x0} {1 y y1}]", "[{0 x x1} {1 y y0}]", "[{0 x x1} {1 y y1}]"}
		if s.Err != "" || !slices.Equal(got, want) {
			t.Fatalf("alternatives %v (%q), want %v", got, s.Err, want)
		}
	})
	t.Run("a subrequest for all", func(t *testing.T) {
		all := sub("all", 0, h100)
		all.AllocationMode = resourceapi.DeviceAllocationModeAll
		s := evalSpecs(nodes, []resourceapi.DeviceRequest{prio("gpu", sub("four", 4), all)})
		if s.Err != "" || len(s.FirstOf) != 2 || !s.FirstOf[1].All || s.FirstOf[1].Masks[0] != 0b101 || s.FirstOf[1].Count != 2 {
			t.Fatalf("set %q, alternatives %+v", s.Err, s.FirstOf)
		}
	})
	t.Run("a subrequest of an unknown class", func(t *testing.T) {
		bad := sub("other", 1)
		bad.DeviceClassName = "none"
		s := evalSpecs(nodes, []resourceapi.DeviceRequest{prio("gpu", sub("one", 1), bad)})
		if s.ErrCode != "DeviceClassNotFound" || !strings.Contains(s.Err, `spec.devices.requests[0] ("gpu").firstAvailable[1] ("other").deviceClassName`) {
			t.Fatalf("set error %s %q", s.ErrCode, s.Err)
		}
	})
	t.Run("neither exactly nor firstAvailable", func(t *testing.T) {
		s := evalSpecs(nodes, []resourceapi.DeviceRequest{{Name: "gpu"}})
		if s.ErrCode != "InvalidResourceClaim" || !strings.Contains(s.Err, `spec.devices.requests[0] ("gpu"): neither exactly nor firstAvailable`) {
			t.Fatalf("set error %s %q", s.ErrCode, s.Err)
		}
	})
	t.Run("too many combinations", func(t *testing.T) {
		var subs []resourceapi.DeviceSubRequest
		for k := range 5 {
			subs = append(subs, sub(fmt.Sprint("s", k), 1))
		}
		s := evalSpecs(nodes, []resourceapi.DeviceRequest{prio("x", subs...), prio("y", subs...)})
		if s.ErrCode != "UnsupportedClaim" || !strings.Contains(s.Err, `spec.devices.requests[1] ("y").firstAvailable`) {
			t.Fatalf("set error %s %q", s.ErrCode, s.Err)
		}
	})
}

// modeClaim is a claim named name with the requests given.
func modeClaim(name string, reqs ...resourceapi.DeviceRequest) *resourceapi.ResourceClaim {
	cl := gpuClaim(name, 1)
	cl.Spec.Devices.Requests = reqs
	return cl
}

func requestDevices(w ClaimWrite) []string {
	var out []string
	for _, r := range w.Alloc.Devices.Results {
		out = append(out, r.Request+"="+r.Device)
	}
	return out
}

// TestAllocateAll: the allocator, over the whole node, must give the
// claim exactly the GPUs the core chose; a choice short of every matching
// GPU is refused, and the refusal narrows the set to the node's matching
// GPUs.
func TestAllocateAll(t *testing.T) {
	f := newFixture("a")
	s := f.s
	s.UpsertSlice(nodeSlice("a", 0, 0, 1, 1))
	s.UpsertClass(gpuClass())
	s.UpsertClaim(modeClaim("c", allRequest("gpu", `device.attributes["gpu.gpuplane.io"].numa == 1`)))
	p := claimPod("p", "c")
	now := time.Now()
	pc := f.claims(t, p, now)
	if !pc.Set.All || pc.Set.Masks[0] != 0b1100 || pc.Set.Count != 2 {
		t.Fatalf("set all %v masks %b count %d, want all of GPUs 2 and 3", pc.Set.All, pc.Set.Masks, pc.Set.Count)
	}
	_, err := s.AllocateChoice(context.Background(), view(s, "a"), []model.GPUShare{{Index: 2}}, 0, p, pc, now)
	var refused *RefusedError
	if !errors.As(err, &refused) || s.InFlight() != 0 {
		t.Fatalf("one of the two matching GPUs chosen: %v (in flight %d), want a refusal", err, s.InFlight())
	}
	writes, err := s.AllocateChoice(context.Background(), view(s, "a"), []model.GPUShare{{Index: 2}, {Index: 3}}, 0, p, f.claims(t, p, now), now)
	if err != nil || len(writes) != 1 || !slices.Equal(requestDevices(writes[0]), []string{"gpu=gpu-2", "gpu=gpu-3"}) {
		t.Fatalf("both matching GPUs chosen: %v, writes %v", err, writes)
	}
}

// TestAllocateFirstAvailable: the allocator, narrowed to the core's
// choice, names the subrequest the core's alternative picked; one that
// picks another is refused, and the pod's next set keeps on that node
// only the alternative the allocator picks there.
func TestAllocateFirstAvailable(t *testing.T) {
	f := newFixture("a")
	s := f.s
	s.UpsertSlice(nodeSlice("a", 0, 0, 1))
	s.UpsertClass(gpuClass())
	s.UpsertClaim(modeClaim("c", resourceapi.DeviceRequest{Name: "gpu", FirstAvailable: []resourceapi.DeviceSubRequest{sub("two", 2), sub("one", 1)}}))
	p := claimPod("p", "c")
	now := time.Now()
	pc := f.claims(t, p, now)
	if len(pc.Set.FirstOf) != 2 || pc.Set.FirstOf[0].Count != 2 || pc.Set.FirstOf[1].Count != 1 {
		t.Fatalf("set %+v, want two alternatives of 2 and 1 GPUs", pc.Set)
	}
	writes, err := s.AllocateChoice(context.Background(), view(s, "a"), []model.GPUShare{{Index: 1}}, 1, p, pc, now)
	if err != nil || len(writes) != 1 || !slices.Equal(requestDevices(writes[0]), []string{"gpu/one=gpu-1"}) {
		t.Fatalf("the second alternative on GPU 1: %v, writes %v", err, writes)
	}
	s.Forget("ns/p", writes)

	// The core says the second alternative on two GPUs: the allocator
	// picks the first there.
	_, err = s.AllocateChoice(context.Background(), view(s, "a"), []model.GPUShare{{Index: 0}, {Index: 1}}, 1, p, f.claims(t, p, now), now)
	var refused *RefusedError
	if !errors.As(err, &refused) || refused.Excluded {
		t.Fatalf("a choice the allocator serves with another subrequest: %v, want an exact refusal", err)
	}
	exact := f.claims(t, p, now.Add(time.Second)).Set
	if len(exact.FirstOf) != 2 || exact.FirstOf[0].Masks[0] == 0 || exact.FirstOf[1].Masks[0] != 0 || !strings.Contains(exact.FirstOf[1].Name, "/exact-") {
		t.Fatalf("after the refusal the alternatives are %+v, want only the first left on a", exact.FirstOf)
	}
	if _, err := s.AllocateChoice(context.Background(), view(s, "a"), []model.GPUShare{{Index: 0}}, 2, p, pc, now); err == nil || errors.As(err, &refused) {
		t.Fatalf("an alternative the set lacks: %v, want an error", err)
	}

	// A subrequest of count 0, read from anywhere but the API server,
	// asks for one device, as the set counts it.
	s.UpsertClaim(modeClaim("zero", resourceapi.DeviceRequest{Name: "gpu", FirstAvailable: []resourceapi.DeviceSubRequest{sub("one", 0)}}))
	z := claimPod("z", "zero")
	writes, err = s.AllocateChoice(context.Background(), view(s, "a"), []model.GPUShare{{Index: 2}}, 0, z, f.claims(t, z, now), now)
	if err != nil || len(writes) != 1 || !slices.Equal(requestDevices(writes[0]), []string{"gpu/one=gpu-2"}) {
		t.Fatalf("a subrequest of count 0 on GPU 2: %v, writes %v", err, writes)
	}
}
