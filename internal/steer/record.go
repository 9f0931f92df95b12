package steer

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/gpuplane/gpuplane/api/gpupod"
	"github.com/gpuplane/gpuplane/internal/sharing"
)

// PodResourcesLister lists the devices the kubelet gave the node's
// containers (metrics.SocketPodResources is one).
type PodResourcesLister interface {
	List(ctx context.Context) (*podresourcesv1.ListPodResourcesResponse, error)
}

// Patcher writes gpupod.HeldAnnotation on a pod: value, or removes it when
// value is empty. uid guards against a pod recreated under the same name.
type Patcher func(ctx context.Context, namespace, name string, uid types.UID, value string) error

// Recorder writes on each pod bound to the node the GPUs the kubelet gave
// it (gpupod.HeldAnnotation), read from the PodResources API in the
// format of the scheduler's choice, so that gpuplane-scheduler's books
// follow what the node did rather than what it chose.
type Recorder struct {
	list   PodResourcesLister
	served func() *sharing.Served
	pods   func() []*corev1.Pod
	patch  Patcher
	gpus   int
	log    *slog.Logger
	// Interval spaces the reads of the PodResources API.
	interval time.Duration

	// failed remembers, per pod, a value whose write failed, so that a
	// pod that cannot be patched is not retried every round.
	failed map[types.UID]string
}

// RecordInterval is how often the Recorder reads the PodResources API.
const RecordInterval = time.Second

// maxPatchesPerRound bounds the API writes of one round; what is left
// waits for the next.
const maxPatchesPerRound = 50

// NewRecorder returns a Recorder: list reads the kubelet's allocations,
// served gives the resources the device plugin serves (nil until it
// serves, and the Recorder records nothing until then), pods lists the pods bound to the node as a watch last showed them (with
// their annotations), patch writes the record, gpus is the node's GPU
// count.
func NewRecorder(list PodResourcesLister, served func() *sharing.Served, pods func() []*corev1.Pod, patch Patcher, gpus int, log *slog.Logger) *Recorder {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Recorder{list: list, served: served, pods: pods, patch: patch, gpus: gpus, log: log, interval: RecordInterval, failed: map[types.UID]string{}}
}

// Run records until ctx ends. A PodResources API that does not answer is
// logged once per change of error and tried again.
func (r *Recorder) Run(ctx context.Context) error {
	t := time.NewTicker(r.interval)
	defer t.Stop()
	var last string
	for {
		err := r.Round(ctx)
		switch {
		case err != nil && err.Error() != last:
			r.log.Warn("cannot read what the kubelet gave the node's pods; gpuplane.io/gpus-held is not written until it can", "err", err)
			last = err.Error()
		case err == nil && last != "":
			r.log.Info("reading the kubelet's allocations again")
			last = ""
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// Round reads the kubelet's allocations once and writes the records that
// differ from the pods' annotations.
func (r *Recorder) Round(ctx context.Context) error {
	resources := r.served()
	if resources == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	resp, err := r.list.List(ctx)
	if err != nil {
		return err
	}
	held := map[string]string{}
	for _, p := range resp.GetPodResources() {
		if v := r.heldBy(p, resources); v != "" {
			held[p.GetNamespace()+"/"+p.GetName()] = v
		}
	}
	patches := 0
	seen := map[types.UID]bool{}
	for _, p := range r.pods() {
		seen[p.UID] = true
		if p.DeletionTimestamp != nil || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue // what it held is being given back
		}
		want, have := held[p.Namespace+"/"+p.Name], p.Annotations[gpupod.HeldAnnotation]
		if want == "" && (p.Status.Phase == corev1.PodPending || p.Status.Phase == "") {
			continue // not admitted yet
		}
		if failed, ok := r.failed[p.UID]; want == have || ok && failed == want || patches >= maxPatchesPerRound {
			continue
		}
		patches++
		if err := r.patch(ctx, p.Namespace, p.Name, p.UID, want); err != nil {
			r.failed[p.UID] = want
			r.log.Warn("recording the GPUs a pod holds", "pod", p.Namespace+"/"+p.Name, "held", want, "err", err)
			continue
		}
		delete(r.failed, p.UID)
		r.log.Debug("recorded the GPUs a pod holds", "pod", p.Namespace+"/"+p.Name, "held", want, "chosen", p.Annotations[gpupod.GPUsAnnotation])
	}
	for uid := range r.failed {
		if !seen[uid] {
			delete(r.failed, uid)
		}
	}
	return nil
}

// heldBy renders the devices of resources one pod's containers hold as
// gpupod.FormatGPUs does: whole GPUs by index, replicas as their share of
// their GPU (all of a GPU's replicas as the whole GPU), MIG devices as
// instances of their slices. Devices of other resources, or unknown to
// the plugin, are left out; "" when none is left.
func (r *Recorder) heldBy(p *podresourcesv1.PodResources, resources *sharing.Served) string {
	var whole, mig []gpupod.GPUChoice
	type share struct{ held, of int }
	shares := map[int]share{}
	for _, c := range p.GetContainers() {
		for _, d := range c.GetDevices() {
			for _, id := range d.GetDeviceIds() {
				dev, ok := resources.Device(d.GetResourceName(), id)
				switch {
				case !ok:
				case dev.MIG != nil:
					mig = append(mig, gpupod.GPUChoice{Index: dev.MIG.ParentIndex, MIGSlices: dev.MIG.GPUSlices})
				case dev.Replicas > 1:
					sh := shares[dev.GPUIndex]
					shares[dev.GPUIndex] = share{sh.held + 1, dev.Replicas}
				default:
					whole = append(whole, gpupod.GPUChoice{Index: dev.GPUIndex})
				}
			}
		}
	}
	out := slices.Concat(whole, mig)
	for g, sh := range shares {
		c := gpupod.GPUChoice{Index: g} // every replica: the whole GPU
		if sh.held < sh.of {
			c.Milli = int64(sh.held) * gpupod.MilliPerGPU / int64(sh.of)
		}
		out = append(out, c)
	}
	if len(out) == 0 {
		return ""
	}
	slices.SortFunc(out, func(a, b gpupod.GPUChoice) int {
		return cmp.Or(cmp.Compare(a.Index, b.Index), cmp.Compare(a.MIGSlices, b.MIGSlices))
	})
	// A GPU named twice (a MIG instance and a share of one GPU cannot
	// both be held; two MIG instances of one GPU can) is kept as the
	// kubelet said; the scheduler refuses what it cannot read.
	return gpupod.FormatGPUs(out)
}

// HeldPatch is the merge patch that sets (or, for "", removes) the record
// on the pod with uid.
func HeldPatch(uid types.UID, value string) ([]byte, error) {
	var v any
	if value != "" {
		v = value
	}
	b, err := json.Marshal(map[string]any{"metadata": map[string]any{
		"uid": uid, "annotations": map[string]any{gpupod.HeldAnnotation: v},
	}})
	if err != nil {
		return nil, fmt.Errorf("encoding the %s patch: %w", gpupod.HeldAnnotation, err)
	}
	return b, nil
}
