package dra

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"sync"

	apidra "github.com/gpuplane/gpuplane/api/dra"
	"github.com/gpuplane/gpuplane/internal/gpu"
	"github.com/gpuplane/gpuplane/internal/mps"
)

// preparedSharing is what a claim's sharing config did on the node: the
// time slices it set and the MPS control daemon it runs. It is
// checkpointed so that unprepare undoes it and a restart brings the
// daemon back.
type preparedSharing struct {
	TimeSlices []preparedTimeSlice `json:"timeSlices,omitempty"`
	MPS        *preparedMPS        `json:"mps,omitempty"`
}

// preparedTimeSlice is a GPU's time slice set for a claim.
type preparedTimeSlice struct {
	GPUIndex int           `json:"gpuIndex"`
	Slice    gpu.TimeSlice `json:"slice"`
}

// preparedMPS is a claim's MPS control daemon.
type preparedMPS struct {
	PipeDir string `json:"pipeDir"`
	LogDir  string `json:"logDir"`
	// GPUs are the UUIDs (GPU or MIG) the daemon serves, with their
	// positions in the claim's devices and pinned-memory limits (MiB, 0
	// for none) in the same order.
	GPUs                   []string `json:"gpus"`
	Devices                []int    `json:"devices"`
	PinnedMemLimitsMiB     []uint64 `json:"pinnedMemLimitsMiB,omitempty"`
	ActiveThreadPercentage int      `json:"activeThreadPercentage,omitempty"`
}

// check bounds a checkpointed sharing against the claim's devices.
func (s *preparedSharing) check(devices int) error {
	if s == nil {
		return nil
	}
	if len(s.TimeSlices) > devices {
		return fmt.Errorf("sharing.timeSlices: %d for %d devices", len(s.TimeSlices), devices)
	}
	for i, ts := range s.TimeSlices {
		if ts.GPUIndex < 0 || ts.GPUIndex >= 64 || !ts.Slice.Valid() {
			return fmt.Errorf("sharing.timeSlices[%d]: GPU %d, slice %d: impossible", i, ts.GPUIndex, int(ts.Slice))
		}
	}
	m := s.MPS
	if m == nil {
		return nil
	}
	if len(m.Devices) != len(m.GPUs) || len(m.PinnedMemLimitsMiB) != len(m.GPUs) || len(m.GPUs) == 0 || len(m.GPUs) > devices {
		return fmt.Errorf("sharing.mps: %d GPUs, %d devices and %d limits for a claim of %d devices", len(m.GPUs), len(m.Devices), len(m.PinnedMemLimitsMiB), devices)
	}
	for i, d := range m.Devices {
		if d < 0 || d >= devices {
			return fmt.Errorf("sharing.mps.devices[%d]: %d is not one of the claim's %d devices", i, d, devices)
		}
	}
	if m.PipeDir == "" || m.LogDir == "" || m.ActiveThreadPercentage < 0 || m.ActiveThreadPercentage > 100 {
		return fmt.Errorf("sharing.mps: pipe %q, log %q, active thread percentage %d: impossible", m.PipeDir, m.LogDir, m.ActiveThreadPercentage)
	}
	return nil
}

// daemons supervises the MPS control daemons of prepared claims. They
// live as long as the driver (until Close), not as long as one call.
type daemons struct {
	ctx    context.Context
	cancel context.CancelFunc
	mu     sync.Mutex
	byUID  map[string]*claimDaemon
}

type claimDaemon struct {
	d      *mps.Daemon
	cancel context.CancelFunc
	done   chan struct{}
}

func newDaemons() *daemons {
	ctx, cancel := context.WithCancel(context.Background())
	return &daemons{ctx: ctx, cancel: cancel, byUID: map[string]*claimDaemon{}}
}

// timeSliceOf is the time slice an interval names.
func timeSliceOf(interval string) gpu.TimeSlice {
	switch interval {
	case apidra.IntervalShort:
		return gpu.TimeSliceShort
	case apidra.IntervalMedium:
		return gpu.TimeSliceMedium
	case apidra.IntervalLong:
		return gpu.TimeSliceLong
	}
	return gpu.TimeSliceDefault
}

// sharingEnv is what a device's sharing config gives its containers
// (MPS clients' limits), and whether it asks for MPS.
func sharingEnv(cfg *apidra.DeviceConfig, dv *preparedDevice, dev *device, ordinal int) (env []string, mps bool, err error) {
	if cfg == nil || cfg.Sharing == nil {
		return nil, false, nil
	}
	s := cfg.Sharing
	switch s.Strategy {
	case apidra.StrategyTimeSlicing:
		return nil, false, nil
	case apidra.StrategyMPS:
		if m := s.MPSConfig; m != nil {
			if p := m.DefaultActiveThreadPercentage; p != nil {
				env = append(env, "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE="+strconv.Itoa(*p))
			}
			if limit, ok := m.PinnedMemoryLimit(dv.UUID, strconv.Itoa(dev.gpu.Index)); ok {
				mem := deviceMemoryBytes(dev)
				if uint64(limit) > mem {
					return nil, false, fmt.Errorf("%s: sharing.mpsConfig: pinned memory limit %d MiB is more than device %s has (%d MiB)", cfg.Kind, limit>>20, dv.Device, mem>>20)
				}
				env = append(env, fmt.Sprintf("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=%d=%dM", ordinal, limit>>20))
			}
		}
		return env, true, nil
	}
	return nil, false, fmt.Errorf("%s: sharing.strategy %q is not supported", cfg.Kind, s.Strategy)
}

// deviceMemoryBytes is the memory of a whole GPU or MIG device.
func deviceMemoryBytes(dev *device) uint64 {
	if dev.mig != nil {
		return uint64(dev.mig.profile.MemoryMiB) << 20
	}
	return uint64(dev.gpu.MemoryMiB) << 20
}

// planSharing turns the sharing configs of a claim's devices into what
// to do on the node, refusing what the node cannot do: a time slice on a
// backend without one, a GPU another prepared claim time-slices
// differently or runs an MPS daemon on.
func (d *Driver) planSharing(uid string, pc *preparedClaim, cfgs []*apidra.DeviceConfig) (*preparedSharing, error) {
	out := &preparedSharing{}
	var m *preparedMPS
	for i := range pc.Devices {
		cfg := cfgs[i]
		if cfg == nil || cfg.Sharing == nil {
			continue
		}
		dv := &pc.Devices[i]
		dev := d.inv.byName[dv.Device]
		switch cfg.Sharing.Strategy {
		case apidra.StrategyTimeSlicing:
			slice := gpu.TimeSliceDefault
			if t := cfg.Sharing.TimeSlicingConfig; t != nil {
				slice = timeSliceOf(t.Interval)
			}
			if _, ok := d.o.Backend.(gpu.TimeSlicer); !ok && slice != gpu.TimeSliceDefault {
				return nil, fmt.Errorf("%s: sharing.timeSlicingConfig.interval %v: the GPU backend %s cannot set time slices: %w", cfg.Kind, slice, d.o.Backend.Name(), gpu.ErrNotSupported)
			}
			if other, ts, ok := d.timeSliceHolder(uid, dev.gpu.Index); ok && ts != slice {
				return nil, fmt.Errorf("%s: sharing.timeSlicingConfig.interval %v: GPU %s is time-sliced %v for ResourceClaim %s", cfg.Kind, slice, gpuName(dev.gpu.Index), ts, other)
			}
			out.TimeSlices = append(out.TimeSlices, preparedTimeSlice{GPUIndex: dev.gpu.Index, Slice: slice})
		case apidra.StrategyMPS:
			if d.o.MPSRoot == "" {
				return nil, fmt.Errorf("%s: sharing.strategy %s: the driver has no MPS root directory for control daemons", cfg.Kind, apidra.StrategyMPS)
			}
			if other, ok := d.mpsHolder(uid, dv.Device); ok {
				return nil, fmt.Errorf("%s: sharing.strategy %s: device %s already runs the MPS control daemon of ResourceClaim %s", cfg.Kind, apidra.StrategyMPS, dv.Device, other)
			}
			if m == nil {
				dir := filepath.Join(d.o.MPSRoot, "claim-"+uid)
				m = &preparedMPS{PipeDir: filepath.Join(dir, "pipe"), LogDir: filepath.Join(dir, "log")}
			}
			var limit uint64
			if mc := cfg.Sharing.MPSConfig; mc != nil {
				if p := mc.DefaultActiveThreadPercentage; p != nil {
					m.ActiveThreadPercentage = *p
				}
				if l, ok := mc.PinnedMemoryLimit(dv.UUID, strconv.Itoa(dev.gpu.Index)); ok {
					limit = uint64(l) >> 20
				}
			}
			// UUIDs of MIG devices made for the claim are filled in
			// once they exist (startSharing).
			m.GPUs = append(m.GPUs, dv.UUID)
			m.Devices = append(m.Devices, i)
			m.PinnedMemLimitsMiB = append(m.PinnedMemLimitsMiB, limit)
		}
	}
	out.MPS = m
	if len(out.TimeSlices) == 0 && out.MPS == nil {
		return nil, nil
	}
	return out, nil
}

// timeSliceHolder is another prepared claim that set the GPU's time slice.
func (d *Driver) timeSliceHolder(uid string, index int) (string, gpu.TimeSlice, bool) {
	for other, pc := range d.state.Claims {
		if other == uid || pc.Sharing == nil {
			continue
		}
		for _, ts := range pc.Sharing.TimeSlices {
			if ts.GPUIndex == index {
				return pc.Namespace + "/" + pc.Name, ts.Slice, true
			}
		}
	}
	return "", 0, false
}

// mpsHolder is another prepared claim whose MPS daemon serves the device
// (a GPU shared by capacity, or a MIG device): a device has at most one
// control daemon.
func (d *Driver) mpsHolder(uid, device string) (string, bool) {
	for other, pc := range d.state.Claims {
		if other == uid || pc.Sharing == nil || pc.Sharing.MPS == nil {
			continue
		}
		for _, i := range pc.Sharing.MPS.Devices {
			if i < len(pc.Devices) && pc.Devices[i].Device == device {
				return pc.Namespace + "/" + pc.Name, true
			}
		}
	}
	return "", false
}

// startSharing sets the claim's time slices and starts its MPS control
// daemon. The devices' UUIDs are known by now.
func (d *Driver) startSharing(ctx context.Context, uid string, pc *preparedClaim) error {
	s := pc.Sharing
	if s == nil {
		return nil
	}
	for _, ts := range s.TimeSlices {
		if err := d.setTimeSlice(ctx, ts.GPUIndex, ts.Slice); err != nil {
			return err
		}
	}
	if m := s.MPS; m != nil {
		for k, i := range m.Devices {
			m.GPUs[k] = pc.Devices[i].UUID
		}
		return d.startMPS(uid, pc)
	}
	return nil
}

func (d *Driver) setTimeSlice(ctx context.Context, index int, slice gpu.TimeSlice) error {
	ts, ok := d.o.Backend.(gpu.TimeSlicer)
	if !ok {
		if slice == gpu.TimeSliceDefault {
			return nil
		}
		return fmt.Errorf("setting the time slice of GPU %d: backend %s: %w", index, d.o.Backend.Name(), gpu.ErrNotSupported)
	}
	if err := ts.SetTimeSlice(ctx, index, slice); err != nil {
		return fmt.Errorf("setting the time slice of GPU %d to %v: %w", index, slice, err)
	}
	return nil
}

// startMPS starts (or, after a restart, starts again) a claim's daemon.
func (d *Driver) startMPS(uid string, pc *preparedClaim) error {
	m := pc.Sharing.MPS
	ds := d.daemons
	ds.mu.Lock()
	defer ds.mu.Unlock()
	if _, ok := ds.byUID[uid]; ok {
		return nil
	}
	daemon, err := mps.NewDaemon(mps.DaemonOptions{
		Resource: "claim " + pc.Namespace + "/" + pc.Name, PipeDir: m.PipeDir, LogDir: m.LogDir, GPUs: m.GPUs,
		ActiveThreadPercentage: m.ActiveThreadPercentage, PinnedMemLimitsMiB: m.PinnedMemLimitsMiB,
		Runner: d.o.MPSRunner, Logger: d.log.With("part", "dra-mps", "claim", uid),
	})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ds.ctx)
	cd := &claimDaemon{d: daemon, cancel: cancel, done: make(chan struct{})}
	ds.byUID[uid] = cd
	go func() {
		defer close(cd.done)
		if err := daemon.Run(ctx); err != nil {
			d.log.Error("MPS control daemon of a claim ended", "claim", uid, "err", err)
		}
	}()
	return nil
}

// stopSharing stops the claim's MPS daemon and gives its GPUs their
// default time slice back, unless another prepared claim set one.
func (d *Driver) stopSharing(ctx context.Context, uid string, pc *preparedClaim) error {
	d.stopMPS(ctx, uid, pc)
	if pc.Sharing == nil {
		return nil
	}
	var errs []error
	for _, ts := range pc.Sharing.TimeSlices {
		if _, _, held := d.timeSliceHolder(uid, ts.GPUIndex); held || ts.Slice == gpu.TimeSliceDefault {
			continue
		}
		if err := d.setTimeSlice(ctx, ts.GPUIndex, gpu.TimeSliceDefault); err != nil && !errors.Is(err, gpu.ErrGPULost) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// stopMPS stops the claim's MPS control daemon. Without one of this run,
// a daemon the checkpoint says the claim had may still run, left by an
// agent that was killed (with the claim caught preparing, or before its
// daemon was started again): it is asked to quit, or it would run on with
// the claim gone.
func (d *Driver) stopMPS(ctx context.Context, uid string, pc *preparedClaim) {
	ds := d.daemons
	ds.mu.Lock()
	cd, ok := ds.byUID[uid]
	delete(ds.byUID, uid)
	ds.mu.Unlock()
	if ok {
		cd.cancel()
		<-cd.done
		return
	}
	if pc.Sharing == nil || pc.Sharing.MPS == nil {
		return
	}
	m := pc.Sharing.MPS
	switch left, err := mps.QuitLeftover(ctx, d.o.MPSRunner, m.PipeDir, m.LogDir); {
	case left && err != nil:
		d.log.Info("the claim's MPS pipe directory has a control pipe, but no control daemon answered quit", "claim", uid, "pipe", m.PipeDir, "err", err)
	case left:
		d.log.Info("asked the MPS control daemon an earlier run left for the claim to quit", "claim", uid, "pipe", m.PipeDir)
	}
}

// MPSDaemon reports the state of a prepared claim's MPS control daemon.
func (d *Driver) MPSDaemon(uid string) (mps.Status, bool) {
	ds := d.daemons
	ds.mu.Lock()
	defer ds.mu.Unlock()
	cd, ok := ds.byUID[uid]
	if !ok {
		return mps.Status{}, false
	}
	return cd.d.Status(), true
}

// Close stops the MPS control daemons of prepared claims (they are
// started again, from the checkpoint, by the next New).
func (d *Driver) Close() {
	d.daemons.cancel()
	d.daemons.mu.Lock()
	all := make([]*claimDaemon, 0, len(d.daemons.byUID))
	for uid, cd := range d.daemons.byUID {
		all = append(all, cd)
		delete(d.daemons.byUID, uid)
	}
	d.daemons.mu.Unlock()
	for _, cd := range all {
		<-cd.done
	}
}
