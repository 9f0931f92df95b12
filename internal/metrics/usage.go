package metrics

import (
	"cmp"
	"context"
	"fmt"
	"slices"
)

// GPUUse is what one pod's processes use on one GPU, or on one MIG device
// of it (UUID then names the MIG device).
type GPUUse struct {
	Namespace, Pod string
	GPU            int
	UUID           string
	UsedMiB        uint64
	Processes      int
}

// ForeignUse is a pod's processes on a GPU none of its containers was
// given: a GPU given to another pod, or to none.
type ForeignUse struct {
	PodUID    string
	GPU       int
	UUID      string
	Processes int
	// Holders are the pods (namespace/name) the GPU was given to; none
	// when it was given to no container.
	Holders []string
}

// Usage is the node's GPU use by pod, as the exporter attributes it.
type Usage struct {
	Pods    []GPUUse
	Foreign []ForeignUse
}

// Usage attributes the GPUs' processes to pods now, the way a scrape does
// (the same code, under the same lock), without a scrape: for a watch that
// must act sooner than Prometheus scrapes. It needs the PodResources API
// (Options.PodResources) and fails when it does not answer.
func (e *Exporter) Usage(ctx context.Context) (Usage, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.opts.PodResources == nil {
		return Usage{}, fmt.Errorf("attributing GPU use to pods needs the kubelet's PodResources API, which is off")
	}
	ctx, cancel := context.WithTimeout(ctx, e.opts.Timeout)
	defer cancel()
	if err := (&inventoryCollector{e: e}).collect(ctx, nil); err != nil && e.devices == nil {
		return Usage{}, err
	}
	if err := (&podCollector{e: e}).refresh(ctx); err != nil {
		return Usage{}, fmt.Errorf("listing the pods' devices: %w", err)
	}
	a := e.att
	var u Usage
	for uuid, hs := range a.holders {
		gi, ok := e.byUUID[uuid]
		if !ok || e.procErr[gi] != nil {
			continue
		}
		for _, h := range hs {
			if h.procs > 0 {
				u.Pods = append(u.Pods, GPUUse{Namespace: h.Namespace, Pod: h.Pod, GPU: e.devices[gi].Index, UUID: uuid, UsedMiB: h.memMi, Processes: h.procs})
			}
		}
	}
	for k, n := range a.foreign {
		d := &e.devices[k.gpu]
		f := ForeignUse{PodUID: k.podUID, GPU: d.Index, UUID: d.UUID, Processes: n}
		for _, h := range a.holders[d.UUID] {
			f.Holders = append(f.Holders, h.Namespace+"/"+h.Pod)
		}
		slices.Sort(f.Holders)
		u.Foreign = append(u.Foreign, f)
	}
	slices.SortFunc(u.Pods, func(x, y GPUUse) int {
		return cmp.Or(cmp.Compare(x.Namespace, y.Namespace), cmp.Compare(x.Pod, y.Pod), cmp.Compare(x.GPU, y.GPU), cmp.Compare(x.UUID, y.UUID))
	})
	slices.SortFunc(u.Foreign, func(x, y ForeignUse) int { return cmp.Or(cmp.Compare(x.PodUID, y.PodUID), cmp.Compare(x.GPU, y.GPU)) })
	return u, nil
}
