package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/gpuplane/gpuplane/internal/dra"
	"github.com/gpuplane/gpuplane/internal/gpu"
	"github.com/gpuplane/gpuplane/internal/ledger"
	"github.com/gpuplane/gpuplane/internal/mig"
	"github.com/gpuplane/gpuplane/internal/quarantine"
)

// draLink is what the MIG reconciler and the quarantine need of the DRA
// driver when both run on a node: who holds prepared claims on a GPU
// (the ledger says which claims, the claim's status.reservedFor which
// pods, as the kubelet runs only the pods listed there), which MIG
// instances belong to claims, and the driver's own withdraw and refresh.
// Its methods do nothing while the DRA driver is off (driver nil).
type draLink struct {
	driver *dra.Driver
	ledger *ledger.Ledger
	gpus   gpu.Inventory
	client kubernetes.Interface

	mu sync.Mutex
	// uuids are the GPUs' UUIDs by index.
	uuids map[int]string
}

func (l *draLink) on() bool { return l != nil && l.driver != nil }

// claimHolder is a pod that uses a prepared claim on a GPU, or (Name
// empty) a prepared claim no pod uses any more, which the kubelet is about
// to unprepare.
type claimHolder struct {
	Namespace, Name, UID string
	// Claim is the claim's name, in Namespace.
	Claim string
}

// newDRALink is a draLink over the node's GPUs, as read at start; the
// DRA driver's side is set once it is built.
func newDRALink(gpus gpu.Inventory, devices []gpu.Device) *draLink {
	l := &draLink{gpus: gpus, uuids: map[int]string{}}
	for _, d := range devices {
		l.uuids[d.Index] = d.UUID
	}
	return l
}

// gpuUUID is the UUID of the GPU at index. The GPUs are read again only
// for an index not known yet: a GPU that fell off the bus no longer
// answers, and its quarantine must still find the claims on it.
func (l *draLink) gpuUUID(ctx context.Context, index int) (string, bool, error) {
	l.mu.Lock()
	u, ok := l.uuids[index]
	l.mu.Unlock()
	if ok {
		return u, true, nil
	}
	devs, err := l.gpus.Devices(ctx)
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.uuids == nil {
		l.uuids = map[int]string{}
	}
	for _, d := range devs {
		l.uuids[d.Index] = d.UUID
	}
	if u, ok := l.uuids[index]; ok {
		return u, true, nil
	}
	if err != nil {
		return "", false, fmt.Errorf("listing GPUs: %w", err)
	}
	return "", false, nil
}

// holders lists who holds prepared claims on GPU index.
func (l *draLink) holders(ctx context.Context, index int) ([]claimHolder, error) {
	if !l.on() {
		return nil, nil
	}
	uuid, ok, err := l.gpuUUID(ctx, index)
	if err != nil || !ok {
		return nil, err
	}
	var out []claimHolder
	for _, uid := range l.ledger.ClaimsOn(uuid) {
		ref, ok := l.driver.PreparedClaim(uid)
		if !ok {
			// Held by a claim whose prepare has not recorded it yet:
			// it will be, so it counts as held by a claim alone.
			out = append(out, claimHolder{Claim: "uid " + uid})
			continue
		}
		pods, err := l.consumers(ctx, ref)
		if err != nil {
			return nil, err
		}
		if len(pods) == 0 {
			out = append(out, claimHolder{Namespace: ref.Namespace, Claim: ref.Name})
		}
		out = append(out, pods...)
	}
	return out, nil
}

// consumers are the pods in a claim's status.reservedFor.
func (l *draLink) consumers(ctx context.Context, ref dra.ClaimRef) ([]claimHolder, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	c, err := l.client.ResourceV1().ResourceClaims(ref.Namespace).Get(ctx, ref.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("reading ResourceClaim %s/%s to find its pods: %w", ref.Namespace, ref.Name, err)
	case string(c.UID) != ref.UID:
		// A new claim of the same name: the prepared one is gone.
		return nil, nil
	}
	var out []claimHolder
	for _, r := range c.Status.ReservedFor {
		if r.APIGroup == "" && r.Resource == "pods" {
			out = append(out, claimHolder{Namespace: ref.Namespace, Name: r.Name, UID: string(r.UID), Claim: ref.Name})
		}
	}
	return out, nil
}

// migPodsOn adds to pods (the device plugin's, by PodResources) the pods
// and claims holding prepared claims on the given GPUs.
func (l *draLink) migPodsOn(ctx context.Context, gpus map[int]bool, pods []mig.Pod) ([]mig.Pod, error) {
	if !l.on() {
		return pods, nil
	}
	at := map[string]int{}
	for i, p := range pods {
		at[p.Namespace+"/"+p.Name] = i
	}
	indices := make([]int, 0, len(gpus))
	for g, ok := range gpus {
		if ok {
			indices = append(indices, g)
		}
	}
	sort.Ints(indices)
	for _, g := range indices {
		hs, err := l.holders(ctx, g)
		if err != nil {
			return nil, err
		}
		for _, h := range hs {
			key := h.Namespace + "/" + h.Name
			if h.Name == "" {
				key = "claim " + h.Namespace + "/" + h.Claim
			}
			i, ok := at[key]
			if !ok {
				i = len(pods)
				at[key] = i
				pods = append(pods, mig.Pod{Namespace: h.Namespace, Name: h.Name, UID: h.UID})
			}
			p := &pods[i]
			if p.UID == "" {
				p.UID = h.UID
			}
			if !slices.Contains(p.GPUs, g) {
				p.GPUs = append(p.GPUs, g)
				sort.Ints(p.GPUs)
			}
			if !slices.Contains(p.Claims, h.Claim) {
				p.Claims = append(p.Claims, h.Claim)
			}
		}
	}
	return pods, nil
}

// migDevices is mig.Devices over the device plugin's gate and the DRA
// driver: a GPU being re-partitioned is withdrawn from both, and both
// advertise its new devices.
type migDevices struct {
	gate *migGate
	link *draLink
	log  *slog.Logger
}

var _ mig.Devices = migDevices{}

// Withdraw implements mig.Devices. When GPUs come back, the driver reads
// them again before it lifts their taint, so that no claim is allocated a
// device of the layout they no longer have.
func (m migDevices) Withdraw(gpus []int) {
	m.gate.Withdraw(gpus)
	if !m.link.on() {
		return
	}
	if len(gpus) == 0 && len(m.link.driver.Withdrawn()) > 0 {
		ctx, cancel := context.WithTimeout(context.Background(), migRefreshTimeout)
		if err := m.link.driver.Refresh(ctx); err != nil {
			// Lifting the taint anyway: a device that is gone fails at
			// prepare with "its ResourceSlice is out of date".
			m.log.Warn("the DRA driver could not read the GPUs again", "err", err)
		}
		cancel()
	}
	m.link.driver.Withdraw(gpus)
}

// Refresh implements mig.Devices.
func (m migDevices) Refresh(ctx context.Context) error {
	err := m.gate.Refresh(ctx)
	if m.link.on() {
		err = errors.Join(err, m.link.driver.Refresh(ctx))
	}
	return err
}

// claimGuard is the MIG reconciler's view of the GPUs with the DRA
// driver on: the MIG instances the driver created for claims (dynamic MIG)
// are the claims', not the GPU's layout, so they are left out of what the
// reconciler reads (a claim's instance is no drift to put back), and
// destroying one, or leaving MIG mode under one, is refused.
type claimGuard struct {
	mig.Hardware
	link *draLink
}

var _ mig.Hardware = claimGuard{}

// ErrClaimInstance is wrapped when the MIG reconciler would destroy a MIG
// instance a prepared ResourceClaim uses.
var ErrClaimInstance = errors.New("the MIG instance belongs to a prepared ResourceClaim")

func (h claimGuard) claimed(index int) map[int]string {
	if !h.link.on() {
		return nil
	}
	return h.link.driver.CreatedInstances(index)
}

// Devices implements gpu.Inventory without the claims' MIG devices.
func (h claimGuard) Devices(ctx context.Context) ([]gpu.Device, error) {
	devs, err := h.Hardware.Devices(ctx)
	if !h.link.on() {
		return devs, err
	}
	for i := range devs {
		c := h.claimed(devs[i].Index)
		if len(c) == 0 {
			continue
		}
		devs[i].MIGDevices = slices.DeleteFunc(slices.Clone(devs[i].MIGDevices), func(m gpu.MIGDevice) bool {
			_, ok := c[m.GPUInstanceID]
			return ok
		})
	}
	return devs, err
}

// GPUInstances implements gpu.MIGManager without the claims' instances.
func (h claimGuard) GPUInstances(ctx context.Context, index int) ([]gpu.GPUInstance, error) {
	gis, err := h.Hardware.GPUInstances(ctx, index)
	if c := h.claimed(index); len(c) > 0 {
		gis = slices.DeleteFunc(gis, func(gi gpu.GPUInstance) bool {
			_, ok := c[gi.ID]
			return ok
		})
	}
	return gis, err
}

func (h claimGuard) refuse(index, gi int) error {
	if uid, ok := h.claimed(index)[gi]; ok {
		name := "uid " + uid
		if ref, ok := h.link.driver.PreparedClaim(uid); ok {
			name = ref.Namespace + "/" + ref.Name
		}
		return fmt.Errorf("GPU %d: GPU instance %d: %w %s", index, gi, ErrClaimInstance, name)
	}
	return nil
}

// DestroyComputeInstance implements gpu.MIGManager, refusing a claim's.
func (h claimGuard) DestroyComputeInstance(ctx context.Context, index, gi, ci int) error {
	if err := h.refuse(index, gi); err != nil {
		return err
	}
	return h.Hardware.DestroyComputeInstance(ctx, index, gi, ci)
}

// DestroyGPUInstance implements gpu.MIGManager, refusing a claim's.
func (h claimGuard) DestroyGPUInstance(ctx context.Context, index, gi int) error {
	if err := h.refuse(index, gi); err != nil {
		return err
	}
	return h.Hardware.DestroyGPUInstance(ctx, index, gi)
}

// SetMIGMode implements gpu.MIGManager, refusing to leave MIG mode while
// a claim's instance is on the GPU.
func (h claimGuard) SetMIGMode(ctx context.Context, index int, enabled bool) error {
	if !enabled {
		for gi := range h.claimed(index) {
			if err := h.refuse(index, gi); err != nil {
				return err
			}
		}
	}
	return h.Hardware.SetMIGMode(ctx, index, enabled)
}

// inventory is the DRA driver's view of the GPUs, for the quarantine to
// read again after a GPU's reset (quarantine.Options.Inventory); nil while
// the driver is off.
func (l *draLink) inventory() quarantine.Inventory {
	if !l.on() {
		return nil
	}
	return l.driver
}

// quarantinePods lists the pods using prepared claims on GPU index, for
// the quarantine to evict (quarantine.KubePods.SetClaimPods). A claim no
// pod uses has nothing to evict and is left to the kubelet.
func (l *draLink) quarantinePods(ctx context.Context, index int) ([]quarantine.PodRef, error) {
	hs, err := l.holders(ctx, index)
	if err != nil {
		return nil, err
	}
	var out []quarantine.PodRef
	for _, h := range hs {
		if h.Name != "" {
			out = append(out, quarantine.PodRef{Namespace: h.Namespace, Name: h.Name, UID: types.UID(h.UID)})
		}
	}
	return out, nil
}
