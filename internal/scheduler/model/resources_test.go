package model

import (
	"strings"
	"testing"
)

func TestValidateResourcesAndPorts(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want string
	}{
		{"allocatable in bounds", ValidateResources("allocatable", map[string]int64{"pods": 110, "ephemeral-storage": MaxScalar}), ""},
		{"negative", ValidateResources("allocatable", map[string]int64{"rdma/hca": -1}), "allocatable[rdma/hca]: must be 0 to"},
		{"beyond the bound", ValidateResources("scalars", map[string]int64{"a": MaxScalar + 1}), "scalars[a]: must be 0 to"},
		{"no name", ValidateResources("scalars", map[string]int64{"": 1}), "must not be empty"},
		{"ports in bounds", ValidateHostPorts("hostPorts", []HostPort{{Port: 1}, {Protocol: "SCTP", IP: "::1", Port: 65535}}), ""},
		{"port 0", ValidateHostPorts("hostPorts", []HostPort{{Port: 0}}), "hostPorts[0].port: must be 1 to 65535"},
		{"port above 65535", ValidateHostPorts("hostPorts", []HostPort{{Port: 80}, {Port: 65536}}), "hostPorts[1].port"},
		{"unknown protocol", ValidateHostPorts("hostPorts", []HostPort{{Protocol: "tcp", Port: 80}}), `hostPorts[0].protocol: must be TCP, UDP or SCTP, got "tcp"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.want == "" && tc.err != nil || tc.want != "" && (tc.err == nil || !strings.Contains(tc.err.Error(), tc.want)) {
				t.Errorf("error %v, want %q", tc.err, tc.want)
			}
		})
	}
}

// TestInReplicas: a request for GPUs, or for replicas of a renamed
// resource, counts in replicas only on a GPU time-sliced under the
// resource it asks through, never through claims nor on a MIG GPU.
func TestInReplicas(t *testing.T) {
	sliced := GPU{ShareResource: "nvidia.com/gpu", MinShareMilli: 250}
	req := Request{GPUs: 2, Replicas: 2, ShareResource: "nvidia.com/gpu"}
	shared := Request{GPUMilli: 500, Replicas: 2, ShareResource: "nvidia.com/gpu.shared"}
	for _, tc := range []struct {
		name string
		g    GPU
		r    Request
		want bool
	}{
		{"time-sliced under the name asked", sliced, req, true},
		{"shared under another name", GPU{ShareResource: "nvidia.com/gpu.shared", MinShareMilli: 250}, req, false},
		{"not shared", GPU{}, req, false},
		{"MIG", GPU{ShareResource: "nvidia.com/gpu", MinShareMilli: 250, MIGSlices: 7}, req, false},
		{"through claims", sliced, Request{GPUs: 2, Replicas: 2, ShareResource: "nvidia.com/gpu", DeviceSet: "s"}, false},
		{"whole GPUs without replicas", sliced, Request{GPUs: 2}, false},
		{"replicas of nvidia.com/gpu.shared", GPU{ShareResource: "nvidia.com/gpu.shared", MinShareMilli: 250, SharesOnly: true}, shared, true},
		{"replicas of nvidia.com/gpu.shared, one a GPU", GPU{ShareResource: "nvidia.com/gpu.shared", MinShareMilli: 1000, SharesOnly: true}, shared, true},
		{"replicas of nvidia.com/gpu.shared on a GPU sliced under nvidia.com/gpu", sliced, shared, false},
		{"replicas of nvidia.com/gpu.shared on a GPU not shared", GPU{}, shared, false},
		{"a part of nvidia.com/gpu.shared without replicas", GPU{ShareResource: "nvidia.com/gpu.shared", MinShareMilli: 250}, Request{GPUMilli: 500, ShareResource: "nvidia.com/gpu.shared"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.g.InReplicas(&tc.r); got != tc.want {
				t.Errorf("InReplicas = %t, want %t", got, tc.want)
			}
			n := Node{GPUs: []GPU{tc.g}}
			if got := n.InReplicasOn(&tc.r); got != tc.want {
				t.Errorf("InReplicasOn = %t, want %t", got, tc.want)
			}
		})
	}
	if got := sliced.ShareMilli(&req); got != 500 {
		t.Errorf("two replicas of four take %d, want 500", got)
	}
}
