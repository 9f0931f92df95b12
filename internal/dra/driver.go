package dra

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/dynamic-resource-allocation/resourceslice"

	apidra "github.com/gpuplane/gpuplane/api/dra"
	"github.com/gpuplane/gpuplane/internal/cdi"
	"github.com/gpuplane/gpuplane/internal/gpu"
	"github.com/gpuplane/gpuplane/internal/ledger"
	"github.com/gpuplane/gpuplane/internal/mps"
)

// HealthSource says whether a GPU or MIG device (by UUID) is healthy, and
// why not. The agent's health monitor answers it.
type HealthSource interface {
	Unhealthy(uuid string) (reason string, unhealthy bool)
}

// Options configure a Driver.
type Options struct {
	// Backend is the node's GPUs; MIG instances are created through it.
	Backend gpu.Backend
	// NodeName names the pool and the Node owning the ResourceSlices.
	NodeName string
	// CDI writes the claims' CDI specs.
	CDI *cdi.Writer
	// StateFile is the checkpoint of prepared claims; required.
	StateFile string
	// Ledger is the node's record of held devices, shared with the device
	// plugin; a new one when nil.
	Ledger *ledger.Ledger
	// Health, when set, taints unhealthy devices.
	Health HealthSource
	// PCIeRoot finds a GPU's PCIe root complex; nil derives it from the
	// GPU topology.
	PCIeRoot PCIeRootFunc
	// MPSRoot holds the per-claim MPS pipe and log directories; claims
	// configured for MPS are refused without it.
	MPSRoot string
	// MPSRunner starts the claims' MPS control daemons; nil runs the real
	// nvidia-cuda-mps-control.
	MPSRunner mps.Runner
	// SharedGPUs publishes whole GPUs for consumable capacity (several
	// claims each with part of a GPU's memory and compute) instead of
	// one claim per GPU.
	SharedGPUs bool
	Logger     *slog.Logger
}

// Driver is the DRA driver of one node. It implements
// kubeletplugin.DRAPlugin.
type Driver struct {
	o   Options
	log *slog.Logger
	inv *inventory

	mu    sync.Mutex
	state *checkpoint
	// created maps a GPU index to the placements of MIG instances this
	// driver made for claims, so that the layout taint ignores them.
	created map[int][]gpu.Placement
	// published is the fingerprint of the last published taints.
	published string
	// daemons are the claims' MPS control daemons.
	daemons *daemons
	// withdrawn are the GPUs whose MIG layout the agent is changing: their
	// devices are tainted and no claim on them is prepared (Withdraw).
	withdrawn map[int]bool
	// republish receives when the inventory was rebuilt (Refresh).
	republish chan struct{}
	// dropped is the last set of features the API server dropped the
	// fields of (HandleError), so that it is said once, not at every retry.
	dropped string
}

var _ kubeletplugin.DRAPlugin = (*Driver)(nil)

// New reads the GPUs, loads the checkpoint and brings the node in line with
// it: claims caught half-prepared are rolled back, MIG instances of prepared
// claims that are gone (the GPU was reset) are made again, and the ledger
// holds what the prepared claims use.
func New(ctx context.Context, o Options) (*Driver, error) {
	switch {
	case o.Backend == nil:
		return nil, errors.New("dra driver: no GPU backend")
	case o.NodeName == "":
		return nil, errors.New("dra driver: no node name")
	case o.StateFile == "":
		return nil, errors.New("dra driver: no state file")
	case o.CDI == nil:
		return nil, errors.New("dra driver: no CDI writer")
	}
	if o.Ledger == nil {
		o.Ledger = ledger.New()
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if err := os.MkdirAll(filepath.Dir(o.StateFile), 0o750); err != nil {
		return nil, fmt.Errorf("creating the DRA state directory: %w", err)
	}
	state, err := loadCheckpoint(o.StateFile)
	if err != nil {
		return nil, err
	}
	d := &Driver{o: o, log: o.Logger, state: state, created: map[int][]gpu.Placement{}, daemons: newDaemons(), withdrawn: map[int]bool{}, republish: make(chan struct{}, 1)}
	if err := d.restore(ctx); err != nil {
		d.Close()
		return nil, err
	}
	// The inventory is read after restore, so that instances made for
	// claims are not mistaken for the GPU's static layout.
	if d.inv, err = buildInventory(ctx, o.Backend, o.PCIeRoot, d.created); err != nil {
		d.Close()
		return nil, err
	}
	if o.SharedGPUs {
		d.inv.shareGPUs()
	}
	return d, nil
}

// restore rolls back half-prepared claims and re-holds prepared ones.
func (d *Driver) restore(ctx context.Context) error {
	changed := false
	for uid, pc := range d.state.Claims {
		if pc.State == statePreparing {
			d.log.Info("rolling back a claim whose prepare did not finish", "claim", pc.Namespace+"/"+pc.Name, "uid", uid)
			d.rollback(ctx, uid, pc)
			delete(d.state.Claims, uid)
			changed = true
			continue
		}
		var holds []ledger.Hold
		for i := range pc.Devices {
			dev := &pc.Devices[i]
			if m := dev.MIG; m != nil && m.Created {
				if err := d.ensureMIG(ctx, dev); err != nil {
					return fmt.Errorf("restoring the MIG device of claim %s/%s: %w", pc.Namespace, pc.Name, err)
				}
				changed = true
				d.created[m.GPUIndex] = append(d.created[m.GPUIndex], gpu.Placement{Start: m.PlacementStart, Size: m.PlacementSize})
			}
			if dev.UUID != "" {
				holds = append(holds, d.hold(dev))
			}
		}
		if err := d.o.Ledger.Hold(uid, holds); err != nil {
			return fmt.Errorf("claim %s/%s was prepared before the restart: %w", pc.Namespace, pc.Name, err)
		}
		// Time slices are set again (a GPU reset drops them) and MPS
		// control daemons started again.
		if err := d.startSharing(ctx, uid, pc); err != nil {
			d.log.Warn("restoring the sharing of a prepared claim", "claim", pc.Namespace+"/"+pc.Name, "err", err)
		}
	}
	// CDI specs of claims that are not prepared: a crash between writing
	// one and the checkpoint.
	uids, err := d.o.CDI.ClaimSpecUIDs()
	if err != nil {
		return err
	}
	for _, uid := range uids {
		if pc, ok := d.state.Claims[uid]; !ok || pc.State != statePrepared {
			d.log.Info("removing the CDI spec of a claim that is not prepared", "uid", uid)
			if err := d.o.CDI.RemoveClaim(uid); err != nil {
				return err
			}
		}
	}
	if changed {
		return d.state.save(d.o.StateFile)
	}
	return nil
}

// ensureMIG makes sure the MIG instance a prepared claim uses exists, and
// creates it again at its placement when it does not.
func (d *Driver) ensureMIG(ctx context.Context, dev *preparedDevice) error {
	m := dev.MIG
	gis, err := d.o.Backend.GPUInstances(ctx, m.GPUIndex)
	if err != nil {
		return err
	}
	for _, gi := range gis {
		if gi.ID == m.GPUInstanceID && gi.Placement.Start == m.PlacementStart && gi.Placement.Size == m.PlacementSize {
			return nil
		}
	}
	return d.createMIG(ctx, dev)
}

// hold is the ledger's record of a prepared device. A MIG device not yet
// created is held under a name of its placement until it has a UUID.
func (d *Driver) hold(dv *preparedDevice) ledger.Hold {
	if dv.MIG == nil {
		return dv.Share.hold(dv.UUID)
	}
	gpuUUID := d.gpuUUID(dv.MIG.GPUIndex)
	if dv.UUID == "" {
		return ledger.Hold{Device: fmt.Sprintf("%s/mig-%d-%d", gpuUUID, dv.MIG.PlacementStart, dv.MIG.PlacementSize), GPU: gpuUUID}
	}
	return ledger.Hold{Device: dv.UUID, GPU: gpuUUID}
}

func (d *Driver) gpuUUID(index int) string {
	if d.inv != nil {
		for _, g := range d.inv.gpus {
			if g.Index == index {
				return g.UUID
			}
		}
	}
	gpus, err := d.o.Backend.Devices(context.Background())
	if err == nil {
		for _, g := range gpus {
			if g.Index == index {
				return g.UUID
			}
		}
	}
	return fmt.Sprintf("gpu-%d", index)
}

// createMIG creates a GPU instance and one compute instance spanning it,
// and records their IDs and the MIG device's UUID in dev.
func (d *Driver) createMIG(ctx context.Context, dev *preparedDevice) error {
	m := dev.MIG
	pl := gpu.Placement{Start: m.PlacementStart, Size: m.PlacementSize}
	gi, err := d.o.Backend.CreateGPUInstance(ctx, m.GPUIndex, m.Profile, &pl)
	if err != nil {
		return fmt.Errorf("creating MIG %s at %d:%d on GPU %d: %w", m.Profile, pl.Start, pl.Size, m.GPUIndex, err)
	}
	ci, err := d.o.Backend.CreateComputeInstance(ctx, m.GPUIndex, gi.ID, "")
	if err != nil {
		_ = d.o.Backend.DestroyGPUInstance(ctx, m.GPUIndex, gi.ID)
		return fmt.Errorf("creating the compute instance of MIG %s on GPU %d: %w", m.Profile, m.GPUIndex, err)
	}
	m.GPUInstanceID, m.ComputeInstanceID, m.Created = gi.ID, ci.ID, true
	dev.UUID = ci.UUID
	return nil
}

// destroyMIG destroys an instance the driver created; one that is gone
// already is not an error.
func (d *Driver) destroyMIG(ctx context.Context, m *preparedMIG) error {
	if err := d.o.Backend.DestroyComputeInstance(ctx, m.GPUIndex, m.GPUInstanceID, m.ComputeInstanceID); err != nil && !errors.Is(err, gpu.ErrNotFound) {
		return fmt.Errorf("destroying MIG compute instance %d/%d on GPU %d: %w", m.GPUInstanceID, m.ComputeInstanceID, m.GPUIndex, err)
	}
	if err := d.o.Backend.DestroyGPUInstance(ctx, m.GPUIndex, m.GPUInstanceID); err != nil && !errors.Is(err, gpu.ErrNotFound) {
		return fmt.Errorf("destroying MIG GPU instance %d on GPU %d: %w", m.GPUInstanceID, m.GPUIndex, err)
	}
	return nil
}

// rollback undoes whatever a half-prepared claim may have done: a created
// MIG instance at its placement, its CDI spec, its ledger holds.
func (d *Driver) rollback(ctx context.Context, uid string, pc *preparedClaim) {
	if err := d.stopSharing(ctx, uid, pc); err != nil {
		d.log.Warn("rolling back a claim's sharing", "claim", uid, "err", err)
	}
	for i := range pc.Devices {
		m := pc.Devices[i].MIG
		if m == nil || m.Created {
			if m != nil {
				if err := d.destroyMIG(ctx, m); err != nil {
					d.log.Warn("rolling back a MIG instance", "claim", uid, "err", err)
				}
			}
			continue
		}
		// The crash may have come between creating the instance and
		// recording its IDs: destroy whatever sits at its placement,
		// unless a prepared claim uses it.
		gis, err := d.o.Backend.GPUInstances(ctx, m.GPUIndex)
		if err != nil {
			continue
		}
		for _, gi := range gis {
			if gi.Placement.Start == m.PlacementStart && gi.Placement.Size == m.PlacementSize && gi.Profile == m.Profile && !d.usedByPrepared(m.GPUIndex, gi.ID) {
				_ = d.destroyMIG(ctx, &preparedMIG{GPUIndex: m.GPUIndex, GPUInstanceID: gi.ID})
			}
		}
	}
	if err := d.o.CDI.RemoveClaim(uid); err != nil {
		d.log.Warn("rolling back a CDI spec", "claim", uid, "err", err)
	}
	d.o.Ledger.ReleaseClaim(uid)
}

func (d *Driver) usedByPrepared(index, giID int) bool {
	for _, pc := range d.state.Claims {
		if pc.State != statePrepared {
			continue
		}
		for _, dev := range pc.Devices {
			if m := dev.MIG; m != nil && m.GPUIndex == index && m.GPUInstanceID == giID {
				return true
			}
		}
	}
	return false
}

// PrepareResourceClaims implements kubeletplugin.DRAPlugin.
func (d *Driver) PrepareResourceClaims(ctx context.Context, claims []*resourceapi.ResourceClaim) (map[types.UID]kubeletplugin.PrepareResult, error) {
	out := make(map[types.UID]kubeletplugin.PrepareResult, len(claims))
	for _, c := range claims {
		devs, err := d.prepare(ctx, c)
		if err != nil {
			d.log.Warn("preparing a claim failed", "claim", c.Namespace+"/"+c.Name, "uid", c.UID, "err", err)
		}
		out[c.UID] = kubeletplugin.PrepareResult{Err: err, Devices: devs}
	}
	return out, nil
}

// UnprepareResourceClaims implements kubeletplugin.DRAPlugin.
func (d *Driver) UnprepareResourceClaims(ctx context.Context, claims []kubeletplugin.NamespacedObject) (map[types.UID]error, error) {
	out := make(map[types.UID]error, len(claims))
	for _, c := range claims {
		out[c.UID] = d.unprepare(ctx, string(c.UID))
	}
	return out, nil
}

// HandleError implements kubeletplugin.DRAPlugin: errors of publishing
// are logged; the helper retries them. Fields the API server dropped
// because a feature gate is off on this cluster (Kubernetes 1.34 and 1.35
// keep partitionable devices, consumable capacity and device taints
// alpha) are said once per set of features, as a warning naming them:
// retrying cannot bring them back.
func (d *Driver) HandleError(_ context.Context, err error, msg string) {
	if dropped, ok := errors.AsType[*resourceslice.DroppedFieldsError](err); ok {
		features := strings.Join(dropped.DisabledFeatures(), ", ")
		d.mu.Lock()
		said := d.dropped == features
		d.dropped = features
		d.mu.Unlock()
		if !said {
			d.log.Warn("the API server dropped fields of the node's ResourceSlices: these features are off on this cluster, "+
				"so the devices that need them cannot be allocated as published (turn the feature gates on, or serve those GPUs through the device plugin)",
				"features", features, "err", err)
		}
		return
	}
	d.log.Error(msg, "err", err, "recoverable", errors.Is(err, kubeletplugin.ErrRecoverable))
}

func resultDevices(pc *preparedClaim) []kubeletplugin.Device {
	out := make([]kubeletplugin.Device, len(pc.Devices))
	for i, dv := range pc.Devices {
		out[i] = kubeletplugin.Device{Requests: dv.Requests, PoolName: dv.Pool, DeviceName: dv.Device, CDIDeviceIDs: dv.CDIIDs}
	}
	return out
}

// prepare prepares one claim: the devices of its allocation that are
// this driver's, with their opaque config, as CDI devices.
func (d *Driver) prepare(ctx context.Context, c *resourceapi.ResourceClaim) ([]kubeletplugin.Device, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	uid := string(c.UID)
	if pc, ok := d.state.Claims[uid]; ok && pc.State == statePrepared {
		return resultDevices(pc), nil
	}
	if c.Status.Allocation == nil {
		return nil, fmt.Errorf("ResourceClaim %s/%s is not allocated", c.Namespace, c.Name)
	}
	pc, cfgs, err := d.plan(c)
	if err != nil {
		return nil, err
	}
	if pc.Sharing, err = d.planSharing(uid, pc, cfgs); err != nil {
		return nil, err
	}
	// Record the intent before creating MIG devices: a crash from there
	// on is rolled back at the next start. Without MIG devices to create,
	// the only side effect before the checkpoint is the CDI spec, which
	// the next start removes when no prepared claim owns it.
	d.state.Claims[uid] = pc
	if needsCreate(pc) || pc.Sharing != nil {
		if err := d.state.save(d.o.StateFile); err != nil {
			delete(d.state.Claims, uid)
			return nil, err
		}
	}
	if err := d.apply(ctx, uid, pc, cfgs); err != nil {
		d.rollback(ctx, uid, pc)
		delete(d.state.Claims, uid)
		if serr := d.state.save(d.o.StateFile); serr != nil {
			err = errors.Join(err, serr)
		}
		return nil, err
	}
	return resultDevices(pc), nil
}

func needsCreate(pc *preparedClaim) bool {
	return slices.ContainsFunc(pc.Devices, func(d preparedDevice) bool { return d.MIG != nil && d.UUID == "" })
}

// plan checks a claim's allocation against the node's devices and decodes
// its config, without side effects.
func (d *Driver) plan(c *resourceapi.ResourceClaim) (*preparedClaim, []*apidra.DeviceConfig, error) {
	pc := &preparedClaim{Namespace: c.Namespace, Name: c.Name, State: statePreparing}
	var cfgs []*apidra.DeviceConfig
	alloc := c.Status.Allocation
	for _, r := range alloc.Devices.Results {
		if r.Driver != apidra.DriverName {
			continue
		}
		if r.Pool != d.o.NodeName {
			return nil, nil, fmt.Errorf("device %s/%s of request %s is in pool %s, not this node's (%s)", r.Pool, r.Device, r.Request, r.Pool, d.o.NodeName)
		}
		dev, ok := d.inv.byName[r.Device]
		if !ok {
			return nil, nil, fmt.Errorf("request %s: device %s is not one of this node's (its ResourceSlice is out of date)", r.Request, r.Device)
		}
		if d.withdrawn[dev.gpu.Index] {
			return nil, nil, fmt.Errorf("request %s: device %s: GPU %d is being re-partitioned (its MIG layout changes), so none of its devices is prepared until the ResourceSlice shows the new layout", r.Request, r.Device, dev.gpu.Index)
		}
		cfg, err := configFor(alloc.Devices.Config, r.Request)
		if err != nil {
			return nil, nil, fmt.Errorf("request %s: %w", r.Request, err)
		}
		pd := preparedDevice{Requests: []string{r.Request}, Pool: r.Pool, Device: r.Device}
		if pd.Share, err = shareOf(r, dev); err != nil {
			return nil, nil, fmt.Errorf("request %s: %w", r.Request, err)
		}
		if dev.mig == nil {
			pd.UUID = dev.gpu.UUID
			if cfg != nil && cfg.Kind != apidra.KindGpuConfig {
				return nil, nil, fmt.Errorf("request %s: device %s is a whole GPU: its config must be kind %s, not %s", r.Request, r.Device, apidra.KindGpuConfig, cfg.Kind)
			}
		} else {
			if cfg != nil && cfg.Kind != apidra.KindMigDeviceConfig {
				return nil, nil, fmt.Errorf("request %s: device %s is a MIG device: its config must be kind %s, not %s", r.Request, r.Device, apidra.KindMigDeviceConfig, cfg.Kind)
			}
			s := dev.mig
			pd.MIG = &preparedMIG{GPUIndex: dev.gpu.Index, Profile: s.profile.Name, PlacementStart: s.placement.Start, PlacementSize: s.placement.Size}
			if s.static != nil {
				pd.UUID = s.static.UUID
				pd.MIG.GPUInstanceID, pd.MIG.ComputeInstanceID = s.static.GPUInstanceID, s.static.ComputeInstanceID
			}
		}
		pd.CDIIDs = []string{cdi.ClaimDeviceID(string(c.UID), r.Device)}
		pc.Devices = append(pc.Devices, pd)
		cfgs = append(cfgs, cfg)
	}
	if len(pc.Devices) == 0 {
		return nil, nil, fmt.Errorf("ResourceClaim %s/%s has no device of driver %s", c.Namespace, c.Name, apidra.DriverName)
	}
	return pc, cfgs, nil
}

// configFor is the opaque config of this driver that applies to request:
// the claim's own over its class's, the last one given winning, as the
// allocation lists class configs first.
func configFor(configs []resourceapi.DeviceAllocationConfiguration, request string) (*apidra.DeviceConfig, error) {
	var out *apidra.DeviceConfig
	for i, c := range configs {
		if c.Opaque == nil || c.Opaque.Driver != apidra.DriverName {
			continue
		}
		if len(c.Requests) > 0 && !slices.ContainsFunc(c.Requests, func(r string) bool {
			return r == request || strings.HasPrefix(request, r+"/")
		}) {
			continue
		}
		cfg, err := apidra.DecodeConfig(c.Opaque.Parameters.Raw)
		if err != nil {
			return nil, fmt.Errorf("config[%d] (from the %s): %w", i, strings.ToLower(strings.TrimPrefix(string(c.Source), "From")), err)
		}
		out = cfg
	}
	return out, nil
}

// apply does a planned claim's side effects: ledger holds, MIG instances,
// the CDI spec, and the checkpoint that says it is done.
func (d *Driver) apply(ctx context.Context, uid string, pc *preparedClaim, cfgs []*apidra.DeviceConfig) error {
	var known []ledger.Hold
	for i := range pc.Devices {
		if dv := &pc.Devices[i]; dv.UUID != "" || dv.MIG != nil {
			known = append(known, d.hold(dv))
		}
	}
	if err := d.o.Ledger.Hold(uid, known); err != nil {
		return err
	}
	for i := range pc.Devices {
		dv := &pc.Devices[i]
		if dv.MIG == nil || dv.UUID != "" {
			continue
		}
		if err := d.createMIG(ctx, dv); err != nil {
			return err
		}
		d.created[dv.MIG.GPUIndex] = append(d.created[dv.MIG.GPUIndex], gpu.Placement{Start: dv.MIG.PlacementStart, Size: dv.MIG.PlacementSize})
		if err := d.o.Ledger.Hold(uid, []ledger.Hold{d.hold(dv)}); err != nil {
			return err
		}
	}
	if err := d.startSharing(ctx, uid, pc); err != nil {
		return err
	}
	spec := cdi.ClaimSpec{UID: uid}
	for i := range pc.Devices {
		dv := &pc.Devices[i]
		dev := d.inv.byName[dv.Device]
		cd := cdi.ClaimDevice{Name: dv.Device, UUID: dv.UUID, Paths: []string{dev.gpu.Path()}}
		spec.Devices = append(spec.Devices, cd)
		env, _, err := sharingEnv(cfgs[i], dv, dev, i)
		if err != nil {
			return err
		}
		spec.Env = append(spec.Env, env...)
		spec.Env = append(spec.Env, dv.Share.env(i)...)
	}
	if s := pc.Sharing; s != nil && s.MPS != nil {
		spec.MPSPipeDir, spec.MPSLogDir = s.MPS.PipeDir, s.MPS.LogDir
	}
	spec.Env = mergeEnv(spec.Env)
	path, err := d.o.CDI.WriteClaim(spec)
	if err != nil {
		return err
	}
	pc.CDISpec = path
	pc.State = statePrepared
	return d.state.save(d.o.StateFile)
}

// mergeEnv joins CUDA_MPS_PINNED_DEVICE_MEM_LIMIT entries of several
// devices into one variable and drops duplicates.
func mergeEnv(env []string) []string {
	var limits []string
	var out []string
	seen := map[string]bool{}
	for _, e := range env {
		if v, ok := strings.CutPrefix(e, "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT="); ok {
			limits = append(limits, v)
			continue
		}
		if !seen[e] {
			seen[e] = true
			out = append(out, e)
		}
	}
	if len(limits) > 0 {
		out = append(out, "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT="+strings.Join(limits, ","))
	}
	return out
}

// unprepare undoes a claim's preparation; an unknown claim is done.
func (d *Driver) unprepare(ctx context.Context, uid string) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	pc, ok := d.state.Claims[uid]
	if !ok {
		return nil
	}
	if err := d.o.CDI.RemoveClaim(uid); err != nil {
		return err
	}
	if err := d.stopSharing(ctx, uid, pc); err != nil {
		return err
	}
	for _, dv := range pc.Devices {
		if m := dv.MIG; m != nil && m.Created {
			if err := d.destroyMIG(ctx, m); err != nil {
				return err
			}
			d.created[m.GPUIndex] = slices.DeleteFunc(d.created[m.GPUIndex], func(p gpu.Placement) bool {
				return p.Start == m.PlacementStart && p.Size == m.PlacementSize
			})
		}
	}
	d.o.Ledger.ReleaseClaim(uid)
	delete(d.state.Claims, uid)
	return d.state.save(d.o.StateFile)
}

// Prepared lists the UIDs of the prepared claims, sorted.
func (d *Driver) Prepared() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	var out []string
	for uid, pc := range d.state.Claims {
		if pc.State == statePrepared {
			out = append(out, uid)
		}
	}
	slices.Sort(out)
	return out
}

// Resources is the pool the driver publishes now: the node's devices with
// the taints of their health and holders.
func (d *Driver) Resources() resourceslice.DriverResources {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.resourcesLocked()
}

func (d *Driver) resourcesLocked() resourceslice.DriverResources {
	var whole resourceslice.Slice
	var migSlices []resourceslice.Slice
	byGPU := map[int]int{}
	for _, dev := range d.inv.devices {
		rd := resourceapi.Device{Name: dev.name, Attributes: dev.attrs, Capacity: dev.capacity, ConsumesCounters: dev.consumes(), Taints: d.taints(dev), AllowMultipleAllocations: dev.multi}
		if dev.mig == nil {
			whole.Devices = append(whole.Devices, rd)
			continue
		}
		i, ok := byGPU[dev.gpu.Index]
		if !ok {
			i = len(migSlices)
			byGPU[dev.gpu.Index] = i
			migSlices = append(migSlices, resourceslice.Slice{})
		}
		migSlices[i].Devices = append(migSlices[i].Devices, rd)
	}
	var out []resourceslice.Slice
	if len(whole.Devices) > 0 {
		out = append(out, whole)
	}
	out = append(out, migSlices...)
	for c := range slices.Chunk(d.inv.counters, resourceapi.ResourceSliceMaxCounterSets) {
		out = append(out, resourceslice.Slice{SharedCounters: c})
	}
	if len(out) == 0 {
		// An empty pool says the node has no GPUs, rather than nothing.
		out = append(out, resourceslice.Slice{})
	}
	return resourceslice.DriverResources{Pools: map[string]resourceslice.Pool{d.o.NodeName: {Slices: out}}}
}

// taints are the device's taints now.
func (d *Driver) taints(dev *device) []resourceapi.DeviceTaint {
	var out []resourceapi.DeviceTaint
	if d.withdrawn[dev.gpu.Index] {
		out = append(out, resourceapi.DeviceTaint{Key: apidra.TaintMIGChanging, Effect: resourceapi.DeviceTaintEffectNoSchedule})
	}
	if d.o.Health != nil {
		uuids := []string{dev.gpu.UUID}
		if dev.mig != nil && dev.mig.static != nil {
			uuids = append(uuids, dev.mig.static.UUID)
		}
		for _, u := range uuids {
			if reason, bad := d.o.Health.Unhealthy(u); bad {
				out = append(out, resourceapi.DeviceTaint{Key: apidra.TaintUnhealthy, Value: taintValue(reason), Effect: resourceapi.DeviceTaintEffectNoSchedule})
				break
			}
		}
	}
	if dev.mig == nil {
		if d.o.Ledger.PluginHeld(dev.gpu.UUID) {
			out = append(out, resourceapi.DeviceTaint{Key: apidra.TaintDevicePlugin, Effect: resourceapi.DeviceTaintEffectNoSchedule})
		}
		return out
	}
	s := dev.mig
	switch {
	case d.o.Ledger.PluginHeld(dev.gpu.UUID), s.static != nil && d.o.Ledger.PluginHeld(s.static.UUID):
		out = append(out, resourceapi.DeviceTaint{Key: apidra.TaintDevicePlugin, Effect: resourceapi.DeviceTaintEffectNoSchedule})
	case s.blockedBy != nil:
		out = append(out, resourceapi.DeviceTaint{Key: apidra.TaintMIGLayout, Value: taintValue(s.blockedBy.Profile), Effect: resourceapi.DeviceTaintEffectNoSchedule})
	}
	return out
}

// taintValue fits a reason into a label value.
func taintValue(s string) string {
	var b strings.Builder
	for _, r := range s {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '_', r == '.':
			b.WriteRune(r)
		default:
			b.WriteByte('-')
		}
	}
	v := b.String()
	if len(v) > 63 {
		v = v[:63]
	}
	return strings.Trim(v, "-_.")
}

// taintFingerprint says which devices carry which taints, to publish only
// on change.
func taintFingerprint(r resourceslice.DriverResources) string {
	var parts []string
	for _, p := range r.Pools {
		for _, s := range p.Slices {
			for _, dv := range s.Devices {
				for _, t := range dv.Taints {
					parts = append(parts, dv.Name+"="+t.Key+":"+t.Value)
				}
			}
		}
	}
	slices.SortFunc(parts, cmp.Compare)
	return strings.Join(parts, ",")
}
