package mig_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpuplane/gpuplane/api/gpunode"
	"github.com/gpuplane/gpuplane/internal/gpu"
	"github.com/gpuplane/gpuplane/internal/gpu/sim"
	"github.com/gpuplane/gpuplane/internal/mig"
)

// fakeCluster is an in-memory API server and kubelet: pods hold GPUs,
// evictions remove them unless blocked.
type fakeCluster struct {
	mu       sync.Mutex
	name     string
	config   []byte
	cmErr    error
	pods     []mig.Pod
	blocked  map[string]bool
	evicted  []string
	statuses []mig.Status
}

func (f *fakeCluster) Desired(context.Context) (string, []byte, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.name, f.config, f.cmErr
}

func (f *fakeCluster) PodsOn(_ context.Context, gpus map[int]bool) ([]mig.Pod, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []mig.Pod
	for _, p := range f.pods {
		for _, g := range p.GPUs {
			if gpus[g] {
				out = append(out, p)
				break
			}
		}
	}
	return out, nil
}

func (f *fakeCluster) Evict(_ context.Context, p mig.Pod) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.blocked[p.Name] {
		return fmt.Errorf("pod %s: Cannot evict pod as it would violate the pod's disruption budget: %w", p, mig.ErrEvictionBlocked)
	}
	f.evicted = append(f.evicted, p.Name)
	for i, q := range f.pods {
		if q.UID == p.UID {
			f.pods = append(f.pods[:i], f.pods[i+1:]...)
			break
		}
	}
	return nil
}

func (f *fakeCluster) SetStatus(_ context.Context, s mig.Status) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.statuses = append(f.statuses, s)
	return nil
}

// fakeDevices records what the device plugin was told.
type fakeDevices struct {
	withdrawn [][]int
	refreshed int
}

func (d *fakeDevices) Withdraw(gpus []int)           { d.withdrawn = append(d.withdrawn, gpus) }
func (d *fakeDevices) Refresh(context.Context) error { d.refreshed++; return nil }

const twoConfigs = `version: v1
mig-configs:
  all-1g.10gb:
    - devices: all
      mig-enabled: true
      mig-devices: {"1g.10gb": 7}
  gpu3-big:
    - devices: all
      mig-enabled: true
      mig-devices: {"1g.10gb": 7}
    - devices: [3]
      mig-enabled: true
      mig-devices: {"3g.40gb": 2}
  too-big:
    - devices: [3]
      mig-enabled: true
      mig-devices: {"3g.40gb": 3}
`

// partitioned returns a simulated DGX H100 with every GPU in 7x1g.10gb and
// a pod on each GPU.
func partitioned(t *testing.T) (*sim.Backend, *fakeCluster, *fakeDevices, *mig.Reconciler) {
	t.Helper()
	b := newSim(t, "dgxh100")
	spec, err := mig.ParseBytes([]byte(twoConfigs))
	if err != nil {
		t.Fatal(err)
	}
	gpus, _ := mig.GPUs(context.Background(), b)
	p, err := mig.NewPlan(spec, "all-1g.10gb", gpus)
	if err != nil {
		t.Fatal(err)
	}
	applyPlan(t, b, p)
	c := &fakeCluster{config: []byte(twoConfigs), blocked: map[string]bool{}}
	for i := range 8 {
		c.pods = append(c.pods, mig.Pod{Namespace: "ml", Name: fmt.Sprintf("train-%d", i), UID: fmt.Sprintf("uid-%d", i), GPUs: []int{i}})
	}
	d := &fakeDevices{}
	r := &mig.Reconciler{HW: b, Cluster: c, Devices: d, EvictionTimeout: 200 * time.Millisecond, Poll: 10 * time.Millisecond}
	return b, c, d, r
}

func TestReconcileChangesOneGPU(t *testing.T) {
	b, c, d, r := partitioned(t)
	before, _ := b.Devices(context.Background())
	c.name = "gpu3-big"
	out := r.Reconcile(context.Background())
	if out.Status.State != gpunode.MIGConfigStateSuccess || out.Retry {
		t.Fatalf("outcome %+v", out)
	}
	if len(c.evicted) != 1 || c.evicted[0] != "train-3" {
		t.Fatalf("evicted %v, want train-3 alone", c.evicted)
	}
	if len(d.withdrawn) < 1 || fmt.Sprint(d.withdrawn[0]) != "[3]" || d.refreshed != 1 {
		t.Fatalf("withdrawn %v, refreshed %d", d.withdrawn, d.refreshed)
	}
	for _, s := range c.statuses {
		if len(s.GPUs) != 8 {
			t.Fatalf("status without the node's GPUs: %+v", s)
		}
	}
	states := make([]string, len(c.statuses))
	for i, s := range c.statuses {
		states[i] = s.State + "/" + s.Reason
	}
	if got := strings.Join(states, " "); got != "pending/EvictingPods pending/Applying success/Applied" {
		t.Errorf("statuses %s", got)
	}
	after, _ := b.Devices(context.Background())
	for i := range after {
		if i == 3 {
			if len(after[i].MIGDevices) != 2 || after[i].MIGDevices[0].Profile != "3g.40gb" {
				t.Errorf("GPU 3: %+v", after[i].MIGDevices)
			}
			continue
		}
		for j := range after[i].MIGDevices {
			if after[i].MIGDevices[j].UUID != before[i].MIGDevices[j].UUID {
				t.Errorf("GPU %d device %d changed", i, j)
			}
		}
	}
	// A second pass finds nothing to do and touches nothing.
	c.evicted = nil
	if out := r.Reconcile(context.Background()); out.Status.State != gpunode.MIGConfigStateSuccess || len(out.Plan.Changes) != 0 || len(c.evicted) != 0 {
		t.Fatalf("second pass %+v, evicted %v", out, c.evicted)
	}
}

func TestReconcileBadInputEvictsNothing(t *testing.T) {
	for _, tc := range []struct {
		name, label, config string
		cmErr               error
		want                string
	}{
		{name: "layout exceeds the GPU", label: "too-big", config: twoConfigs, want: `mig-configs.too-big[0].mig-devices."3g.40gb": the layout does not fit the GPU: 3 devices asked, the GPU holds at most 2`},
		{name: "config not in the ConfigMap", label: "all-7g.80gb", config: twoConfigs, want: `no config named "all-7g.80gb"`},
		{name: "malformed ConfigMap", label: "gpu3-big", config: "version: v1\nmig-configs:\n  gpu3-big:\n    - devices: all\n      mig-enabled: yes please\n", want: "the MIG ConfigMap: mig-configs.gpu3-big[0].mig-enabled: want true or false"},
		{name: "unknown profile", label: "x", config: "version: v1\nmig-configs:\n  x:\n    - devices: [1]\n      mig-enabled: true\n      mig-devices: {\"1g.5gb\": 7}\n", want: `mig-configs.x[0].mig-devices."1g.5gb": the GPU does not offer this MIG profile`},
		{name: "device that does not exist", label: "x", config: "version: v1\nmig-configs:\n  x:\n    - devices: [8]\n      mig-enabled: true\n      mig-devices: {\"1g.10gb\": 7}\n", want: "mig-configs.x[0].devices[0]: the MIG config does not fit this node: GPU 8 does not exist"},
		{name: "ConfigMap unreadable", label: "x", cmErr: errors.New(`configmap gpuplane/mig-parted-config has no key "config.yaml"`), want: `has no key "config.yaml"; the GPUs keep their layout`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, c, d, r := partitioned(t)
			before, _ := b.Devices(context.Background())
			c.name, c.config, c.cmErr = tc.label, []byte(tc.config), tc.cmErr
			out := r.Reconcile(context.Background())
			if out.Status.State != gpunode.MIGConfigStateFailed || out.Status.Reason != gpunode.ReasonMIGInvalidConfig || out.Retry {
				t.Fatalf("outcome %+v", out)
			}
			if !strings.Contains(out.Status.Message, tc.want) {
				t.Errorf("message %q lacks %q", out.Status.Message, tc.want)
			}
			if len(c.evicted) != 0 || len(d.withdrawn) != 0 {
				t.Errorf("evicted %v, withdrew %v", c.evicted, d.withdrawn)
			}
			after, _ := b.Devices(context.Background())
			for i := range after {
				if len(after[i].MIGDevices) != len(before[i].MIGDevices) {
					t.Errorf("GPU %d changed", i)
				}
			}
		})
	}
}

func TestReconcilePDBBlocks(t *testing.T) {
	b, c, _, r := partitioned(t)
	c.name = "gpu3-big"
	c.blocked["train-3"] = true
	out := r.Reconcile(context.Background())
	if out.Status.State != gpunode.MIGConfigStateFailed || out.Status.Reason != gpunode.ReasonMIGEvictionBlocked || !out.Retry {
		t.Fatalf("outcome %+v", out)
	}
	if !strings.Contains(out.Status.Message, "ml/train-3: pod ml/train-3: Cannot evict pod as it would violate the pod's disruption budget") ||
		!strings.Contains(out.Status.Message, "GPUs 3 keep their layout and take no new pods") {
		t.Errorf("message %q", out.Status.Message)
	}
	devs, _ := b.Devices(context.Background())
	if len(devs[3].MIGDevices) != 7 {
		t.Errorf("GPU 3 changed while its pod stayed")
	}
	// The budget allows it again: the next pass finishes.
	delete(c.blocked, "train-3")
	if out := r.Reconcile(context.Background()); out.Status.State != gpunode.MIGConfigStateSuccess {
		t.Fatalf("after the PDB allows: %+v", out)
	}
}

func TestReconcileRollsBack(t *testing.T) {
	b, c, d, r := partitioned(t)
	c.name = "gpu3-big"
	if err := b.FailCall(sim.OpCreateComputeInstance, 3, errors.New("injected: the driver refuses")); err != nil {
		t.Fatal(err)
	}
	r.HW = &failOnce{Backend: b}
	out := r.Reconcile(context.Background())
	if out.Status.State != gpunode.MIGConfigStateFailed || out.Status.Reason != gpunode.ReasonMIGRolledBack {
		t.Fatalf("outcome %+v", out)
	}
	if !strings.Contains(out.Status.Message, "rolled back to mig: 7x1g.10gb") || !strings.Contains(out.Status.Message, "the driver refuses") {
		t.Errorf("message %q", out.Status.Message)
	}
	devs, _ := b.Devices(context.Background())
	if len(devs[3].MIGDevices) != 7 {
		t.Errorf("GPU 3 has %d devices after the roll-back", len(devs[3].MIGDevices))
	}
	if d.refreshed != 1 || len(d.withdrawn[len(d.withdrawn)-1]) != 0 {
		t.Errorf("the old devices are not offered again: withdrawn %v, refreshed %d", d.withdrawn, d.refreshed)
	}
	if out.Retry {
		t.Error("a refused layout is retried with back-off")
	}

	// A pod lands on GPU 3 again. The periodic pass, the label and the
	// ConfigMap unchanged, must not withdraw GPU 3 or evict it.
	c.pods = append(c.pods, mig.Pod{Namespace: "ml", Name: "late", UID: "uid-late", GPUs: []int{3}})
	c.evicted, d.withdrawn = nil, nil
	for pass := range 2 {
		out := r.Reconcile(context.Background())
		if out.Status.State != gpunode.MIGConfigStateFailed || out.Status.Reason != gpunode.ReasonMIGRolledBack || out.Retry {
			t.Fatalf("pass %d: outcome %+v", pass, out.Status)
		}
		if !strings.Contains(out.Status.Message, "the driver refuses") || !strings.Contains(out.Status.Message, "not tried again") {
			t.Errorf("pass %d: message %q", pass, out.Status.Message)
		}
	}
	if len(c.evicted) != 0 {
		t.Errorf("evicted %v for a layout refused before", c.evicted)
	}
	for _, w := range d.withdrawn {
		if len(w) != 0 {
			t.Errorf("withdrew %v for a layout refused before", w)
		}
	}

	t.Run("tried again when the ConfigMap changes", func(t *testing.T) {
		c.config = append(append([]byte{}, twoConfigs...), "# edited\n"...)
		out := r.Reconcile(context.Background())
		if out.Status.State != gpunode.MIGConfigStateSuccess {
			t.Fatalf("outcome %+v", out.Status)
		}
		if len(c.evicted) != 1 || c.evicted[0] != "late" {
			t.Errorf("evicted %v, want late", c.evicted)
		}
	})
}

func TestRefusedLayoutTriedAgainOnLabelChange(t *testing.T) {
	b, c, d, r := partitioned(t)
	c.name = "gpu3-big"
	if err := b.FailCall(sim.OpCreateComputeInstance, 3, errors.New("injected: the driver refuses")); err != nil {
		t.Fatal(err)
	}
	r.HW = &failOnce{Backend: b}
	if out := r.Reconcile(context.Background()); out.Status.Reason != gpunode.ReasonMIGRolledBack {
		t.Fatalf("outcome %+v", out.Status)
	}
	// Another label, then back: the refusal is forgotten.
	c.name = "all-1g.10gb"
	if out := r.Reconcile(context.Background()); out.Status.State != gpunode.MIGConfigStateSuccess {
		t.Fatalf("outcome %+v", out.Status)
	}
	c.name, d.withdrawn = "gpu3-big", nil
	if out := r.Reconcile(context.Background()); out.Status.State != gpunode.MIGConfigStateSuccess {
		t.Fatalf("outcome %+v", out.Status)
	}
	if len(d.withdrawn) == 0 || fmt.Sprint(d.withdrawn[0]) != "[3]" {
		t.Errorf("withdrawn %v: GPU 3 not tried again", d.withdrawn)
	}
}

// failOnce clears the sim's injected fault after the first refusal, so
// that the roll-back can recreate the old devices.
type failOnce struct{ *sim.Backend }

func (f *failOnce) CreateComputeInstance(ctx context.Context, index, gi int, profile string) (gpu.ComputeInstance, error) {
	ci, err := f.Backend.CreateComputeInstance(ctx, index, gi, profile)
	if err != nil {
		f.ClearFaults()
	}
	return ci, err
}

func TestReconcileNoLabelDoesNothing(t *testing.T) {
	_, c, d, r := partitioned(t)
	out := r.Reconcile(context.Background())
	if out.Status.State != "" || len(d.withdrawn) != 0 {
		t.Fatalf("outcome %+v", out)
	}
	// Only the layout is published.
	if len(c.statuses) != 1 || c.statuses[0].State != "" || len(c.statuses[0].GPUs) != 8 {
		t.Fatalf("statuses %+v", c.statuses)
	}
}

func TestLayoutAnnotationRoundTrip(t *testing.T) {
	b, _, _, _ := partitioned(t)
	gpus, err := mig.GPUs(context.Background(), b)
	if err != nil {
		t.Fatal(err)
	}
	l := mig.LayoutAnnotation(gpus)
	raw, _ := json.Marshal(l)
	parsed, err := gpunode.ParseMIGLayout(string(raw))
	if err != nil {
		t.Fatalf("the agent's annotation does not parse: %v\n%s", err, raw)
	}
	back, err := mig.GPUsFromLayout(parsed)
	if err != nil {
		t.Fatal(err)
	}
	spec, _ := mig.ParseBytes([]byte(twoConfigs))
	// Planning from the annotation is planning from the hardware.
	want, err := mig.NewPlan(spec, "gpu3-big", gpus)
	if err != nil {
		t.Fatal(err)
	}
	got, err := mig.NewPlan(spec, "gpu3-big", back)
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Changes) != 1 || got.Changes[0].Index != 3 || fmt.Sprint(got.Changes[0].Instances) != fmt.Sprint(want.Changes[0].Instances) {
		t.Fatalf("plan from the annotation %+v, from the hardware %+v", got.Changes, want.Changes)
	}
	if len(raw) > 4096 {
		t.Errorf("annotation of a DGX H100 is %d bytes", len(raw))
	}
}

func TestReconcileRefusesWhatTheStrategyWouldNotOffer(t *testing.T) {
	for _, tc := range []struct{ strategy, want string }{
		{"none", "mig-configs.gpu3-big[1]: GPU 3: the MIG config does not fit this node: the device plugin's MIG strategy is none"},
		{"single", "GPU 0 would hold 1g.10gb and GPU 3 3g.40gb: the MIG config does not fit this node: the device plugin's MIG strategy is single"},
	} {
		t.Run(tc.strategy, func(t *testing.T) {
			_, c, d, r := partitioned(t)
			r.Strategy = func() string { return tc.strategy }
			c.name = "gpu3-big"
			out := r.Reconcile(context.Background())
			if out.Status.Reason != gpunode.ReasonMIGInvalidConfig || !strings.Contains(out.Status.Message, tc.want) {
				t.Fatalf("outcome %+v, want %q", out.Status, tc.want)
			}
			if len(c.evicted) != 0 || len(d.withdrawn) != 0 {
				t.Errorf("evicted %v, withdrew %v", c.evicted, d.withdrawn)
			}
		})
	}
	t.Run("single with one profile everywhere", func(t *testing.T) {
		_, c, _, r := partitioned(t)
		r.Strategy = func() string { return "single" }
		c.name = "all-1g.10gb"
		if out := r.Reconcile(context.Background()); out.Status.State != gpunode.MIGConfigStateSuccess {
			t.Fatalf("outcome %+v", out)
		}
	})
}

// TestRunRetriesAndFollowsTriggers: Run passes at start, retries a pass
// that may pass (a PDB) with back-off, and passes again when triggered.
func TestRunRetriesAndFollowsTriggers(t *testing.T) {
	_, c, _, r := partitioned(t)
	c.mu.Lock()
	c.name = "gpu3-big"
	c.blocked["train-3"] = true
	c.mu.Unlock()
	ctx, cancel := context.WithCancel(context.Background())
	trigger := make(chan struct{}, 1)
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx, trigger, 10*time.Millisecond, 50*time.Millisecond) }()
	waitFor := func(what string, cond func(s []mig.Status) bool) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			c.mu.Lock()
			ok := cond(c.statuses)
			c.mu.Unlock()
			if ok {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: statuses %+v", what, c.statuses)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	count := func(reason string) func([]mig.Status) bool {
		return func(s []mig.Status) bool {
			n := 0
			for _, x := range s {
				if x.Reason == reason {
					n++
				}
			}
			return n >= 2
		}
	}
	// Blocked twice: the first pass and a retry.
	waitFor("retried while blocked", count(gpunode.ReasonMIGEvictionBlocked))
	c.mu.Lock()
	delete(c.blocked, "train-3")
	c.mu.Unlock()
	waitFor("applied once the PDB allows", func(s []mig.Status) bool {
		return len(s) > 0 && s[len(s)-1].State == gpunode.MIGConfigStateSuccess
	})
	// A trigger makes another pass at once (the resync is minutes away).
	c.mu.Lock()
	n := len(c.statuses)
	c.mu.Unlock()
	trigger <- struct{}{}
	waitFor("a pass on trigger", func(s []mig.Status) bool { return len(s) > n })
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// TestReconcileWaitsForAClaimWithoutPod: a DRA claim still prepared on a
// changing GPU that no pod uses has nothing to evict; the GPU keeps its
// layout until the kubelet unprepares it.
func TestReconcileWaitsForAClaimWithoutPod(t *testing.T) {
	b, c, _, r := partitioned(t)
	c.name = "gpu3-big"
	c.pods = append(c.pods, mig.Pod{Namespace: "ml", Claims: []string{"dyn-claim"}, GPUs: []int{3}})
	out := r.Reconcile(context.Background())
	if out.Status.State != gpunode.MIGConfigStateFailed || out.Status.Reason != gpunode.ReasonMIGApplyFailed || !out.Retry {
		t.Fatalf("outcome %+v", out.Status)
	}
	if !strings.Contains(out.Status.Message, "ResourceClaim ml/dyn-claim (no pod)") {
		t.Errorf("message %q does not name the claim", out.Status.Message)
	}
	if len(c.evicted) != 1 || c.evicted[0] != "train-3" {
		t.Errorf("evicted %v, want train-3 alone", c.evicted)
	}
	if devs, _ := b.Devices(context.Background()); len(devs[3].MIGDevices) != 7 {
		t.Errorf("GPU 3 changed under a prepared claim")
	}
	// The kubelet unprepares it: the next pass applies.
	c.pods = c.pods[:len(c.pods)-1]
	if out := r.Reconcile(context.Background()); out.Status.State != gpunode.MIGConfigStateSuccess {
		t.Fatalf("after the unprepare: %+v", out.Status)
	}
}
