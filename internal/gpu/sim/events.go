package sim

import (
	"context"
	"fmt"
	"sync"

	"github.com/gpuplane/gpuplane/internal/gpu"
)

// Subscribe implements gpu.Events. A GPU that is lost, or has a fault
// injected on OpSubscribe, is listed by Unmonitored and its events are not
// delivered; the others are watched as usual. Events reach the
// subscription in the order they were injected; none is dropped while the
// subscription is open.
func (b *Backend) Subscribe(ctx context.Context) (gpu.Subscription, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil, gpu.ErrClosed
	}
	s := &subscription{
		b:           b,
		ch:          make(chan gpu.Event),
		wake:        make(chan struct{}, 1),
		done:        make(chan struct{}),
		unmonitored: map[string]error{},
		watched:     make([]bool, len(b.gpus)),
	}
	for i, g := range b.gpus {
		if _, err := b.gpuLocked(OpSubscribe, i); err != nil {
			s.unmonitored[g.uuid] = err
			continue
		}
		s.watched[i] = true
	}
	ctx, s.cancel = context.WithCancel(ctx)
	b.subs[s] = struct{}{}
	go s.loop(ctx)
	return s, nil
}

// subscription queues the events injected for it and hands them to its
// channel from one goroutine, which ends when the subscription is closed
// or its context is done.
type subscription struct {
	b           *Backend
	ch          chan gpu.Event
	wake        chan struct{}
	done        chan struct{}
	cancel      context.CancelFunc
	closeOnce   sync.Once
	unmonitored map[string]error
	watched     []bool // set at Subscribe, read-only after

	mu    sync.Mutex
	queue []gpu.Event
	// failLeft is how many event waits are still to fail; -1 means until
	// ClearFaults. failing says a failure was reported and no recovery yet.
	failLeft int
	failing  bool
	failErr  error
}

var _ gpu.Subscription = (*subscription)(nil)

func (s *subscription) Events() <-chan gpu.Event { return s.ch }

func (s *subscription) Unmonitored() map[string]error {
	out := make(map[string]error, len(s.unmonitored))
	for k, v := range s.unmonitored {
		out[k] = v
	}
	return out
}

// Close ends the subscription and waits for its goroutine to finish.
func (s *subscription) Close() error {
	s.closeOnce.Do(func() {
		s.cancel()
		<-s.done
	})
	return nil
}

func (s *subscription) loop(ctx context.Context) {
	defer close(s.done)
	defer close(s.ch)
	defer func() {
		s.b.mu.Lock()
		delete(s.b.subs, s)
		s.b.mu.Unlock()
	}()
	for {
		ev, ok := s.next()
		if !ok {
			select {
			case <-ctx.Done():
				return
			case <-s.wake:
				continue
			}
		}
		select {
		case s.ch <- ev:
		case <-ctx.Done():
			return
		}
	}
}

// next plays one event wait: it fails while failures are injected
// (reported once as EventMonitorError), then reports the recovery, then
// hands out queued events.
func (s *subscription) next() (gpu.Event, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for s.failLeft != 0 {
		if s.failLeft > 0 {
			s.failLeft--
		}
		if !s.failing {
			s.failing = true
			return gpu.Event{Kind: gpu.EventMonitorError, Index: -1, GPUInstanceID: -1, ComputeInstanceID: -1,
				Err: s.failErr, Time: s.b.clock.Now()}, true
		}
		if s.failLeft < 0 {
			return gpu.Event{}, false
		}
	}
	if s.failing {
		s.failing = false
		return gpu.Event{Kind: gpu.EventMonitorRecovered, Index: -1, GPUInstanceID: -1, ComputeInstanceID: -1,
			Time: s.b.clock.Now()}, true
	}
	if len(s.queue) == 0 {
		return gpu.Event{}, false
	}
	ev := s.queue[0]
	s.queue[0] = gpu.Event{}
	s.queue = s.queue[1:]
	return ev, true
}

func (s *subscription) poke() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

func (s *subscription) push(ev gpu.Event) {
	if ev.Index >= 0 && ev.Index < len(s.watched) && !s.watched[ev.Index] {
		return
	}
	s.mu.Lock()
	s.queue = append(s.queue, ev)
	s.mu.Unlock()
	s.poke()
}

func (s *subscription) failWaits(n int) {
	s.mu.Lock()
	s.failLeft = n
	if n < 0 {
		s.failErr = fmt.Errorf("waiting for GPU events: %w (until faults are cleared)", ErrInjected)
	} else {
		s.failErr = fmt.Errorf("waiting for GPU events: %w (%d consecutive failures)", ErrInjected, n)
	}
	s.mu.Unlock()
	s.poke()
}

func (s *subscription) clearWaitFailures() {
	s.mu.Lock()
	s.failLeft = 0
	s.mu.Unlock()
	s.poke()
}

// emit hands an event to every subscription. It must be called with b.mu
// held.
func (b *Backend) emit(ev gpu.Event) {
	for s := range b.subs {
		s.push(ev)
	}
}

// FailEventWait makes the next n event waits of every open subscription
// fail (n < 0: until ClearFaults). Each subscription reports the failure
// once as gpu.EventMonitorError, without closing and without any event
// about a GPU, and gpu.EventMonitorRecovered when waits work again; events
// injected meanwhile are delivered after the recovery, as the driver keeps
// them queued.
func (b *Backend) FailEventWait(n int) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return gpu.ErrClosed
	}
	for s := range b.subs {
		s.failWaits(n)
	}
	b.log.Info("simulated event waits will fail", "count", n)
	return nil
}

// InjectXID makes the GPU report an XID error about the whole GPU.
func (b *Backend) InjectXID(index int, xid uint64) error {
	return b.injectXID(index, -1, -1, xid)
}

// InjectMIGXID makes the GPU report an XID error about one MIG device.
func (b *Backend) InjectMIGXID(index, gpuInstanceID, computeInstanceID int, xid uint64) error {
	return b.injectXID(index, gpuInstanceID, computeInstanceID, xid)
}

func (b *Backend) injectXID(index, gi, ci int, xid uint64) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	g, err := b.control(index, fmt.Sprintf("injecting XID %d", xid))
	if err != nil {
		return err
	}
	if gi >= 0 {
		if x := g.mig.instance(gi); x == nil || x.compute(ci) == nil {
			return fmt.Errorf("injecting XID %d: gpu %d (%s): MIG device %d/%d: %w", xid, index, g.uuid, gi, ci, gpu.ErrNotFound)
		}
	}
	g.tel.recordXID(xid)
	b.emit(gpu.Event{Kind: gpu.EventXID, UUID: g.uuid, Index: index, XID: xid,
		GPUInstanceID: gi, ComputeInstanceID: ci, Time: b.clock.Now()})
	b.log.Info("simulated XID", "gpu", index, "xid", xid, "gi", gi, "ci", ci)
	return nil
}

// InjectECC makes the GPU report a memory error: a corrected single-bit
// error, or an uncorrectable double-bit one, which also leaves a row
// remapping pending until the GPU is reset.
func (b *Backend) InjectECC(index int, doubleBit bool) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	g, err := b.control(index, "injecting an ECC error")
	if err != nil {
		return err
	}
	kind := gpu.EventECCSingleBit
	if doubleBit {
		kind = gpu.EventECCDoubleBit
		g.tel.ecc.VolatileDoubleBit++
		g.tel.ecc.AggregateDoubleBit++
		g.tel.remap.Uncorrectable++
		g.tel.remap.Pending = true
	} else {
		g.tel.ecc.VolatileSingleBit++
		g.tel.ecc.AggregateSingleBit++
	}
	b.emit(gpu.Event{Kind: kind, UUID: g.uuid, Index: index, GPUInstanceID: -1, ComputeInstanceID: -1, Time: b.clock.Now()})
	return nil
}
