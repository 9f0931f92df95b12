package nodesim

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/resourceclaim"
	drapb "k8s.io/kubelet/pkg/apis/dra/v1"

	apidra "github.com/gpuplane/gpuplane/api/dra"
)

// claimNotReadyError says a pod's claims cannot be prepared (yet); the pod
// stays Pending with a FailedPrepareDynamicResources event of this
// message and is tried again, as the kubelet does.
type claimNotReadyError struct{ msg string }

func (e *claimNotReadyError) Error() string { return e.msg }

// prepareFailed is the event message of a failed prepare, worded as the
// kubelet's (its DRA manager's error, wrapped by the manager and the
// runtime manager).
func prepareFailed(format string, args ...any) error {
	return &claimNotReadyError{"Failed to prepare dynamic resources: prepare dynamic resources: " + fmt.Sprintf(format, args...)}
}

// podClaim is one claim a pod uses: its reference name in the pod and the
// claim's name.
type podClaim struct {
	ref, name string
	// mustCheckOwner is set for claims made from a template, which
	// must be owned by the pod.
	mustCheckOwner bool
}

// podClaimNames are the claims a pod uses, resolved as the kubelet does
// (resourceclaim.Name): by name, from templates through the pod's status
// (skipped when the status says no claim was needed), and the claim of
// its extended resources.
func podClaimNames(pod *corev1.Pod) ([]podClaim, error) {
	var out []podClaim
	for i := range pod.Spec.ResourceClaims {
		rc := &pod.Spec.ResourceClaims[i]
		name, mustCheckOwner, err := resourceclaim.Name(pod, rc)
		if err != nil {
			return nil, err
		}
		if name != nil {
			out = append(out, podClaim{ref: rc.Name, name: *name, mustCheckOwner: mustCheckOwner})
		}
	}
	if st := pod.Status.ExtendedResourceClaimStatus; st != nil && st.ResourceClaimName != "" {
		out = append(out, podClaim{ref: st.ResourceClaimName, name: st.ResourceClaimName})
	}
	return out, nil
}

// prepareClaims prepares a pod's claims before its containers start, as
// the kubelet's DRA manager (pkg/kubelet/cm/dra) does:
//
//  1. validate without changing anything: every claim exists, is owned
//     by the pod when made from a template, is reserved for the pod and
//     allocated, and every driver of its allocation is registered;
//  2. record the pod as a user of each claim, so that its removal
//     unprepares them even when prepare fails below;
//  3. call NodePrepareResources once per driver for the claims no other
//     pod had prepared, and keep the CDI devices each answers;
//  4. record the CDI devices on the pod (api/dra.PodClaimsAnnotation).
//
// It returns the pod as that write answered it, or as given when it has no
// claims or they failed.
func (s *Simulator) prepareClaims(ctx context.Context, key string, pod *corev1.Pod) (*corev1.Pod, error) {
	names, err := podClaimNames(pod)
	if err != nil {
		return pod, prepareFailed("%v", err)
	}
	if len(names) == 0 {
		return pod, nil
	}
	// 1. Validate.
	claims := make([]*resourceapi.ResourceClaim, len(names))
	for i, n := range names {
		c, err := s.client.ResourceV1().ResourceClaims(pod.Namespace).Get(ctx, n.name, metav1.GetOptions{})
		if err != nil {
			return pod, prepareFailed("fetch ResourceClaim %s: %v", n.name, err)
		}
		if n.mustCheckOwner {
			if err := resourceclaim.IsForPod(pod, c, false); err != nil {
				return pod, prepareFailed("%v", err)
			}
		}
		if !resourceclaim.IsReservedForPod(pod, c, false) {
			return pod, prepareFailed("pod %s (%s) is not allowed to use ResourceClaim %s (%s)", pod.Name, pod.UID, n.name, c.UID)
		}
		if c.Status.Allocation == nil {
			return pod, prepareFailed("ResourceClaim %s: not allocated", c.Name)
		}
		for _, drv := range claimDrivers(c) {
			s.dra.mu.Lock()
			p := s.dra.plugins[drv]
			s.dra.mu.Unlock()
			if p == nil {
				return pod, prepareFailed("DRA driver %s is not registered", drv)
			}
		}
		claims[i] = c
	}
	// 2. Record the pod's use of each claim; batch those to prepare.
	batches := map[string][]*drapb.Claim{}
	s.dra.mu.Lock()
	for _, c := range claims {
		info := s.dra.claims[c.UID]
		if info == nil {
			info = &claimInfo{namespace: c.Namespace, name: c.Name, drivers: claimDrivers(c), pods: map[string]bool{}}
			s.dra.claims[c.UID] = info
		}
		info.pods[key] = true
		if !slices.Contains(s.dra.podClaims[key], c.UID) {
			s.dra.podClaims[key] = append(s.dra.podClaims[key], c.UID)
		}
		if info.prepared {
			continue
		}
		for _, drv := range info.drivers {
			batches[drv] = append(batches[drv], &drapb.Claim{Namespace: c.Namespace, Name: c.Name, Uid: string(c.UID)})
		}
	}
	s.dra.mu.Unlock()
	// 3. Prepare, one call per driver.
	answered := map[types.UID][]string{}
	for _, drv := range slices.Sorted(maps.Keys(batches)) {
		devices, err := s.prepareWith(ctx, drv, batches[drv])
		if err != nil {
			return pod, err
		}
		for uid, ids := range devices {
			answered[uid] = append(answered[uid], ids...)
		}
	}
	recorded := map[string][]string{}
	s.dra.mu.Lock()
	for uid, ids := range answered {
		if info := s.dra.claims[uid]; info != nil && !info.prepared {
			info.devices, info.prepared = ids, true
		}
	}
	for i, c := range claims {
		if info := s.dra.claims[c.UID]; info != nil {
			recorded[names[i].ref] = slices.Clone(info.devices)
		}
	}
	s.dra.mu.Unlock()
	// 4. Record the devices on the pod.
	raw, err := json.Marshal(recorded)
	if err != nil {
		return pod, err
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{
		"annotations": map[string]string{apidra.PodClaimsAnnotation: string(raw)},
		"uid":         pod.UID,
	}})
	if err != nil {
		return pod, err
	}
	patched, err := s.client.CoreV1().Pods(pod.Namespace).Patch(ctx, pod.Name, types.MergePatchType, patch, metav1.PatchOptions{})
	if err != nil {
		return pod, fmt.Errorf("recording the prepared claims on pod %s: %w", key, err)
	}
	s.log.Info("claims prepared", "pod", key, "devices", string(raw))
	return patched, nil
}

// prepareWith calls one driver's NodePrepareResources for claims and
// returns each claim's CDI devices; any claim's error fails the pod, with
// the driver's reason.
func (s *Simulator) prepareWith(ctx context.Context, drv string, claims []*drapb.Claim) (map[types.UID][]string, error) {
	s.dra.mu.Lock()
	p := s.dra.plugins[drv]
	s.dra.mu.Unlock()
	if p == nil {
		return nil, prepareFailed("DRA driver %s is not registered", drv)
	}
	cctx, cancel := context.WithTimeout(ctx, 45*time.Second)
	defer cancel()
	resp, err := p.client.NodePrepareResources(cctx, &drapb.NodePrepareResourcesRequest{Claims: claims})
	if err != nil {
		return nil, prepareFailed("NodePrepareResources: %v", err)
	}
	out := map[types.UID][]string{}
	for uid, r := range resp.GetClaims() {
		i := slices.IndexFunc(claims, func(c *drapb.Claim) bool { return c.Uid == uid })
		if i < 0 {
			return nil, prepareFailed("NodePrepareResources returned result for unknown claim UID %s", uid)
		}
		if r.GetError() != "" {
			return nil, prepareFailed("NodePrepareResources failed for ResourceClaim %s: %s", claims[i].Name, r.GetError())
		}
		var ids []string
		for _, d := range r.GetDevices() {
			ids = append(ids, d.GetCdiDeviceIds()...)
		}
		out[types.UID(uid)] = ids
	}
	if n := len(claims) - len(resp.GetClaims()); n != 0 {
		return nil, prepareFailed("NodePrepareResources skipped %d ResourceClaims", n)
	}
	return out, nil
}

// claimDrivers are the drivers of a claim's allocation, sorted.
func claimDrivers(c *resourceapi.ResourceClaim) []string {
	var out []string
	for _, r := range c.Status.Allocation.Devices.Results {
		if !slices.Contains(out, r.Driver) {
			out = append(out, r.Driver)
		}
	}
	slices.Sort(out)
	return out
}

// releaseClaims is called once an ended pod's containers are gone: a
// claim another pod still uses only loses the pod; the others are
// unprepared, as the kubelet does.
func (s *Simulator) releaseClaims(key string) {
	s.dra.mu.Lock()
	for _, uid := range s.dra.podClaims[key] {
		info := s.dra.claims[uid]
		if info == nil {
			continue
		}
		if len(info.pods) > 1 {
			delete(info.pods, key)
			continue
		}
		info.ended, info.left, info.nextTry = key, slices.Clone(info.drivers), time.Time{}
	}
	delete(s.dra.podClaims, key)
	s.dra.mu.Unlock()
	s.unprepareDue()
}

// unprepareDue calls NodeUnprepareResources for every claim waiting for it
// whose retry time has come; a driver that fails (not registered,
// restarting) is asked again with backoff. A claim another pod has taken
// up meanwhile only loses the ended pod.
func (s *Simulator) unprepareDue() {
	now := time.Now()
	type due struct {
		uid  types.UID
		info claimInfo
	}
	var todo []due
	s.dra.mu.Lock()
	for uid, info := range s.dra.claims {
		if info.ended == "" || now.Before(info.nextTry) {
			continue
		}
		if len(info.pods) > 1 {
			delete(info.pods, info.ended)
			info.ended, info.left = "", nil
			continue
		}
		todo = append(todo, due{uid, *info})
	}
	s.dra.mu.Unlock()
	for _, d := range todo {
		var left []string
		var errs []error
		for _, drv := range d.info.left {
			if err := s.unprepareOne(d.uid, d.info, drv); err != nil {
				errs = append(errs, err)
				left = append(left, drv)
				continue
			}
			s.log.Info("claim unprepared", "claim", d.info.namespace+"/"+d.info.name, "driver", drv)
		}
		s.dra.mu.Lock()
		info := s.dra.claims[d.uid]
		switch {
		case info == nil:
		case len(left) == 0:
			delete(s.dra.claims, d.uid)
		default:
			s.log.Warn("NodeUnprepareResources; retrying", "claim", d.info.namespace+"/"+d.info.name, "err", errors.Join(errs...))
			info.left, info.attempts = left, info.attempts+1
			info.nextTry = time.Now().Add(min(time.Duration(1<<min(info.attempts, 5))*250*time.Millisecond, 8*time.Second))
		}
		s.dra.mu.Unlock()
	}
}

func (s *Simulator) unprepareOne(uid types.UID, info claimInfo, drv string) error {
	s.dra.mu.Lock()
	p := s.dra.plugins[drv]
	s.dra.mu.Unlock()
	if p == nil {
		return fmt.Errorf("DRA driver %s is not registered", drv)
	}
	ctx, cancel := context.WithTimeout(s.ctx, 45*time.Second)
	defer cancel()
	resp, err := p.client.NodeUnprepareResources(ctx, &drapb.NodeUnprepareResourcesRequest{Claims: []*drapb.Claim{{Namespace: info.namespace, Name: info.name, Uid: string(uid)}}})
	if err != nil {
		return fmt.Errorf("NodeUnprepareResources: %w", err)
	}
	r, ok := resp.GetClaims()[string(uid)]
	if !ok {
		return fmt.Errorf("NodeUnprepareResources skipped ResourceClaim %s", info.name)
	}
	if r.GetError() != "" {
		return fmt.Errorf("NodeUnprepareResources failed for ResourceClaim %s: %s", info.name, r.GetError())
	}
	return nil
}
