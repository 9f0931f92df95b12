package nodesim

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/gpuplane/gpuplane/api/gpupod"
)

// Reasons a pod is refused, as the kubelet reports them.
const (
	reasonUnexpectedAdmission = "UnexpectedAdmissionError"
	reasonOutOfPrefix         = "OutOf"
)

// admissionError is a refused pod: Reason and Message go to its status.
type admissionError struct {
	Reason  string
	Message string
}

func (e *admissionError) Error() string { return e.Reason + ": " + e.Message }

// deviceRequests returns the container's device-plugin resource requests:
// extended resources outside kubernetes.io, from limits (the API server
// requires requests to equal limits for them), then requests. Those the
// pod's extended-resource claim serves for the container
// (status.extendedResourceClaimStatus) are DRA's, which the kubelet's
// admission and device manager skip.
func deviceRequests(pod *corev1.Pod, c *corev1.Container) map[string]int {
	out := map[string]int{}
	add := func(list corev1.ResourceList) {
		for name, q := range list {
			n := string(name)
			domain, _, ok := strings.Cut(n, "/")
			if !ok || strings.HasSuffix(domain, "kubernetes.io") || strings.HasPrefix(n, corev1.ResourceHugePagesPrefix) || draBacked(pod, c.Name, n) {
				continue
			}
			if _, seen := out[n]; !seen && q.Value() > 0 {
				out[n] = int(q.Value())
			}
		}
	}
	add(c.Resources.Limits)
	add(c.Resources.Requests)
	return out
}

// draBacked reports whether the pod's extended-resource claim serves
// resource for the container.
func draBacked(pod *corev1.Pod, container, resource string) bool {
	st := pod.Status.ExtendedResourceClaimStatus
	if st == nil {
		return false
	}
	return slices.ContainsFunc(st.RequestMappings, func(m corev1.ContainerExtendedResourceRequest) bool {
		return m.ContainerName == container && m.ResourceName == resource
	})
}

// podDeviceNeeds is what the pod holds at its peak: the largest init
// container request or the sum over app containers, whichever is larger,
// per resource (the kubelet's effective request).
func podDeviceNeeds(pod *corev1.Pod) map[string]int {
	app := map[string]int{}
	for i := range pod.Spec.Containers {
		for r, n := range deviceRequests(pod, &pod.Spec.Containers[i]) {
			app[r] += n
		}
	}
	for i := range pod.Spec.InitContainers {
		for r, n := range deviceRequests(pod, &pod.Spec.InitContainers[i]) {
			app[r] = max(app[r], n)
		}
	}
	return app
}

// admit checks that the node has the devices the pod needs, then runs the
// device manager's allocation for every container. Callers hold admitMu,
// so allocations never race each other. On success the devices are
// reserved for key.
func (s *Simulator) admit(ctx context.Context, key string, pod *corev1.Pod) (*gpupod.PodAllocation, error) {
	needs := podDeviceNeeds(pod)
	// The kubelet leaves out of admission the extended resources its node
	// has never offered (a scheduler extender's, or HAMi's
	// nvidia.com/gpumem), and its device manager allocates none of them.
	s.mu.Lock()
	maps.DeleteFunc(needs, func(r string, _ int) bool { _, offered := s.plugins[r]; return !offered })
	s.mu.Unlock()
	if err := s.checkFit(needs); err != nil {
		return nil, err
	}
	alloc := &gpupod.PodAllocation{Node: s.cfg.NodeName}
	// Devices of init containers are handed on to later containers, as the
	// kubelet reuses them.
	reusable := map[string][]string{}
	type ctr struct {
		c    *corev1.Container
		init bool
	}
	var all []ctr
	for i := range pod.Spec.InitContainers {
		all = append(all, ctr{&pod.Spec.InitContainers[i], true})
	}
	for i := range pod.Spec.Containers {
		all = append(all, ctr{&pod.Spec.Containers[i], false})
	}
	for _, c := range all {
		reqs := deviceRequests(pod, c.c)
		maps.DeleteFunc(reqs, func(r string, _ int) bool { _, offered := needs[r]; return !offered })
		if len(reqs) == 0 {
			continue
		}
		ca := gpupod.ContainerAllocation{Name: c.c.Name, Init: c.init, Devices: map[string][]string{}}
		resources := make([]string, 0, len(reqs))
		for r := range reqs {
			resources = append(resources, r)
		}
		sort.Strings(resources)
		for _, r := range resources {
			ids, err := s.allocateContainer(ctx, key, r, reqs[r], reusable[r], &ca)
			if err != nil {
				s.release(key)
				return nil, err
			}
			ca.Devices[r] = ids
			if c.init {
				reusable[r] = ids
			} else {
				reusable[r] = without(reusable[r], ids)
			}
		}
		alloc.Containers = append(alloc.Containers, ca)
	}
	return alloc, nil
}

// checkFit refuses a pod that asks for more devices than the node has free
// and healthy, with the kubelet's OutOf<resource> admission reason.
func (s *Simulator) checkFit(needs map[string]int) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	names := make([]string, 0, len(needs))
	for r := range needs {
		names = append(names, r)
	}
	sort.Strings(names)
	for _, r := range names {
		p, ok := s.plugins[r]
		capacity, used := 0, len(s.inUse[r])
		if ok {
			capacity = len(p.healthy())
		}
		if needs[r] > capacity-used {
			return &admissionError{
				Reason: reasonOutOfPrefix + r,
				Message: fmt.Sprintf("Pod was rejected: Node didn't have enough resource: %s, requested: %d, used: %d, capacity: %d",
					r, needs[r], used, capacity),
			}
		}
	}
	return nil
}

// allocateContainer picks n devices of resource for one container (asking
// the plugin for its preference when it offers one), reserves them for key,
// calls Allocate and merges the answer into ca.
func (s *Simulator) allocateContainer(ctx context.Context, key, resource string, n int, reuse []string, ca *gpupod.ContainerAllocation) ([]string, error) {
	p, ok := s.pluginFor(resource)
	if !ok {
		return nil, &admissionError{Reason: reasonUnexpectedAdmission, Message: fmt.Sprintf("Allocate failed due to %v: %s, which is unexpected", errNoPlugin, resource)}
	}
	mustInclude := reuse
	if len(mustInclude) > n {
		mustInclude = mustInclude[:n]
	}
	s.mu.Lock()
	var available []string
	for _, id := range p.healthy() {
		if _, taken := s.inUse[resource][id]; !taken {
			available = append(available, id)
		}
	}
	s.mu.Unlock()
	candidates := append(slices.Clone(mustInclude), available...)
	if len(candidates) < n {
		return nil, &admissionError{Reason: reasonUnexpectedAdmission, Message: fmt.Sprintf(
			"Allocate failed due to requested number of devices unavailable for %s. Requested: %d, Available: %d, which is unexpected", resource, n, len(candidates))}
	}
	ids := candidates[:n]
	if len(mustInclude) < n && p.options.GetGetPreferredAllocationAvailable() {
		if preferred, err := s.preferred(ctx, p, candidates, mustInclude, n); err != nil {
			s.log.Warn("GetPreferredAllocation failed; using the first free devices", "resource", resource, "err", describeGRPC(err))
		} else if preferred != nil {
			ids = preferred
		}
	}
	s.reserve(key, resource, without(ids, mustInclude))

	resp, err := p.client.Allocate(ctx, &pluginapi.AllocateRequest{
		ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: ids}},
	})
	if err == nil && len(resp.GetContainerResponses()) != 1 {
		err = fmt.Errorf("plugin answered %d container responses for 1 request", len(resp.GetContainerResponses()))
	}
	if err != nil {
		return nil, &admissionError{Reason: reasonUnexpectedAdmission, Message: fmt.Sprintf("Allocate failed due to %s, which is unexpected", describeGRPC(err))}
	}
	mergeResponse(ca, resp.GetContainerResponses()[0])
	return ids, nil
}

// preferred asks the plugin which n of the candidates it prefers and
// returns its answer when it is a valid choice, else nil.
func (s *Simulator) preferred(ctx context.Context, p *plugin, candidates, mustInclude []string, n int) ([]string, error) {
	resp, err := p.client.GetPreferredAllocation(ctx, &pluginapi.PreferredAllocationRequest{
		ContainerRequests: []*pluginapi.ContainerPreferredAllocationRequest{{
			AvailableDeviceIDs:   candidates,
			MustIncludeDeviceIDs: mustInclude,
			AllocationSize:       int32(n),
		}},
	})
	if err != nil {
		return nil, err
	}
	if len(resp.GetContainerResponses()) != 1 {
		return nil, nil
	}
	ids := resp.GetContainerResponses()[0].GetDeviceIDs()
	if len(ids) != n {
		s.log.Warn("plugin preferred a wrong number of devices; ignoring", "resource", p.resource, "want", n, "got", len(ids))
		return nil, nil
	}
	seen := map[string]bool{}
	for _, id := range ids {
		if seen[id] || !slices.Contains(candidates, id) {
			s.log.Warn("plugin preferred a device that is not available; ignoring", "resource", p.resource, "device", id)
			return nil, nil
		}
		seen[id] = true
	}
	for _, id := range mustInclude {
		if !seen[id] {
			return nil, nil
		}
	}
	return ids, nil
}

// mergeResponse adds a plugin's Allocate answer to the container's record.
func mergeResponse(ca *gpupod.ContainerAllocation, r *pluginapi.ContainerAllocateResponse) {
	for k, v := range r.GetEnvs() {
		if ca.Env == nil {
			ca.Env = map[string]string{}
		}
		ca.Env[k] = v
	}
	for k, v := range r.GetAnnotations() {
		if ca.Annotations == nil {
			ca.Annotations = map[string]string{}
		}
		ca.Annotations[k] = v
	}
	for _, m := range r.GetMounts() {
		ca.Mounts = append(ca.Mounts, gpupod.Mount{HostPath: m.GetHostPath(), ContainerPath: m.GetContainerPath(), ReadOnly: m.GetReadOnly()})
	}
	for _, d := range r.GetDevices() {
		ca.DeviceNodes = append(ca.DeviceNodes, d.GetHostPath())
	}
	for _, d := range r.GetCdiDevices() {
		ca.CDIDevices = append(ca.CDIDevices, d.GetName())
	}
}

// reserve marks devices as held by key.
func (s *Simulator) reserve(key, resource string, ids []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.inUse[resource] == nil {
		s.inUse[resource] = map[string]string{}
	}
	for _, id := range ids {
		s.inUse[resource][id] = key
	}
}

// release frees every device held by key and reports whether it held any.
func (s *Simulator) release(key string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	freed := false
	for _, held := range s.inUse {
		for id, k := range held {
			if k == key {
				delete(held, id)
				freed = true
			}
		}
	}
	return freed
}

func without(ids, drop []string) []string {
	var out []string
	for _, id := range ids {
		if !slices.Contains(drop, id) {
			out = append(out, id)
		}
	}
	return out
}
