package metrics

import (
	"context"
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpuplane/gpuplane/internal/gpu"
)

// holder is a container holding a device, with what its processes use
// on it in the current scrape.
type holder struct {
	Holder
	util  float64 // percent, summed over processes
	memMi uint64
	procs int
}

type allocKey struct {
	gpu      int
	resource string
}

// attribution maps devices to the containers holding them and processes to
// those containers. Its maps and slices live across scrapes.
type attribution struct {
	cg   *procCgroups
	ckpt *kubeletCheckpoint
	// holders by the UUID of a GPU or MIG device, one per container.
	holders  map[string][]holder
	allocs   map[allocKey]int
	unmapped []int // per GPU
	// ckptErr is the checkpoint's state in this scrape; nil when no GPU
	// needed it.
	ckptErr  error
	ckptUsed bool
	// shares is what part of a physical GPU each container holds (keyed
	// by namespace, pod and container), used what part of each GPU is
	// held; listed says the PodResources API answered this scrape.
	shares map[Holder]float64
	used   []float64
	listed bool
	// foreign counts, per GPU and pod UID, the processes of pods that
	// were not given the GPU they run on.
	foreign map[foreignKey]int
}

type foreignKey struct {
	gpu    int
	podUID string
}

func newAttribution(procRoot, checkpoint string) *attribution {
	return &attribution{
		cg:      newProcCgroups(procRoot),
		ckpt:    newKubeletCheckpoint(checkpoint),
		holders: map[string][]holder{},
		allocs:  map[allocKey]int{},
		shares:  map[Holder]float64{},
		foreign: map[foreignKey]int{},
	}
}

func (a *attribution) reset(gpus int) {
	for k, v := range a.holders {
		if len(v) == 0 {
			delete(a.holders, k) // a device that is gone
			continue
		}
		a.holders[k] = v[:0]
	}
	clear(a.allocs)
	a.unmapped = resize(a.unmapped, gpus)
	clear(a.unmapped)
	clear(a.shares)
	clear(a.foreign)
	a.used = resize(a.used, gpus)
	clear(a.used)
	a.listed = false
	a.ckptErr, a.ckptUsed = nil, false
}

// add records that a container holds a device, once per container.
func (a *attribution) add(uuid string, h Holder) {
	hs := a.holders[uuid]
	for i := range hs {
		if hs[i].Namespace == h.Namespace && hs[i].Pod == h.Pod && hs[i].Container == h.Container {
			return
		}
	}
	a.holders[uuid] = append(hs, holder{Holder: h})
}

// exclusive returns the only container holding uuid, or nil.
func (a *attribution) exclusive(uuid string) *holder {
	if hs := a.holders[uuid]; len(hs) == 1 {
		return &hs[0]
	}
	return nil
}

// podCollector reads which containers hold which devices from the
// PodResources API, maps the GPUs' processes to them and emits the
// gpuplane_pod_* series and allocations. It runs before deviceCollector,
// which labels a GPU held by one container with that container.
type podCollector struct{ e *Exporter }

var _ collector = (*podCollector)(nil)

func (*podCollector) Name() string { return "pods" }

func (c *podCollector) collect(ctx context.Context, emit func(prometheus.Metric)) error {
	e, a := c.e, c.e.att
	listErr := c.refresh(ctx)
	c.emitPods(emit)

	switch {
	case e.opts.PodResources == nil:
		emit(prometheus.MustNewConstMetric(e.descs.podResourcesUp, prometheus.GaugeValue, 0, ReasonDisabled))
	case errors.Is(listErr, ErrSocketAbsent):
		emit(prometheus.MustNewConstMetric(e.descs.podResourcesUp, prometheus.GaugeValue, 0, ReasonSocketAbsent))
		listErr = nil // no kubelet here: metrics are still whole, without pods
	case listErr != nil:
		emit(prometheus.MustNewConstMetric(e.descs.podResourcesUp, prometheus.GaugeValue, 0, ReasonListFailed))
	default:
		emit(prometheus.MustNewConstMetric(e.descs.podResourcesUp, prometheus.GaugeValue, 1, ""))
	}
	if a.ckptUsed {
		v, reason := 1.0, ""
		if a.ckptErr != nil {
			v, reason = 0, "unreadable"
		}
		emit(prometheus.MustNewConstMetric(e.descs.checkpointUp, prometheus.GaugeValue, v, reason))
	}
	return listErr
}

// refresh reads the GPUs' processes and who holds which device, and
// attributes the processes; it returns the PodResources API's error.
func (c *podCollector) refresh(ctx context.Context) error {
	e, a := c.e, c.e.att
	a.reset(len(e.devices))
	// The processes of every GPU: pod attribution and MIG memory need them.
	for i := range e.devices {
		e.procs[i], e.procErr[i] = e.opts.GPUs.Processes(ctx, e.devices[i].Index, e.procs[i][:0])
	}
	listErr := c.list(ctx)
	c.attribute()
	return listErr
}

// list fills the holders from the PodResources API.
func (c *podCollector) list(ctx context.Context) error {
	e, a := c.e, c.e.att
	if e.opts.PodResources == nil {
		return nil
	}
	resp, err := e.opts.PodResources.List(ctx)
	if err != nil {
		return err
	}
	a.listed = true
	for _, p := range resp.GetPodResources() {
		for _, ctr := range p.GetContainers() {
			for _, dev := range ctr.GetDevices() {
				for _, id := range dev.GetDeviceIds() {
					uuid, ok := e.deviceKey(id)
					if !ok {
						continue // not one of this node's GPUs
					}
					a.add(uuid, Holder{Namespace: p.GetNamespace(), Pod: p.GetName(), Container: ctr.GetName(), Resource: dev.GetResourceName(), DeviceID: id})
					if e.opts.ShareOf != nil {
						if share, ok := e.opts.ShareOf(p.GetNamespace(), p.GetName(), dev.GetResourceName(), id); ok {
							a.shares[Holder{Namespace: p.GetNamespace(), Pod: p.GetName(), Container: ctr.GetName()}] += share
							a.used[e.byUUID[uuid]] += share
						}
					}
				}
			}
		}
	}
	for uuid, hs := range a.holders {
		gi := e.byUUID[uuid]
		for i := range hs {
			a.allocs[allocKey{gpu: gi, resource: hs[i].Resource}]++
		}
	}
	return nil
}

// attribute assigns every GPU process to the container holding its device:
// directly when one container holds it, else through the process's cgroup
// (pod UID) and the kubelet's checkpoint (pod UID to device IDs).
func (c *podCollector) attribute() {
	e, a := c.e, c.e.att
	a.cg.begin()
	defer a.cg.end()
	for i := range e.devices {
		if e.procErr[i] != nil {
			continue
		}
		d := &e.devices[i]
		for _, p := range e.procs[i] {
			hs := a.holders[processDevice(d, &p)]
			var h *holder
			switch len(hs) {
			case 0:
				// No container holds the device. A process of a pod here
				// uses a GPU its pod was not given (a privileged pod, or
				// NVIDIA_VISIBLE_DEVICES=all); anything else is the host's.
				if a.listed {
					if ref, ok := a.cg.lookup(p.PID); ok && ref.PodUID != "" {
						a.foreign[foreignKey{gpu: i, podUID: ref.PodUID}]++
					}
				}
				continue
			case 1:
				h = &hs[0]
				if uid, other := c.otherPod(hs, p.PID); other {
					a.foreign[foreignKey{gpu: i, podUID: uid}]++
					continue
				}
			default:
				h = c.byCgroup(hs, p.PID)
				if h == nil {
					if uid, other := c.otherPod(hs, p.PID); other {
						a.foreign[foreignKey{gpu: i, podUID: uid}]++
					} else {
						a.unmapped[i]++
					}
					continue
				}
			}
			h.util += float64(p.SMUtil)
			h.memMi += p.UsedMemMiB
			h.procs++
		}
	}
}

// otherPod reports whether a process belongs to a pod none of whose
// containers holds the device (by its cgroup's pod UID against the
// holders' UIDs, Options.PodUID), and which.
func (c *podCollector) otherPod(hs []holder, pid uint32) (string, bool) {
	e, a := c.e, c.e.att
	if e.opts.PodUID == nil || !a.listed {
		return "", false
	}
	ref, ok := a.cg.lookup(pid)
	if !ok || ref.PodUID == "" {
		return "", false
	}
	for i := range hs {
		uid, known := e.opts.PodUID(hs[i].Namespace, hs[i].Pod)
		if !known || uid == ref.PodUID {
			return "", false // the holder's own, or a holder not known yet
		}
	}
	return ref.PodUID, true
}

func (c *podCollector) byCgroup(hs []holder, pid uint32) *holder {
	a := c.e.att
	if !a.ckptUsed {
		a.ckptUsed = true
		a.ckptErr = a.ckpt.refresh()
		if a.ckptErr != nil {
			c.e.log.Debug("kubelet device checkpoint unreadable; shared GPUs are not split between pods", "err", a.ckptErr)
		}
	}
	if a.ckptErr != nil {
		return nil
	}
	ref, ok := a.cg.lookup(pid)
	if !ok {
		return nil
	}
	for i := range hs {
		if a.ckpt.byDevice[hs[i].DeviceID] == ref.PodUID {
			return &hs[i]
		}
	}
	return nil
}

// processDevice is the UUID of the device a process runs on: its MIG
// device on a GPU in MIG mode, else the GPU.
func processDevice(d *gpu.Device, p *gpu.Process) string {
	if p.GPUInstanceID >= 0 {
		for j := range d.MIGDevices {
			m := &d.MIGDevices[j]
			if m.GPUInstanceID == p.GPUInstanceID && (p.ComputeInstanceID < 0 || m.ComputeInstanceID == p.ComputeInstanceID) {
				return m.UUID
			}
		}
	}
	return d.UUID
}

func (c *podCollector) emitPods(emit func(prometheus.Metric)) {
	e, a := c.e, c.e.att
	const mib = 1 << 20
	for i := range e.devices {
		if e.procErr[i] != nil {
			continue
		}
		d := &e.devices[i]
		for _, h := range a.holders[d.UUID] {
			pairs := e.devicePairs(i, h.Container, h.Namespace, h.Pod)
			emit(e.metric(e.descs.podUtil, pairs, prometheus.GaugeValue, h.util/100))
			emit(e.metric(e.descs.podMem, pairs, prometheus.GaugeValue, float64(h.memMi*mib)))
			emit(e.metric(e.descs.podProcs, pairs, prometheus.GaugeValue, float64(h.procs)))
			if e.opts.MemoryLimitOf != nil {
				if limit, ok := e.opts.MemoryLimitOf(h.Namespace, h.Pod); ok {
					emit(e.metric(e.descs.podMemLimit, pairs, prometheus.GaugeValue, float64(limit*mib)))
				}
			}
		}
		for j := range d.MIGDevices {
			m := &d.MIGDevices[j]
			for _, h := range a.holders[m.UUID] {
				pairs := e.migPairs(i, m.Profile, itoa(m.GPUInstanceID), h.Container, h.Namespace, h.Pod)
				emit(e.metric(e.descs.migPodUtil, pairs, prometheus.GaugeValue, h.util/100))
				emit(e.metric(e.descs.migPodMem, pairs, prometheus.GaugeValue, float64(h.memMi*mib)))
				emit(e.metric(e.descs.migPodProcs, pairs, prometheus.GaugeValue, float64(h.procs)))
			}
		}
		if len(a.holders[d.UUID]) > 1 || a.unmapped[i] > 0 {
			emit(prometheus.MustNewConstMetric(e.descs.unmapped, prometheus.GaugeValue, float64(a.unmapped[i]), e.labelValues(i)...))
		}
	}
	for k, n := range a.allocs {
		if k.gpu < len(e.devices) {
			emit(prometheus.MustNewConstMetric(e.descs.allocations, prometheus.GaugeValue, float64(n), e.labelValues(k.gpu, k.resource)...))
		}
	}
	c.emitShares(emit)
	for k, n := range a.foreign {
		emit(prometheus.MustNewConstMetric(e.descs.foreign, prometheus.GaugeValue, float64(n), e.labelValues(k.gpu, k.podUID)...))
	}
}

// emitShares emits how much of a physical GPU each container holds
// (container_gpu_allocation, as OpenCost reads it) and how much of each GPU
// nobody holds, from what list read.
func (c *podCollector) emitShares(emit func(prometheus.Metric)) {
	e, a := c.e, c.e.att
	if e.opts.ShareOf == nil || e.opts.PodResources == nil || !a.listed {
		return
	}
	var named map[[2]string]bool
	for k, v := range a.shares {
		emit(prometheus.MustNewConstMetric(e.descs.containerShare, prometheus.GaugeValue, v, k.Namespace, k.Pod, k.Container, e.hostname))
		if e.opts.QueueOf == nil {
			continue
		}
		pod := [2]string{k.Namespace, k.Pod}
		if named[pod] {
			continue
		}
		if named == nil {
			named = map[[2]string]bool{}
		}
		named[pod] = true
		if q, ok := e.opts.QueueOf(k.Namespace, k.Pod); ok {
			emit(prometheus.MustNewConstMetric(e.descs.queueInfo, prometheus.GaugeValue, 1, k.Namespace, k.Pod, q))
		}
	}
	for i := range e.devices {
		emit(prometheus.MustNewConstMetric(e.descs.idleShare, prometheus.GaugeValue, max(0, 1-a.used[i]), e.labelValues(i)...))
	}
}

// itoa formats small non-negative integers without allocating.
func itoa(i int) string {
	if i >= 0 && i < len(smallInts) {
		return smallInts[i]
	}
	return fmt.Sprint(i)
}

var smallInts = func() []string {
	s := make([]string, 64)
	for i := range s {
		s[i] = fmt.Sprint(i)
	}
	return s
}()
