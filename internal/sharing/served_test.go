package sharing

import "testing"

// A snapshot finds its resources and devices by name and ID; a nil one
// serves nothing.
func TestServed(t *testing.T) {
	rs, err := Build(load(t, "version: v1\nsharing:\n  timeSlicing:\n    resources:\n    - name: nvidia.com/gpu\n      replicas: 2\n"), newNode(2).gpus)
	if err != nil {
		t.Fatal(err)
	}
	s := NewServed(rs)
	id := rs[0].Devices[3].ID
	for _, tc := range []struct {
		name         string
		served       *Served
		resource, id string
		wantGPU      int
		wantOK       bool
	}{
		{"a served device", s, "nvidia.com/gpu", id, 1, true},
		{"an unknown ID", s, "nvidia.com/gpu", "GPU-unknown", 0, false},
		{"an unserved resource", s, "nvidia.com/mig-1g.10gb", id, 0, false},
		{"nothing served yet", nil, "nvidia.com/gpu", id, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, ok := tc.served.Device(tc.resource, tc.id)
			if ok != tc.wantOK || ok && d.GPUIndex != tc.wantGPU {
				t.Errorf("Device(%s, %s) = %+v, %v; want GPU %d, %v", tc.resource, tc.id, d, ok, tc.wantGPU, tc.wantOK)
			}
			if got := tc.served.Resource(tc.resource) != nil; got != (tc.served != nil && tc.resource == "nvidia.com/gpu") {
				t.Errorf("Resource(%s) found %v", tc.resource, got)
			}
		})
	}
	if got := len(s.Resources()); got != 1 {
		t.Errorf("Resources: %d, want 1", got)
	}
	if got := (*Served)(nil).Resources(); got != nil {
		t.Errorf("nil Resources: %v, want none", got)
	}
}
