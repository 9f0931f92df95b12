package adapter

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/gpuplane/gpuplane/api/gpupod"
	"github.com/gpuplane/gpuplane/internal/scheduler/model"
)

// What a node and a pod say of the resources the core counts besides CPU,
// memory and GPUs (model/resources.go): the node's allocatable of the
// rest, and of pods; the pod's requests of the rest, and its host ports.

// maxScalar bounds one quantity of those resources, on a node or in a
// pod's summed requests.
var maxScalar = *resource.NewQuantity(model.MaxScalar, resource.BinarySI)

// modelledResource reports whether the core models name apart from the
// scalars: CPU, memory, GPUs whole, shared or MIG, the resources that ask
// for part of a GPU, and what a DeviceClass implies (placed through
// claims).
func modelledResource(name corev1.ResourceName) bool {
	switch {
	case name == corev1.ResourceCPU, name == corev1.ResourceMemory, name == ResourceGPU, name == ResourceGPUShared,
		strings.HasPrefix(string(name), migResourcePrefix), gpupod.IsFractionResource(name),
		strings.HasPrefix(string(name), resourceapi.ResourceDeviceClassPrefix):
		return true
	}
	return false
}

// nodeAllocatable reads the node's allocatable of every resource the core
// does not model otherwise, pods included, as whole numbers in the node's
// unit (Quantity.Value: bytes, devices). A negative quantity, one beyond
// model.MaxScalar or more names than model.MaxScalarNames is refused,
// naming the field.
func nodeAllocatable(rl corev1.ResourceList) (map[string]int64, error) {
	out := make(map[string]int64, 4)
	for name, q := range rl {
		if modelledResource(name) || name == "" {
			continue
		}
		if q.Sign() < 0 || q.Cmp(maxScalar) > 0 {
			return nil, fmt.Errorf("status.allocatable[%s]: must be 0 to %d, got %s", truncate(string(name)), model.MaxScalar, truncate(q.String()))
		}
		if len(out) == model.MaxScalarNames {
			return nil, fmt.Errorf("status.allocatable: more than %d resources besides cpu, memory and GPUs", model.MaxScalarNames)
		}
		out[string(name)] = q.Value()
	}
	return out, nil
}

// podScalars is what a pod asks (reqs, its requests as the kubelet counts
// them: resourcehelper.PodRequests) of the resources the core does not
// model otherwise, in the node's unit; zero requests are left out, as
// kube-scheduler leaves them. nil when none.
func podScalars(reqs corev1.ResourceList) (map[string]int64, *BadInputError) {
	var out map[string]int64
	for name, q := range reqs {
		if modelledResource(name) || q.IsZero() || name == "" {
			continue
		}
		if q.Sign() < 0 || q.Cmp(maxScalar) > 0 {
			return nil, badInput("RequestOutOfRange", "the pod asks for %s of %s: no node holds more than %d; ask for less", truncate(q.String()), truncate(string(name)), model.MaxScalar)
		}
		if len(out) == model.MaxScalarNames {
			return nil, badInput("RequestOutOfRange", "the pod asks for more than %d resources besides cpu, memory and GPUs", model.MaxScalarNames)
		}
		if out == nil {
			out = map[string]int64{}
		}
		out[string(name)] = q.Value()
	}
	return out, nil
}

// podHostPorts lists the host ports a pod binds: those of its containers
// and of its init containers that run beside them (restartPolicy Always),
// as kube-scheduler's NodePorts reads them. A port out of range, an
// unknown protocol or more than model.MaxHostPorts is refused, naming
// the container.
func podHostPorts(p *corev1.Pod) ([]model.HostPort, *BadInputError) {
	var out []model.HostPort
	add := func(c *corev1.Container) *BadInputError {
		for _, cp := range c.Ports {
			if cp.HostPort <= 0 {
				continue // no host port, as kube-scheduler reads it
			}
			hp := model.HostPort{Protocol: string(cp.Protocol), IP: cp.HostIP, Port: cp.HostPort}
			if err := model.ValidateHostPorts("ports", []model.HostPort{hp}); err != nil {
				return badInput("InvalidHostPort", "container %q: %v", truncate(c.Name), err)
			}
			if len(out) == model.MaxHostPorts {
				return badInput("InvalidHostPort", "the pod binds more than %d host ports", model.MaxHostPorts)
			}
			out = append(out, hp.Normal())
		}
		return nil
	}
	for i := range p.Spec.InitContainers {
		c := &p.Spec.InitContainers[i]
		if c.RestartPolicy == nil || *c.RestartPolicy != corev1.ContainerRestartPolicyAlways {
			continue
		}
		if bad := add(c); bad != nil {
			return nil, bad
		}
	}
	for i := range p.Spec.Containers {
		if bad := add(&p.Spec.Containers[i]); bad != nil {
			return nil, bad
		}
	}
	return out, nil
}

// hostPortContainer keeps a pod's host ports in the cache when its
// containers go (slimPod): one container with no resources that binds
// them all, nil when the pod binds none. podHostPorts of the cached pod
// gives what it gives of the pod.
func hostPortContainer(p *corev1.Pod) []corev1.Container {
	var ports []corev1.ContainerPort
	keep := func(c *corev1.Container) {
		for _, cp := range c.Ports {
			if cp.HostPort > 0 {
				ports = append(ports, corev1.ContainerPort{HostPort: cp.HostPort, HostIP: cp.HostIP, Protocol: cp.Protocol, ContainerPort: cp.ContainerPort})
			}
		}
	}
	for i := range p.Spec.InitContainers {
		if c := &p.Spec.InitContainers[i]; c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways {
			keep(c)
		}
	}
	for i := range p.Spec.Containers {
		keep(&p.Spec.Containers[i])
	}
	if len(ports) == 0 {
		return nil
	}
	return []corev1.Container{{Name: "host-ports", Ports: ports}}
}

// heldResources is what is left of a node's pods, scalar resources and
// host ports while nodeHoldings counts its running pods, by the core's
// rules (model/resources.go), so that a pod the core would find
// over-allocating is left out of the snapshot.
type heldResources struct {
	counted bool
	pods    int64
	free    map[string]int64
	ports   []model.HostPort
}

func (r *heldResources) init(n *model.Node) {
	if n.Allocatable == nil {
		return
	}
	r.counted, r.pods = true, n.Allocatable[model.ResourcePods]
	r.free = make(map[string]int64, len(n.Allocatable))
	for k, v := range n.Allocatable {
		r.free[k] = v
	}
}

// fits reports whether one more pod asking req fits what is left.
func (r *heldResources) fits(req *model.Request) bool {
	if r.counted {
		if r.pods < 1 && !req.NotPod {
			return false
		}
		for k, v := range req.Scalars {
			if v > 0 && r.free[k] < v {
				return false
			}
		}
	}
	for _, p := range req.HostPorts {
		for _, q := range r.ports {
			if p.Conflicts(q) {
				return false
			}
		}
	}
	return true
}

// take counts one pod asking req (or a holding that is no pod, which
// takes no slot of the pod limit).
func (r *heldResources) take(req *model.Request) {
	if r.counted {
		if !req.NotPod {
			r.pods--
		}
		for k, v := range req.Scalars {
			r.free[k] -= v
		}
	}
	r.ports = append(r.ports, req.HostPorts...)
}

// clip cuts req to what is left: each scalar to what is left of it (none
// when nothing is), and the host ports to those no pod holds yet. A
// running pod that over-fills its node holds all it asks as the kubelet
// runs it; counted for what is left, it leaves the node full of each
// resource, as kube-scheduler counts it, without over-allocating the
// core's books. A port dropped here is covered by the one held
// (coverPorts leaves only such conflicts), so no new pod may bind it.
func (r *heldResources) clip(req *model.Request) (map[string]int64, []model.HostPort) {
	scalars := req.Scalars
	if r.counted && len(req.Scalars) > 0 {
		scalars = make(map[string]int64, len(req.Scalars))
		for k, v := range req.Scalars {
			if left := min(v, r.free[k]); left > 0 {
				scalars[k] = left
			}
		}
	}
	var ports []model.HostPort
	for _, p := range req.HostPorts {
		taken := false
		for _, q := range r.ports {
			taken = taken || p.Conflicts(q)
		}
		if !taken {
			ports = append(ports, p)
		}
	}
	return scalars, ports
}

// coverPorts drops from each running pod's request a host port on one
// address when another pod of the node binds the same protocol and port
// on every address: that one refuses every new pod the dropped one would,
// and the ports left conflict only where one equals the other (clip then
// counts it once). Without it a pod holding 10.0.0.1:80 taken first would
// leave out the one holding 0.0.0.0:80, and the node would take a new pod
// on 10.0.0.2:80 that kube-scheduler refuses.
func coverPorts(all []podHeld) {
	var every map[model.HostPort]string // port on every address: a pod that binds it
	for _, e := range all {
		for _, p := range e.req.HostPorts {
			if p = p.Normal(); p.IP == model.AllIPs {
				if every == nil {
					every = map[model.HostPort]string{}
				}
				every[p] = e.pi.key
			}
		}
	}
	if every == nil {
		return
	}
	for i := range all {
		e := &all[i]
		var kept []model.HostPort
		for _, p := range e.req.HostPorts {
			q := p.Normal()
			q.IP = model.AllIPs
			if by, ok := every[q]; ok && by != e.pi.key && p.Normal().IP != model.AllIPs {
				continue
			}
			kept = append(kept, p)
		}
		if len(kept) < len(e.req.HostPorts) {
			e.req.HostPorts = kept
		}
	}
}
