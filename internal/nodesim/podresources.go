package nodesim

import (
	"context"
	"sort"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/gpuplane/gpuplane/api/gpupod"
)

// podResources serves the kubelet's PodResources API v1 from the node's
// own allocation records.
type podResources struct {
	podresourcesv1.UnimplementedPodResourcesListerServer
	sim *Simulator
}

var _ podresourcesv1.PodResourcesListerServer = (*podResources)(nil)

// List returns every pod holding devices and the devices of each container.
func (p *podResources) List(context.Context, *podresourcesv1.ListPodResourcesRequest) (*podresourcesv1.ListPodResourcesResponse, error) {
	allocs := p.sim.PodAllocations()
	keys := make([]string, 0, len(allocs))
	for k := range allocs {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	resp := &podresourcesv1.ListPodResourcesResponse{}
	for _, k := range keys {
		resp.PodResources = append(resp.PodResources, p.podEntry(k, allocs[k]))
	}
	return resp, nil
}

// Get returns one pod's devices.
func (p *podResources) Get(_ context.Context, req *podresourcesv1.GetPodResourcesRequest) (*podresourcesv1.GetPodResourcesResponse, error) {
	key := req.GetPodNamespace() + "/" + req.GetPodName()
	a, ok := p.sim.PodAllocations()[key]
	if !ok {
		return nil, status.Errorf(codes.NotFound, "pod %s holds no devices on node %s", key, p.sim.cfg.NodeName)
	}
	return &podresourcesv1.GetPodResourcesResponse{PodResources: p.podEntry(key, a)}, nil
}

// GetAllocatableResources returns the node's healthy devices.
func (p *podResources) GetAllocatableResources(context.Context, *podresourcesv1.AllocatableResourcesRequest) (*podresourcesv1.AllocatableResourcesResponse, error) {
	s := p.sim
	s.mu.Lock()
	defer s.mu.Unlock()
	names := make([]string, 0, len(s.plugins))
	for n := range s.plugins {
		names = append(names, n)
	}
	sort.Strings(names)
	resp := &podresourcesv1.AllocatableResourcesResponse{}
	for _, n := range names {
		pl := s.plugins[n]
		for _, id := range pl.healthy() {
			resp.Devices = append(resp.Devices, &podresourcesv1.ContainerDevices{
				ResourceName: n, DeviceIds: []string{id}, Topology: topologyOf(pl.devices[id]),
			})
		}
	}
	return resp, nil
}

func (p *podResources) podEntry(key string, a *gpupod.PodAllocation) *podresourcesv1.PodResources {
	s := p.sim
	s.mu.Lock()
	st := s.pods[key]
	s.mu.Unlock()
	entry := &podresourcesv1.PodResources{}
	if st != nil {
		entry.Name, entry.Namespace = st.name, st.namespace
	}
	for _, c := range a.Containers {
		if c.Init {
			continue
		}
		cr := &podresourcesv1.ContainerResources{Name: c.Name}
		resources := make([]string, 0, len(c.Devices))
		for r := range c.Devices {
			resources = append(resources, r)
		}
		sort.Strings(resources)
		for _, r := range resources {
			cd := &podresourcesv1.ContainerDevices{ResourceName: r, DeviceIds: c.Devices[r]}
			if pl, ok := s.pluginFor(r); ok && len(c.Devices[r]) > 0 {
				s.mu.Lock()
				cd.Topology = topologyOf(pl.devices[c.Devices[r][0]])
				s.mu.Unlock()
			}
			cr.Devices = append(cr.Devices, cd)
		}
		entry.Containers = append(entry.Containers, cr)
	}
	return entry
}

// topologyOf converts a device's NUMA affinity.
func topologyOf(d *pluginapi.Device) *podresourcesv1.TopologyInfo {
	if d == nil || d.GetTopology() == nil {
		return nil
	}
	t := &podresourcesv1.TopologyInfo{}
	for _, n := range d.GetTopology().GetNodes() {
		t.Nodes = append(t.Nodes, &podresourcesv1.NUMANode{ID: n.GetID()})
	}
	return t
}
