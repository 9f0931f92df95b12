package scheduler_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"

	"github.com/gpuplane/gpuplane/api/gpupod"
	"github.com/gpuplane/gpuplane/internal/adapter"
)

// invariant is a property that must hold in every state of the test's
// objects, not only in the one a test waits for: a watch checks it after
// each event and keeps the first state that breaks it. A "never" is
// checked this way, since a poll until the good end state would take a
// breach that is later undone for "not yet".
type invariant struct {
	what string
	mu   sync.Mutex
	err  error
}

// broken returns the first breach seen, nil while the property holds.
func (v *invariant) broken() error {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.err
}

// record keeps err, seen at resourceVersion rv, if it is the first.
func (v *invariant) record(rv string, err error) {
	if err == nil {
		return
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.err == nil {
		v.err = fmt.Errorf("%s: broken at resourceVersion %s: %w", v.what, rv, err)
	}
}

// watchInvariant checks holds on the objects of inf, by name: on the
// initial list as a whole, then after every event its watch delivers,
// until the test ends. c's waits fail as soon as it is broken, and the
// test fails at its end if it was.
func watchInvariant[T metav1.Object](c *cluster, what string, factory informers.SharedInformerFactory, inf cache.SharedIndexInformer, holds func(map[string]T) error) *invariant {
	c.t.Helper()
	v := &invariant{what: what}
	objs := map[string]T{}
	// reg is set before the informer starts, so before any notification.
	var reg cache.ResourceEventHandlerRegistration
	// One handler's notifications come one at a time, in the watch's
	// order, so objs needs no lock. The initial list arrives one object
	// at a time: its states in between are not the cluster's, and are not
	// checked; the whole list is, below, once it has arrived.
	check := func(rv string) {
		if !reg.HasSynced() {
			return
		}
		v.record(rv, holds(objs))
	}
	set := func(obj any) {
		if o, ok := obj.(T); ok {
			objs[o.GetName()] = o
			check(o.GetResourceVersion())
		}
	}
	reg, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    set,
		UpdateFunc: func(_, obj any) { set(obj) },
		DeleteFunc: func(obj any) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			if o, ok := obj.(T); ok {
				delete(objs, o.GetName())
				check(o.GetResourceVersion())
			}
		},
	})
	if err != nil {
		c.t.Fatalf("watching for %s: %v", what, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	factory.Start(ctx.Done())
	c.t.Cleanup(func() {
		cancel()
		factory.Shutdown()
		if err := v.broken(); err != nil {
			c.t.Error(err)
		}
	})
	syncCtx, stop := context.WithTimeout(c.t.Context(), 30*time.Second)
	defer stop()
	if !cache.WaitForCacheSync(syncCtx.Done(), reg.HasSynced) {
		c.t.Fatalf("watching for %s: the informer did not sync in 30s", what)
	}
	listed := map[string]T{}
	for _, obj := range inf.GetStore().List() {
		if o, ok := obj.(T); ok {
			listed[o.GetName()] = o
		}
	}
	v.record("of the initial list", holds(listed))
	c.invariants = append(c.invariants, v)
	return v
}

// alwaysPods checks holds on the test's pods matching selector at every
// event (see watchInvariant).
func (c *cluster) alwaysPods(what, selector string, holds func(map[string]*corev1.Pod) error) *invariant {
	c.t.Helper()
	f := informers.NewSharedInformerFactoryWithOptions(env.Client, 0, informers.WithNamespace(c.ns),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = selector }))
	return watchInvariant(c, what, f, f.Core().V1().Pods().Informer(), holds)
}

// alwaysClaims checks holds on the test's ResourceClaims at every event
// (see watchInvariant).
func (c *cluster) alwaysClaims(what string, holds func(map[string]*resourceapi.ResourceClaim) error) *invariant {
	c.t.Helper()
	f := informers.NewSharedInformerFactoryWithOptions(env.Client, 0, informers.WithNamespace(c.ns))
	return watchInvariant(c, what, f, f.Resource().V1().ResourceClaims().Informer(), holds)
}

// failIfBroken fails the test at once on the first breach of any of its
// invariants; the waits call it at every poll.
func (c *cluster) failIfBroken() {
	c.t.Helper()
	for _, v := range c.invariants {
		if err := v.broken(); err != nil {
			c.t.Fatal(err)
		}
	}
}

// atMostBound is the property that at most n of the pods hold a node,
// those being deleted included (they hold their GPUs until they are gone).
func atMostBound(n int) func(map[string]*corev1.Pod) error {
	return func(ps map[string]*corev1.Pod) error {
		var on []string
		for _, name := range slices.Sorted(maps.Keys(ps)) {
			if ps[name].Spec.NodeName != "" {
				on = append(on, name)
			}
		}
		if len(on) > n {
			return fmt.Errorf("%d pods bound, at most %d allowed: %v", len(on), n, on)
		}
		return nil
	}
}

// atLeastRunning is the property that at least n() of the pods are bound
// and not being deleted: no more were evicted than allowed.
func atLeastRunning(n func() int) func(map[string]*corev1.Pod) error {
	return func(ps map[string]*corev1.Pod) error {
		if got, want := countBound(ps), n(); got < want {
			var gone []string
			for _, name := range slices.Sorted(maps.Keys(ps)) {
				if p := ps[name]; p.Spec.NodeName == "" || p.DeletionTimestamp != nil {
					gone = append(gone, name)
				}
			}
			return fmt.Errorf("%d pods bound, at least %d required (unbound or being deleted: %v)", got, want, gone)
		}
		return nil
	}
}

// exclusiveGPUs is the property that no GPU is held by two pods: a bound
// pod holds the GPUs of its annotation until it is gone, being deleted
// included (the pods here take whole GPUs).
func exclusiveGPUs(ps map[string]*corev1.Pod) error {
	owner := map[string]string{} // node/index -> pod
	for _, name := range slices.Sorted(maps.Keys(ps)) {
		p := ps[name]
		s, ok := p.Annotations[adapter.GPUsAnnotation]
		if p.Spec.NodeName == "" || !ok {
			continue
		}
		gpus, err := gpupod.ParseGPUs(s, 64)
		if err != nil {
			return fmt.Errorf("pod %s: %w", name, err)
		}
		for _, g := range gpus {
			key := fmt.Sprintf("%s/%d", p.Spec.NodeName, g.Index)
			if o, ok := owner[key]; ok {
				return fmt.Errorf("GPU %s held by pods %s and %s", key, o, name)
			}
			owner[key] = name
		}
	}
	return nil
}

// exclusiveDevices is the property that no device is allocated to two
// claims.
func exclusiveDevices(claims map[string]*resourceapi.ResourceClaim) error {
	owner := map[string]string{} // device -> claim
	for _, name := range slices.Sorted(maps.Keys(claims)) {
		a := claims[name].Status.Allocation
		if a == nil {
			continue
		}
		for _, r := range a.Devices.Results {
			dev := r.Driver + "/" + r.Pool + "/" + r.Device
			if o, ok := owner[dev]; ok {
				return fmt.Errorf("device %s allocated to claims %s and %s", dev, o, name)
			}
			owner[dev] = name
		}
	}
	return nil
}
