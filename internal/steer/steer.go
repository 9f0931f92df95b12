package steer

import (
	"cmp"
	"log/slog"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gpuplane/gpuplane/api/gpupod"
	"github.com/gpuplane/gpuplane/internal/deviceplugin"
	"github.com/gpuplane/gpuplane/internal/sharing"
)

// Steerer names, for a container the kubelet is admitting, the devices
// gpuplane-scheduler chose for its pod (the protocol is in the package
// doc).
type Steerer struct {
	// pods lists the pods bound to the node as the watch last showed
	// them; fresh, when set, lists them from the API server.
	pods  func() []*corev1.Pod
	fresh func() ([]*corev1.Pod, error)
	// gpus is the node's GPU count, the bound of the choice's indexes.
	gpus int
	log  *slog.Logger

	mu sync.Mutex
	// given remembers, per pod and resource, the devices steered to it.
	given map[types.UID]map[string][]string
	// last is, per device ID, the pod it was last steered to.
	last map[string]*corev1.Pod
	// quietUntil is when fresh may be asked again after a fresh list
	// found no pod the request fits.
	quietUntil time.Time
}

// freshBackoff spaces the fresh lists that find nothing: a node's pods
// placed by other schedulers never match, and must not cost each of their
// admissions a request to the API server. A fresh list that finds the
// pod leaves the next one free to run at once.
const freshBackoff = time.Second

var (
	_ deviceplugin.Steerer = (*Steerer)(nil)
	_ deviceplugin.Limiter = (*Steerer)(nil)
	_ deviceplugin.Avoider = (*Steerer)(nil)
)

// New returns a Steerer. pods lists the pods bound to the node as a watch
// last showed them, in the order it showed them bound (the order the
// kubelet, watching the same, admits them in); fresh, when not nil, lists
// them from the API server, for a pod the kubelet admits before the watch
// shows it (after a list that found nothing, not again for a second); gpus
// is the node's GPU count, the bound of a choice's indexes.
func New(pods func() []*corev1.Pod, fresh func() ([]*corev1.Pod, error), gpus int, log *slog.Logger) *Steerer {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if pods == nil {
		pods = func() []*corev1.Pod { return nil }
	}
	return &Steerer{pods: pods, fresh: fresh, gpus: gpus, log: log, given: map[types.UID]map[string][]string{}, last: map[string]*corev1.Pod{}}
}

// Steer implements deviceplugin.Steerer.
func (s *Steerer) Steer(res *sharing.Resource, available, mustInclude []string, size int) ([]string, bool) {
	if size <= 0 {
		return nil, false
	}
	free := make(map[string]bool, len(available))
	for _, id := range available {
		free[id] = true
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if ids, ok := s.pick(s.pods(), res, free, mustInclude, size); ok {
		return ids, true
	}
	if s.fresh == nil || time.Now().Before(s.quietUntil) {
		return nil, false
	}
	// The kubelet may admit a pod before the watch shows it: a pod it
	// admits is bound, so a fresh list has it.
	pods, err := s.fresh()
	if err != nil {
		s.quietUntil = time.Now().Add(freshBackoff)
		s.log.Warn("listing the node's pods; the resource's preference decides", "err", err)
		return nil, false
	}
	ids, ok := s.pick(pods, res, free, mustInclude, size)
	if !ok {
		s.quietUntil = time.Now().Add(freshBackoff)
	}
	return ids, ok
}

// Avoid implements deviceplugin.Avoider: the GPUs that the choices of the
// pods gpuplane-scheduler placed on the node (running or awaiting
// admission) leave no room on for one more of res's devices. A whole GPU
// chosen for a pod has none, for a replica or for the GPU; a GPU
// time-sliced four ways whose chosen shares add up to more than three
// quarters has none for a replica. MIG choices name MIG devices, which
// are resources of their own, and are left out.
func (s *Steerer) Avoid(res *sharing.Resource) map[int]bool {
	s.mu.Lock()
	pods := s.pods()
	s.mu.Unlock()
	committed := map[int]int64{}
	for _, p := range pods {
		if p.DeletionTimestamp != nil || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		choice, err := gpupod.ParseGPUs(p.Annotations[gpupod.GPUsAnnotation], s.gpus)
		if err != nil {
			continue
		}
		for _, c := range choice {
			committed[c.Index] += c.ComputeMilli()
		}
	}
	var avoid map[int]bool
	for i := range res.Devices {
		d := &res.Devices[i]
		if d.MIG != nil || committed[d.GPUIndex] == 0 {
			continue
		}
		if committed[d.GPUIndex]+gpupod.MilliPerGPU/int64(max(d.Replicas, 1)) > gpupod.MilliPerGPU {
			if avoid == nil {
				avoid = map[int]bool{}
			}
			avoid[d.GPUIndex] = true
		}
	}
	return avoid
}

// pick finds, among pods, the one awaiting admission that the request
// fits, and hands it its devices.
func (s *Steerer) pick(pods []*corev1.Pod, res *sharing.Resource, free map[string]bool, mustInclude []string, size int) ([]string, bool) {
	waiting := awaiting(pods)
	s.forget(waiting)
	type candidate struct {
		pod  *corev1.Pod
		want []string
		rank int
	}
	var fits []candidate
	for _, p := range waiting {
		asks, total := containerAsks(p, res.Name)
		if asks != nil && total == 0 {
			continue // the pod does not ask for this resource
		}
		choice, err := gpupod.ParseGPUs(p.Annotations[gpupod.GPUsAnnotation], s.gpus)
		if err != nil {
			s.log.Debug("ignoring a pod's GPU choice", "pod", p.Namespace+"/"+p.Name, "err", err)
			continue
		}
		given := s.given[p.UID][res.Name]
		if len(given) > 0 && allIn(given, free) {
			given = nil // not allocated after all: awaiting admission again
			delete(s.given[p.UID], res.Name)
		}
		if asks != nil && int64(len(given)) >= total {
			continue // every container has its devices
		}
		want := wanted(res, choice, given, free)
		if len(want) >= size && allIn(mustInclude, setOf(want[:size])) {
			fits = append(fits, candidate{p, want, rank(asks, len(want), size)})
		}
	}
	if len(fits) == 0 {
		return nil, false
	}
	// The first in arrival order among the best-ranked (MinFunc keeps the
	// first of equals).
	best := slices.MinFunc(fits, func(a, b candidate) int { return cmp.Compare(a.rank, b.rank) })
	ids := slices.Clone(best.want[:size])
	if s.given[best.pod.UID] == nil {
		s.given[best.pod.UID] = map[string][]string{}
	}
	s.given[best.pod.UID][res.Name] = append(s.given[best.pod.UID][res.Name], ids...)
	for _, id := range ids {
		s.last[id] = best.pod
	}
	s.log.Debug("steering to the scheduler's choice", "pod", best.pod.Namespace+"/"+best.pod.Name, "resource", res.Name, "devices", ids)
	return ids, true
}

// Limits implements deviceplugin.Limiter: the part of a GPU asked for by
// the pod that ids were just steered to.
func (s *Steerer) Limits(res *sharing.Resource, ids []string) (milli, memoryMiB int64, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(ids) == 0 {
		return 0, 0, false
	}
	p := s.last[ids[0]]
	for _, id := range ids {
		if p == nil || s.last[id] != p {
			return 0, 0, false // not all steered to one pod
		}
	}
	f, asked, err := gpupod.ReadFraction(p.Annotations, limitsOf(p))
	if err != nil || !asked {
		return 0, 0, false
	}
	return f.Milli, f.MemoryMiB, true
}

// limitsOf sums the limits of a pod's containers (the fraction resources
// are asked as limits).
func limitsOf(p *corev1.Pod) corev1.ResourceList {
	out := corev1.ResourceList{}
	for _, c := range p.Spec.Containers {
		for name, q := range c.Resources.Limits {
			sum := out[name]
			sum.Add(q)
			out[name] = sum
		}
	}
	return out
}

// rank orders the pods a request of size fits: first those with a
// container asking exactly size, then (pods whose containers are not
// known) those whose remaining choice is exactly size, then the rest.
func rank(asks []int64, want, size int) int {
	switch {
	case slices.Contains(asks, int64(size)):
		return 0
	case asks == nil && want == size:
		return 1
	default:
		return 2
	}
}

// containerAsks lists how many of resource each of the pod's containers
// (init containers first) asks for, nil when the pod's containers are
// not known, and how many devices the pod holds in all: its containers'
// sum, or its largest init container's ask when that is more (the
// kubelet hands an init container's devices on to the containers after
// it).
func containerAsks(p *corev1.Pod, resource string) (asks []int64, total int64) {
	if len(p.Spec.InitContainers)+len(p.Spec.Containers) == 0 {
		return nil, 0
	}
	name := corev1.ResourceName(resource)
	ask := func(c *corev1.Container) int64 {
		q, ok := c.Resources.Limits[name]
		if !ok {
			q = c.Resources.Requests[name]
		}
		return q.Value()
	}
	asks = make([]int64, 0, len(p.Spec.InitContainers)+len(p.Spec.Containers))
	var init, apps int64
	for i := range p.Spec.InitContainers {
		n := ask(&p.Spec.InitContainers[i])
		asks = append(asks, n)
		init = max(init, n)
	}
	for i := range p.Spec.Containers {
		n := ask(&p.Spec.Containers[i])
		asks = append(asks, n)
		apps += n
	}
	return asks, max(init, apps)
}

// awaiting returns the pods that carry the scheduler's choice and may
// still be admitted: Pending and not being deleted, in the order given.
func awaiting(pods []*corev1.Pod) []*corev1.Pod {
	var out []*corev1.Pod
	for _, p := range pods {
		if _, ok := p.Annotations[gpupod.GPUsAnnotation]; !ok || p.DeletionTimestamp != nil ||
			(p.Status.Phase != corev1.PodPending && p.Status.Phase != "") {
			continue
		}
		out = append(out, p)
	}
	return out
}

// forget drops what was steered to pods no longer awaiting admission.
func (s *Steerer) forget(waiting []*corev1.Pod) {
	if len(s.given) == 0 {
		return
	}
	keep := make(map[types.UID]bool, len(waiting))
	for _, p := range waiting {
		keep[p.UID] = true
	}
	for uid := range s.given {
		if !keep[uid] {
			delete(s.given, uid)
		}
	}
}

// wanted lists the devices of res that the choice names and that are not
// handed out yet (not in given); nil when a device the choice needs is not
// free. Choices res does not serve are skipped. A whole GPU is its device,
// or on a resource of replicas its free replicas (at least one); a share of
// a GPU is as many replicas of it as its part of the GPU makes, rounded up
// (replicasIn); a MIG instance is a free MIG device of that
// many slices on the GPU. Replicas of several whole GPUs come one GPU at a
// time, round-robin, so that a request for fewer replicas than the choice
// offers spreads over the GPUs chosen.
func wanted(res *sharing.Resource, choice []gpupod.GPUChoice, given []string, free map[string]bool) []string {
	taken := setOf(given)
	var perGPU [][]string
	for _, c := range choice {
		need, upTo := 1, 1
		match := func(d *sharing.Device) bool { return d.GPUIndex == c.Index && d.MIG == nil }
		switch {
		case res.HasMIG():
			if c.MIGSlices == 0 {
				continue
			}
			match = func(d *sharing.Device) bool { return d.MIG.ParentIndex == c.Index && d.MIG.GPUSlices == c.MIGSlices }
		case c.MIGSlices > 0:
			continue
		case res.HasReplicas():
			if c.Whole() {
				upTo = len(res.Devices) // every free replica of the GPU
			} else {
				need = replicasIn(res, c)
				upTo = need
			}
		case !c.Whole():
			continue
		}
		got := 0
		for i := range res.Devices {
			if d := &res.Devices[i]; match(d) && taken[d.ID] {
				got++
			}
		}
		var ids []string
		for i := range res.Devices {
			d := &res.Devices[i]
			if got+len(ids) >= upTo {
				break
			}
			if match(d) && !taken[d.ID] && free[d.ID] {
				ids = append(ids, d.ID)
				taken[d.ID] = true
			}
		}
		if got+len(ids) < need {
			return nil // the choice's devices are not free: not this pod
		}
		perGPU = append(perGPU, ids)
	}
	var out []string
	for more := true; more; {
		more = false
		for k := range perGPU {
			if len(perGPU[k]) > 0 {
				out = append(out, perGPU[k][0])
				perGPU[k] = perGPU[k][1:]
				more = true
			}
		}
	}
	return out
}

// replicasIn is how many replicas of its GPU a share c is on res: its
// thousandths of the GPU in replicas of 1000/replicas each, rounded up
// (nvidia.com/gpu: 2 time-sliced 4 ways is "3:500", two replicas of GPU
// 3), at least one.
func replicasIn(res *sharing.Resource, c gpupod.GPUChoice) int {
	for i := range res.Devices {
		if d := &res.Devices[i]; d.GPUIndex == c.Index && d.MIG == nil && d.Replicas > 1 {
			return max(1, int((c.Milli*int64(d.Replicas)+gpupod.MilliPerGPU-1)/gpupod.MilliPerGPU))
		}
	}
	return 1
}

func setOf(ids []string) map[string]bool {
	m := make(map[string]bool, len(ids))
	for _, id := range ids {
		m[id] = true
	}
	return m
}

func allIn(ids []string, set map[string]bool) bool {
	for _, id := range ids {
		if !set[id] {
			return false
		}
	}
	return true
}
