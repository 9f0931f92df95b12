package nvml

import (
	"context"
	"sync"
	"testing"
	"time"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"

	"github.com/gpuplane/gpuplane/internal/gpu"
)

func TestSubscriptionSurvivesFailedWaits(t *testing.T) {
	s := fakeDGX(t)
	for i, d := range s.Devices {
		dev := d.(*server.Device)
		dev.GetSupportedEventTypesFunc = func() (uint64, gonvml.Return) { return watchedEvents, gonvml.SUCCESS }
		dev.RegisterEventsFunc = func(uint64, gonvml.EventSet) gonvml.Return {
			if i == 6 {
				return gonvml.ERROR_NOT_SUPPORTED
			}
			return gonvml.SUCCESS
		}
	}
	// The event set fails twice, then reports an XID on GPU 3, then only
	// times out.
	var mu sync.Mutex
	script := []gonvml.Return{gonvml.ERROR_UNKNOWN, gonvml.ERROR_UNKNOWN, gonvml.SUCCESS}
	set := &mock.EventSet{
		WaitFunc: func(uint32) (gonvml.EventData, gonvml.Return) {
			mu.Lock()
			defer mu.Unlock()
			if len(script) == 0 {
				return gonvml.EventData{}, gonvml.ERROR_TIMEOUT
			}
			ret := script[0]
			script = script[1:]
			if ret != gonvml.SUCCESS {
				return gonvml.EventData{}, ret
			}
			return gonvml.EventData{Device: s.Devices[3], EventType: gonvml.EventTypeXidCriticalError, EventData: 79,
				GpuInstanceId: noInstance, ComputeInstanceId: noInstance}, gonvml.SUCCESS
		},
		FreeFunc: func() gonvml.Return { return gonvml.SUCCESS },
	}
	s.EventSetCreateFunc = func() (gonvml.EventSet, gonvml.Return) { return set, gonvml.SUCCESS }
	b, err := Open(Options{Library: s})
	if err != nil {
		t.Fatal(err)
	}
	sub, err := b.Subscribe(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	if _, ok := sub.Unmonitored()[s.Devices[6].(*server.Device).UUID]; !ok || len(sub.Unmonitored()) != 1 {
		t.Errorf("Unmonitored = %v, want GPU 6 only", sub.Unmonitored())
	}
	var kinds []gpu.EventKind
	deadline := time.After(10 * time.Second)
	for len(kinds) < 3 {
		select {
		case ev := <-sub.Events():
			kinds = append(kinds, ev.Kind)
			if ev.Kind == gpu.EventXID && (ev.Index != 3 || ev.XID != 79 || ev.GPUInstanceID != -1) {
				t.Errorf("XID event = %+v, want XID 79 on GPU 3", ev)
			}
			if ev.Kind != gpu.EventXID && ev.Index != -1 {
				t.Errorf("monitor event names GPU %d", ev.Index)
			}
		case <-deadline:
			t.Fatalf("events so far %v, want monitor-error, monitor-recovered, xid", kinds)
		}
	}
	want := []gpu.EventKind{gpu.EventMonitorError, gpu.EventMonitorRecovered, gpu.EventXID}
	for i := range want {
		if kinds[i] != want[i] {
			t.Fatalf("events = %v, want %v", kinds, want)
		}
	}
	if err := sub.Close(); err != nil {
		t.Fatal(err)
	}
	if _, open := <-sub.Events(); open {
		t.Error("events channel still open after Close")
	}
}
