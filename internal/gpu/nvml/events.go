package nvml

import (
	"context"
	"fmt"
	"sync"
	"time"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpuplane/gpuplane/internal/gpu"
)

const (
	watchedEvents = gonvml.EventTypeXidCriticalError | gonvml.EventTypeSingleBitEccError | gonvml.EventTypeDoubleBitEccError
	// waitTimeout bounds one EventSet.Wait so the loop notices a cancelled
	// context promptly.
	waitTimeout = 500 * time.Millisecond
	// maxBackoff caps the pause between failed waits.
	maxBackoff = 10 * time.Second
)

// Subscribe implements gpu.Events. GPUs whose events cannot be registered
// are listed by Unmonitored instead of failing the subscription. A failed
// wait is reported once as EventMonitorError and retried with backoff; it
// never turns into an event about any GPU.
func (b *Backend) Subscribe(ctx context.Context) (gpu.Subscription, error) {
	n, err := b.checkOpen()
	if err != nil {
		return nil, err
	}
	set, ret := b.lib.EventSetCreate()
	if ret != gonvml.SUCCESS {
		return nil, retError("creating NVML event set", ret)
	}
	sub := &subscription{
		ch:          make(chan gpu.Event, 64),
		unmonitored: map[string]error{},
		byUUID:      map[string]int{},
	}
	for i := range n {
		h, err := b.handle(i)
		if err != nil {
			sub.unmonitored[fmt.Sprintf("gpu-%d", i)] = err
			continue
		}
		uuid, ret := h.GetUUID()
		if ret != gonvml.SUCCESS {
			sub.unmonitored[fmt.Sprintf("gpu-%d", i)] = retError("reading UUID", ret)
			continue
		}
		sub.byUUID[uuid] = i
		supported, ret := h.GetSupportedEventTypes()
		if ret != gonvml.SUCCESS {
			sub.unmonitored[uuid] = retError(fmt.Sprintf("gpu %d: reading supported events", i), ret)
			continue
		}
		if ret := h.RegisterEvents(supported&watchedEvents, set); ret != gonvml.SUCCESS {
			sub.unmonitored[uuid] = retError(fmt.Sprintf("gpu %d: registering for events", i), ret)
		}
	}
	ctx, sub.cancel = context.WithCancel(ctx)
	sub.done = make(chan struct{})
	go sub.loop(ctx, set)
	return sub, nil
}

type subscription struct {
	ch          chan gpu.Event
	unmonitored map[string]error
	byUUID      map[string]int
	cancel      context.CancelFunc
	done        chan struct{}
	closeOnce   sync.Once
}

func (s *subscription) Events() <-chan gpu.Event      { return s.ch }
func (s *subscription) Unmonitored() map[string]error { return s.unmonitored }

func (s *subscription) Close() error {
	s.closeOnce.Do(func() { s.cancel(); <-s.done })
	return nil
}

func (s *subscription) loop(ctx context.Context, set gonvml.EventSet) {
	defer close(s.done)
	defer close(s.ch)
	defer func() { _ = set.Free() }()
	failing, backoff := false, 100*time.Millisecond
	for ctx.Err() == nil {
		data, ret := set.Wait(uint32(waitTimeout / time.Millisecond))
		switch ret {
		case gonvml.SUCCESS:
		case gonvml.ERROR_TIMEOUT:
			if failing {
				failing, backoff = false, 100*time.Millisecond
				s.send(ctx, gpu.Event{Kind: gpu.EventMonitorRecovered, Index: -1, Time: time.Now()})
			}
			continue
		default:
			if !failing {
				failing = true
				s.send(ctx, gpu.Event{Kind: gpu.EventMonitorError, Index: -1, Time: time.Now(),
					Err: retError("waiting for GPU events", ret)})
			}
			select {
			case <-ctx.Done():
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, maxBackoff)
			continue
		}
		if failing {
			failing, backoff = false, 100*time.Millisecond
			s.send(ctx, gpu.Event{Kind: gpu.EventMonitorRecovered, Index: -1, Time: time.Now()})
		}
		if ev, ok := s.translate(data); ok {
			s.send(ctx, ev)
		}
	}
}

func (s *subscription) translate(data gonvml.EventData) (gpu.Event, bool) {
	ev := gpu.Event{Index: -1, GPUInstanceID: -1, ComputeInstanceID: -1, Time: time.Now()}
	switch data.EventType {
	case gonvml.EventTypeXidCriticalError:
		ev.Kind, ev.XID = gpu.EventXID, data.EventData
	case gonvml.EventTypeSingleBitEccError:
		ev.Kind = gpu.EventECCSingleBit
	case gonvml.EventTypeDoubleBitEccError:
		ev.Kind = gpu.EventECCDoubleBit
	default:
		return ev, false
	}
	if data.Device != nil {
		if uuid, ret := data.Device.GetUUID(); ret == gonvml.SUCCESS {
			ev.UUID = uuid
			if i, ok := s.byUUID[uuid]; ok {
				ev.Index = i
			}
		}
	}
	if data.GpuInstanceId != noInstance {
		ev.GPUInstanceID = int(data.GpuInstanceId)
	}
	if data.ComputeInstanceId != noInstance {
		ev.ComputeInstanceID = int(data.ComputeInstanceId)
	}
	return ev, true
}

func (s *subscription) send(ctx context.Context, ev gpu.Event) {
	select {
	case s.ch <- ev:
	case <-ctx.Done():
	}
}
