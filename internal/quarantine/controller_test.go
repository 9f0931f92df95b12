package quarantine

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"

	configv1 "github.com/gpuplane/gpuplane/api/config/v1"
	"github.com/gpuplane/gpuplane/api/gpunode"
	"github.com/gpuplane/gpuplane/internal/gpu"
	"github.com/gpuplane/gpuplane/internal/health"
)

// fakePods is a node's pods by GPU; evict removes a pod unless its
// eviction is refused.
type fakePods struct {
	onGPU   map[int][]PodRef
	refuse  map[string]bool
	evicted []string
	listErr error
}

func (f *fakePods) OnGPU(_ context.Context, index int) ([]PodRef, error) {
	if f.listErr != nil {
		return nil, f.listErr
	}
	return slices.Clone(f.onGPU[index]), nil
}

func (f *fakePods) Evict(_ context.Context, p PodRef) error {
	if f.refuse[p.Name] {
		return apierrors.NewTooManyRequests("Cannot evict pod as it would violate the pod's disruption budget.", 10)
	}
	f.evicted = append(f.evicted, p.String())
	for i, pods := range f.onGPU {
		f.onGPU[i] = slices.DeleteFunc(pods, func(q PodRef) bool { return q == p })
	}
	return nil
}

type fakeGPUs struct {
	resetErr map[int]error
	checkErr map[int]error
	resets   []int
	checks   []int
}

func (f *fakeGPUs) Reset(_ context.Context, index int) error {
	f.resets = append(f.resets, index)
	return f.resetErr[index]
}

func (f *fakeGPUs) Check(_ context.Context, index int) error {
	f.checks = append(f.checks, index)
	return f.checkErr[index]
}

// fakeInventory records, at each read, the resets and checks of the GPUs
// done by then.
type fakeInventory struct {
	gpus  *fakeGPUs
	err   error
	reads []string
}

func (f *fakeInventory) Refresh(ctx context.Context) error {
	if _, ok := ctx.Deadline(); !ok {
		return errors.New("read without a deadline")
	}
	f.reads = append(f.reads, fmt.Sprintf("resets %v checks %v", f.gpus.resets, f.gpus.checks))
	return f.err
}

type fakeHolder struct{ held map[string]bool }

func (f *fakeHolder) Hold(uuid, _ string) { f.held[uuid] = true }
func (f *fakeHolder) Release(uuid string) { delete(f.held, uuid) }

type fakeNode struct {
	record   gpunode.QuarantineRecord
	writeErr error
	last     NodeStatus
	writes   int
	history  []NodeStatus
}

func (f *fakeNode) Record(context.Context) (gpunode.QuarantineRecord, error) { return f.record, nil }
func (f *fakeNode) Write(_ context.Context, s NodeStatus) error {
	if f.writeErr != nil {
		return f.writeErr
	}
	f.last = s
	f.writes++
	f.history = append(f.history, s)
	return nil
}

type fakeEvents struct {
	mu     sync.Mutex
	events []string
}

func (f *fakeEvents) Eventf(eventtype, reason, messageFmt string, args ...any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.events = append(f.events, eventtype+" "+reason+": "+fmt.Sprintf(messageFmt, args...))
}

func (f *fakeEvents) reasons() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for _, e := range f.events {
		out = append(out, strings.SplitN(strings.SplitN(e, ":", 2)[0], " ", 2)[1])
	}
	return out
}

type harness struct {
	t      *testing.T
	clock  *clocktesting.FakeClock
	pods   *fakePods
	gpus   *fakeGPUs
	holder *fakeHolder
	node   *fakeNode
	events *fakeEvents
	inv    *fakeInventory
	c      *Controller
}

// testPolicy is the default policy with short, distinct times.
func testPolicy() Policy {
	p := PolicyFrom(configv1.Quarantine{})
	p.Window = 10 * time.Minute
	p.EvictionTimeout = time.Minute
	p.ResetTimeout = 10 * time.Second
	p.Validation = 30 * time.Second
	p.ValidationTimeout = 2 * time.Minute
	p.RetryHeldAfter = time.Hour
	return p
}

func uuidOf(i int) string { return fmt.Sprintf("GPU-%d", i) }

func newHarness(t *testing.T, p Policy) *harness {
	t.Helper()
	h := &harness{
		t:      t,
		clock:  clocktesting.NewFakeClock(time.Date(2026, 11, 25, 17, 0, 0, 0, time.UTC)),
		pods:   &fakePods{onGPU: map[int][]PodRef{}, refuse: map[string]bool{}},
		gpus:   &fakeGPUs{resetErr: map[int]error{}, checkErr: map[int]error{}},
		holder: &fakeHolder{held: map[string]bool{}},
		node:   &fakeNode{},
		events: &fakeEvents{},
	}
	h.inv = &fakeInventory{gpus: h.gpus}
	var devices []gpu.Device
	for i := range 8 {
		devices = append(devices, gpu.Device{Index: i, UUID: uuidOf(i)})
		h.pods.onGPU[i] = []PodRef{{Namespace: "ml", Name: fmt.Sprintf("train-%d", i), UID: types.UID(fmt.Sprint(i))}}
	}
	c, err := New(Options{Policy: p, Devices: devices, Pods: h.pods, GPUs: h.gpus, Holder: h.holder, Node: h.node, Inventory: h.inv, Events: h.events, Clock: h.clock})
	if err != nil {
		t.Fatal(err)
	}
	h.c = c
	return h
}

func (h *harness) fault(index int, xid uint64) {
	h.c.Fault(context.Background(), health.Fault{GPU: index, UUID: uuidOf(index), XID: xid, Time: h.clock.Now()})
}

// advance steps the clock by d in steps of one second, driving the
// controller at each, as its ticker does.
func (h *harness) advance(d time.Duration) {
	for end := h.clock.Now().Add(d); h.clock.Now().Before(end); {
		h.clock.Step(time.Second)
		h.c.Step(context.Background())
	}
}

func (h *harness) state(index int) string {
	if s, ok := h.c.Quarantined()[index]; ok {
		return s
	}
	return stateInService
}

func (h *harness) wantState(index int, want string) {
	h.t.Helper()
	if got := h.state(index); got != want {
		h.t.Fatalf("GPU %d is %s, want %s; events:\n%s", index, got, want, strings.Join(h.events.events, "\n"))
	}
}

func (h *harness) wantCondition(status corev1.ConditionStatus, reason string, contains ...string) {
	h.t.Helper()
	c := h.node.last.Condition
	if c.Status != status || c.Reason != reason {
		h.t.Fatalf("condition = %+v, want %s %s", c, status, reason)
	}
	for _, s := range contains {
		if !strings.Contains(c.Message, s) {
			h.t.Fatalf("condition message %q does not say %q", c.Message, s)
		}
	}
}

func TestFallenOffTheBusRoundTrip(t *testing.T) {
	h := newHarness(t, testPolicy())
	h.c.Step(context.Background())
	h.wantCondition(corev1.ConditionFalse, gpunode.ReasonNoGPUQuarantined)

	h.fault(3, 79)
	// At once: the taint, the condition naming the GPU, its pod evicted.
	if h.node.last.TaintValue != "xid-79" {
		t.Fatalf("taint = %q, want xid-79", h.node.last.TaintValue)
	}
	h.wantCondition(corev1.ConditionTrue, gpunode.ReasonGPUQuarantined, "GPU 3 (GPU-3)", "XID 79", "bus")
	if !h.holder.held["GPU-3"] || len(h.holder.held) != 1 {
		t.Fatalf("held = %v, want GPU-3 only", h.holder.held)
	}
	if !slices.Equal(h.pods.evicted, []string{"ml/train-3"}) {
		t.Fatalf("evicted %v, want only ml/train-3", h.pods.evicted)
	}
	h.wantState(3, gpunode.QuarantineDraining)
	// The next step finds the GPU drained, resets it and revalidates.
	h.advance(time.Second)
	if !slices.Equal(h.gpus.resets, []int{3}) {
		t.Fatalf("resets = %v, want [3]", h.gpus.resets)
	}
	h.wantState(3, gpunode.QuarantineValidating)
	h.advance(20 * time.Second)
	h.wantState(3, gpunode.QuarantineValidating)
	if h.node.last.TaintValue == "" || !h.holder.held["GPU-3"] {
		t.Fatal("taint or hold lifted before revalidation passed")
	}
	h.advance(15 * time.Second)
	h.wantState(3, stateInService)
	if h.node.last.TaintValue != "" || h.holder.held["GPU-3"] {
		t.Fatalf("after revalidation: taint %q, held %v", h.node.last.TaintValue, h.holder.held)
	}
	h.wantCondition(corev1.ConditionFalse, gpunode.ReasonNoGPUQuarantined)
	if r := h.node.last.Record.GPUs; len(r) != 1 || r[0].State != gpunode.QuarantineReturned {
		t.Fatalf("record = %+v, want GPU 3 returned", r)
	}
	want := []string{ReasonQuarantined, ReasonEvicted, ReasonDrained, ReasonReset, ReasonReturned}
	if got := h.events.reasons(); !slices.Equal(got, want) {
		t.Fatalf("events %v, want %v", got, want)
	}
	// The record is dropped once the window has passed.
	h.advance(10 * time.Minute)
	if len(h.node.last.Record.GPUs) != 0 {
		t.Fatalf("record kept after the window: %+v", h.node.last.Record)
	}
}

func TestGPUScopedFaultDoesNotTaint(t *testing.T) {
	h := newHarness(t, testPolicy())
	h.fault(5, 48)
	if h.node.last.TaintValue != "" {
		t.Fatalf("a GPU-scoped fault tainted the node: %q", h.node.last.TaintValue)
	}
	h.wantCondition(corev1.ConditionTrue, gpunode.ReasonGPUQuarantined, "GPU 5 (GPU-5)", "XID 48", "memory-uncorrectable")
	// A node-wide fault on another GPU taints; lifting it keeps GPU 5.
	h.fault(2, 79)
	if h.node.last.TaintValue != "xid-79" {
		t.Fatalf("taint = %q", h.node.last.TaintValue)
	}
	if !slices.Equal(h.pods.evicted, []string{"ml/train-5", "ml/train-2"}) {
		t.Fatalf("evicted %v", h.pods.evicted)
	}
}

func TestFailingAgainWithinTheWindowStaysQuarantined(t *testing.T) {
	h := newHarness(t, testPolicy())
	h.fault(3, 79)
	h.advance(40 * time.Second)
	h.wantState(3, stateInService)
	h.pods.onGPU[3] = []PodRef{{Namespace: "ml", Name: "next", UID: "n"}}

	h.advance(5 * time.Minute)
	h.fault(3, 79)
	h.advance(time.Second)
	h.wantState(3, gpunode.QuarantineHeld)
	h.wantCondition(corev1.ConditionTrue, gpunode.ReasonGPUHeld, "GPU 3", "failed again", "failure 2")
	if h.node.last.TaintValue != "xid-79" || !h.holder.held["GPU-3"] {
		t.Fatal("a GPU that failed again is not tainted and held")
	}
	if len(h.gpus.resets) != 1 {
		t.Fatalf("resets = %v: a GPU that failed again must not be reset at once", h.gpus.resets)
	}
	if !slices.Contains(h.pods.evicted, "ml/next") {
		t.Fatal("the pod that came after the first return was not evicted")
	}
	if got := h.events.reasons(); !slices.Contains(got, ReasonFailedAgain) || !slices.Contains(got, ReasonHeld) {
		t.Fatalf("events %v lack %s and %s", got, ReasonFailedAgain, ReasonHeld)
	}
	// Never stuck: after retryHeldAfter it is reset and revalidated.
	h.advance(time.Hour)
	h.wantState(3, gpunode.QuarantineValidating)
	h.advance(31 * time.Second)
	h.wantState(3, stateInService)
}

func TestFailingAfterTheWindowStartsAfresh(t *testing.T) {
	h := newHarness(t, testPolicy())
	h.fault(1, 48)
	h.advance(40 * time.Second)
	h.wantState(1, stateInService)
	h.advance(11 * time.Minute)
	h.fault(1, 48)
	h.advance(time.Second)
	h.wantState(1, gpunode.QuarantineValidating)
	if len(h.gpus.resets) != 2 {
		t.Fatalf("resets = %v", h.gpus.resets)
	}
}

func TestResetFailureHolds(t *testing.T) {
	tests := []struct {
		name     string
		err      error
		says     string
		retryTo  string
		resetsAt int
	}{
		{"refused", errors.New("simulated NVML failure"), "reset failed: simulated NVML failure", gpunode.QuarantineResetting, 2},
		{"not supported", fmt.Errorf("run nvidia-smi --gpu-reset -i 3: %w", gpu.ErrNotSupported), "nvidia-smi --gpu-reset -i 3", gpunode.QuarantineValidating, 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, testPolicy())
			h.gpus.resetErr[3] = tc.err
			h.fault(3, 79)
			h.advance(time.Second)
			h.wantState(3, gpunode.QuarantineHeld)
			h.wantCondition(corev1.ConditionTrue, gpunode.ReasonGPUHeld, "GPU 3 (GPU-3)", tc.says, "until 2026-11-25T18:00:01Z")
			if h.node.last.TaintValue != "xid-79" {
				t.Fatal("taint lifted although the reset failed")
			}
			if !slices.Contains(h.events.reasons(), ReasonResetFailed) {
				t.Fatalf("no %s event: %v", ReasonResetFailed, h.events.events)
			}
			h.advance(time.Hour)
			if len(h.gpus.resets) != tc.resetsAt {
				t.Fatalf("resets %v, want %d", h.gpus.resets, tc.resetsAt)
			}
			if tc.retryTo == gpunode.QuarantineValidating {
				// A GPU reset by hand passes revalidation and returns.
				h.advance(31 * time.Second)
				h.wantState(3, stateInService)
			} else {
				h.wantState(3, gpunode.QuarantineHeld)
			}
		})
	}
}

func TestResetReadsTheInventoryAgain(t *testing.T) {
	refreshes := func(h *harness, result string) float64 {
		var m dto.Metric
		if err := h.c.o.Metrics.refreshes.WithLabelValues(result).Write(&m); err != nil {
			t.Fatal(err)
		}
		return m.GetCounter().GetValue()
	}
	t.Run("after the reset, before revalidation", func(t *testing.T) {
		h := newHarness(t, testPolicy())
		h.fault(3, 48)
		h.advance(time.Second)
		h.wantState(3, gpunode.QuarantineValidating)
		if want := []string{"resets [3] checks []"}; !slices.Equal(h.inv.reads, want) {
			t.Fatalf("inventory reads %q, want %q", h.inv.reads, want)
		}
		if n := refreshes(h, "ok"); n != 1 {
			t.Errorf("%v reads counted ok, want 1", n)
		}
		h.advance(31 * time.Second)
		h.wantState(3, stateInService)
		if len(h.inv.reads) != 1 {
			t.Errorf("inventory reads %q: once per reset", h.inv.reads)
		}
	})
	t.Run("a failed read is told and the GPU still returns", func(t *testing.T) {
		h := newHarness(t, testPolicy())
		h.inv.err = errors.New("listing GPUs: NVML timed out")
		h.fault(3, 48)
		h.advance(time.Second)
		h.wantState(3, gpunode.QuarantineValidating)
		var told bool
		for _, e := range h.events.events {
			told = told || strings.HasPrefix(e, corev1.EventTypeWarning+" "+ReasonRefreshFailed+": GPU 3 (GPU-3)") && strings.Contains(e, "NVML timed out") && strings.Contains(e, "restart the agent")
		}
		if !told {
			t.Errorf("no %s event naming GPU 3, the error and what to do: %q", ReasonRefreshFailed, h.events.events)
		}
		if n := refreshes(h, "failed"); n != 1 {
			t.Errorf("%v reads counted failed, want 1", n)
		}
		h.advance(31 * time.Second)
		h.wantState(3, stateInService)
	})
	t.Run("no read without a reset", func(t *testing.T) {
		p := testPolicy()
		no := false
		p.Classes = append([]configv1.QuarantineClass{{Name: "watch", XIDs: []uint64{74}, Scope: configv1.ScopeGPU, Reset: &no}}, p.Classes...)
		h := newHarness(t, p)
		h.gpus.resetErr[5] = errors.New("stuck")
		h.fault(2, 74)
		h.fault(5, 48)
		h.advance(time.Second)
		h.wantState(2, gpunode.QuarantineValidating)
		h.wantState(5, gpunode.QuarantineHeld)
		if len(h.inv.reads) != 0 {
			t.Errorf("inventory reads %q without a reset", h.inv.reads)
		}
	})
	t.Run("a driver without reset: read when the hold for a reset by hand ends", func(t *testing.T) {
		h := newHarness(t, testPolicy())
		h.gpus.resetErr[3] = fmt.Errorf("run nvidia-smi --gpu-reset -i 3: %w", gpu.ErrNotSupported)
		h.fault(3, 48)
		h.advance(time.Second)
		h.wantState(3, gpunode.QuarantineHeld)
		if len(h.inv.reads) != 0 {
			t.Fatalf("inventory reads %q before the GPU was reset", h.inv.reads)
		}
		h.advance(time.Hour)
		h.wantState(3, gpunode.QuarantineValidating)
		if want := []string{"resets [3] checks []"}; !slices.Equal(h.inv.reads, want) {
			t.Fatalf("inventory reads %q, want %q", h.inv.reads, want)
		}
	})
	t.Run("none to read", func(t *testing.T) {
		h := newHarness(t, testPolicy())
		h.c.o.Inventory = nil
		h.fault(3, 48)
		h.advance(32 * time.Second)
		h.wantState(3, stateInService)
		if n := refreshes(h, "ok") + refreshes(h, "failed"); n != 0 {
			t.Errorf("%v reads counted with no inventory", n)
		}
	})
}

func TestDrainingWaitsForRefusedEvictions(t *testing.T) {
	h := newHarness(t, testPolicy())
	h.pods.refuse["train-4"] = true
	h.fault(4, 94)
	h.advance(30 * time.Second)
	h.wantState(4, gpunode.QuarantineDraining)
	h.wantCondition(corev1.ConditionTrue, gpunode.ReasonGPUQuarantined, "waiting for 1 pods to leave: ml/train-4")
	refusals := 0
	for _, r := range h.events.reasons() {
		if r == ReasonEvictionRefused {
			refusals++
		}
	}
	if refusals != 1 {
		t.Fatalf("%d refusal events, want 1 (retries are not events)", refusals)
	}
	h.advance(31 * time.Second)
	if !slices.Contains(h.events.reasons(), ReasonEvictionTimedOut) {
		t.Fatalf("no %s event: %v", ReasonEvictionTimedOut, h.events.reasons())
	}
	h.wantState(4, gpunode.QuarantineValidating)
}

func TestValidation(t *testing.T) {
	t.Run("a fault during validation holds", func(t *testing.T) {
		h := newHarness(t, testPolicy())
		h.fault(6, 95)
		h.advance(5 * time.Second)
		h.wantState(6, gpunode.QuarantineValidating)
		h.fault(6, 95)
		h.wantState(6, gpunode.QuarantineHeld)
		h.wantCondition(corev1.ConditionTrue, gpunode.ReasonGPUHeld, "XID 95 during revalidation")
	})
	t.Run("a fault seen before the reset is not a new one", func(t *testing.T) {
		h := newHarness(t, testPolicy())
		h.fault(6, 79)
		h.advance(2 * time.Second)
		h.wantState(6, gpunode.QuarantineValidating)
		h.c.Fault(context.Background(), health.Fault{GPU: 6, UUID: "GPU-6", XID: 79, Time: h.clock.Now().Add(-10 * time.Second)})
		h.wantState(6, gpunode.QuarantineValidating)
	})
	t.Run("no answer within the timeout holds", func(t *testing.T) {
		h := newHarness(t, testPolicy())
		h.gpus.checkErr[6] = gpu.ErrGPULost
		h.fault(6, 79)
		h.advance(time.Minute)
		h.wantState(6, gpunode.QuarantineValidating)
		h.wantCondition(corev1.ConditionTrue, gpunode.ReasonGPUQuarantined, "does not answer")
		h.advance(time.Minute + time.Second)
		h.wantState(6, gpunode.QuarantineHeld)
		h.wantCondition(corev1.ConditionTrue, gpunode.ReasonGPUHeld, "did not answer within 2m0s")
	})
	t.Run("answering must be continuous", func(t *testing.T) {
		h := newHarness(t, testPolicy())
		h.fault(6, 48)
		h.advance(20 * time.Second)
		h.gpus.checkErr[6] = errors.New("timeout")
		h.advance(2 * time.Second)
		delete(h.gpus.checkErr, 6)
		h.advance(20 * time.Second)
		h.wantState(6, gpunode.QuarantineValidating)
		h.advance(15 * time.Second)
		h.wantState(6, stateInService)
	})
}

func TestClassesWithoutEvictionOrReset(t *testing.T) {
	p := testPolicy()
	no := false
	p.Classes = append([]configv1.QuarantineClass{{Name: "watch", XIDs: []uint64{74}, Scope: configv1.ScopeGPU, Evict: &no, Reset: &no}}, p.Classes...)
	h := newHarness(t, p)
	h.fault(2, 74)
	h.wantState(2, gpunode.QuarantineValidating)
	h.advance(31 * time.Second)
	h.wantState(2, stateInService)
	if len(h.pods.evicted) != 0 || len(h.gpus.resets) != 0 {
		t.Fatalf("evicted %v, reset %v: the class does neither", h.pods.evicted, h.gpus.resets)
	}
}

func TestNeverStuck(t *testing.T) {
	// The worst case: pods that never leave, a GPU that never answers, a
	// reset that always fails. Every state still moves on within its
	// timeout, and the GPU is never silently returned.
	h := newHarness(t, testPolicy())
	h.pods.refuse["train-0"] = true
	h.gpus.resetErr[0] = errors.New("stuck")
	h.gpus.checkErr[0] = gpu.ErrGPULost
	h.fault(0, 79)
	seen := map[string]bool{}
	for range 3 * 3700 {
		h.advance(time.Second)
		seen[h.state(0)] = true
		if h.state(0) == stateInService {
			t.Fatal("a GPU that never answered returned to service")
		}
	}
	for _, s := range []string{gpunode.QuarantineDraining, gpunode.QuarantineHeld} {
		if !seen[s] {
			t.Errorf("never in %s: %v", s, seen)
		}
	}
	if len(h.gpus.resets) < 3 {
		t.Fatalf("resets %v: a held GPU is retried every hour", h.gpus.resets)
	}
	// The GPU is mended: the next retry returns it.
	delete(h.gpus.resetErr, 0)
	delete(h.gpus.checkErr, 0)
	h.advance(time.Hour + 31*time.Second)
	h.wantState(0, stateInService)
}

func TestResumeFromTheRecord(t *testing.T) {
	h := newHarness(t, testPolicy())
	since := h.clock.Now().Add(-30 * time.Minute)
	h.node.record = gpunode.QuarantineRecord{V: 1, GPUs: []gpunode.QuarantinedGPU{
		{Index: 2, UUID: "GPU-2", XID: 79, Class: "bus", State: gpunode.QuarantineHeld, Node: true, Since: since, Fails: 2},
		{Index: 4, UUID: "GPU-4", XID: 48, Class: "memory-uncorrectable", State: gpunode.QuarantineResetting, Since: since, Fails: 1},
		{Index: 5, UUID: "GPU-5", XID: 94, Class: "memory-contained", State: gpunode.QuarantineReturned, Since: h.clock.Now().Add(-5 * time.Minute), Fails: 1},
		{Index: 7, UUID: "GPU-gone", XID: 79, Class: "bus", State: gpunode.QuarantineHeld, Since: since, Fails: 1},
	}}
	h.c.Step(context.Background())
	h.wantState(2, gpunode.QuarantineHeld)
	h.wantState(4, gpunode.QuarantineValidating) // reset again at once
	h.wantState(7, stateInService)
	if !h.holder.held["GPU-2"] || !h.holder.held["GPU-4"] || h.holder.held["GPU-5"] {
		t.Fatalf("held = %v", h.holder.held)
	}
	if h.node.last.TaintValue != "xid-79" {
		t.Fatalf("taint = %q", h.node.last.TaintValue)
	}
	// The returned GPU keeps its window: a fault within it holds it.
	h.fault(5, 94)
	h.advance(time.Second)
	h.wantState(5, gpunode.QuarantineHeld)
	// The held GPU keeps its time: retried 30 minutes later, not an hour.
	h.advance(30*time.Minute - 2*time.Second)
	h.wantState(2, gpunode.QuarantineHeld)
	h.advance(2 * time.Second)
	h.wantState(2, gpunode.QuarantineValidating)
}

func TestNodeWriteRetried(t *testing.T) {
	h := newHarness(t, testPolicy())
	h.node.writeErr = apierrors.NewServiceUnavailable("etcd leader changed")
	h.fault(3, 79)
	if h.node.writes != 0 {
		t.Fatal("a failed write counted")
	}
	h.node.writeErr = nil
	h.advance(time.Second)
	if h.node.last.TaintValue != "xid-79" {
		t.Fatalf("the taint was not written on retry: %+v", h.node.last)
	}
}

func TestAQuickReturnIsShownFirst(t *testing.T) {
	p := testPolicy()
	p.Validation = 0
	h := newHarness(t, p)
	h.pods.onGPU[3] = nil
	h.c.Step(context.Background())
	h.fault(3, 79)
	h.advance(time.Second)
	h.wantState(3, stateInService)
	tainted := false
	for _, s := range h.node.history {
		tainted = tainted || s.TaintValue == "xid-79" && s.Condition.Reason == gpunode.ReasonGPUQuarantined
	}
	if !tainted {
		t.Fatalf("the Node never showed the fault: %+v", h.node.history)
	}
	if h.node.last.TaintValue != "" {
		t.Fatal("the taint stayed after the GPU returned")
	}
}

func TestEvictsEveryPodOfTheGPU(t *testing.T) {
	h := newHarness(t, testPolicy())
	// Pods the agent's watch has not shown yet have no UID.
	h.pods.onGPU[1] = []PodRef{{Namespace: "ml", Name: "a"}, {Namespace: "ml", Name: "b"}, {Namespace: "web", Name: "a"}}
	h.fault(1, 48)
	if !slices.Equal(h.pods.evicted, []string{"ml/a", "ml/b", "web/a"}) {
		t.Fatalf("evicted %v, want every pod of GPU 1 and no other", h.pods.evicted)
	}
}
