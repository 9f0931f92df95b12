package quarantine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"

	configv1 "github.com/gpuplane/gpuplane/api/config/v1"
	"github.com/gpuplane/gpuplane/api/gpunode"
	"github.com/gpuplane/gpuplane/internal/gpu"
	"github.com/gpuplane/gpuplane/internal/health"
)

// PodRef names a pod holding a device of a GPU.
type PodRef struct {
	Namespace, Name string
	UID             types.UID
}

func (p PodRef) String() string { return p.Namespace + "/" + p.Name }

// Pods finds and evicts the pods on a GPU.
type Pods interface {
	// OnGPU lists the pods that hold a device of the GPU at index, as the
	// kubelet's PodResources API shows them.
	OnGPU(ctx context.Context, index int) ([]PodRef, error)
	// Evict asks the Eviction API to evict the pod. An error for which
	// apierrors.IsTooManyRequests holds is a refusal (a
	// PodDisruptionBudget) to retry later.
	Evict(ctx context.Context, p PodRef) error
}

// GPUs resets and checks GPUs.
type GPUs interface {
	// Reset resets the GPU (gpu.Resetter); an error wrapping
	// gpu.ErrNotSupported says that the driver offers none.
	Reset(ctx context.Context, index int) error
	// Check returns nil when the GPU answers.
	Check(ctx context.Context, index int) error
}

// Holder keeps a GPU's devices out of service (health.Monitor).
type Holder interface {
	Hold(uuid, reason string)
	Release(uuid string)
}

// Inventory is a view of the node's GPUs read apart from the hardware
// seam, such as the devices the DRA driver publishes in its
// ResourceSlices. A reset changes what a GPU has (it destroys the GPU's
// MIG instances and applies a pending MIG mode), so the view is read again
// after one.
type Inventory interface {
	// Refresh reads the GPUs again and publishes what changed.
	Refresh(ctx context.Context) error
}

// Recorder records events on the Node.
type Recorder interface {
	Eventf(eventtype, reason, messageFmt string, args ...any)
}

// NodeWriter shows the quarantine on the Node.
type NodeWriter interface {
	// Record reads the record the agent left on the Node.
	Record(ctx context.Context) (gpunode.QuarantineRecord, error)
	// Write makes the Node show s.
	Write(ctx context.Context, s NodeStatus) error
}

// Options configure a Controller.
type Options struct {
	Policy Policy
	// Devices are the node's GPUs, as the inventory listed them.
	Devices []gpu.Device
	Pods    Pods
	GPUs    GPUs
	Holder  Holder
	Node    NodeWriter
	// Inventory, when set, is read again before a GPU is revalidated
	// after a reset: the quarantine's, or, when the driver offers none,
	// the one by hand the held GPU waited for.
	Inventory Inventory
	Events    Recorder
	Metrics   *Metrics
	Clock     clock.WithTicker
	// Interval is how often the steps are driven; 1s when zero.
	Interval time.Duration
	Logger   *slog.Logger
}

// gpuState is one quarantined (or recently returned) GPU.
type gpuState struct {
	index int
	uuid  string
	state string
	xid   uint64
	class configv1.QuarantineClass
	// entered is when the GPU entered state; faultAt when the fault that
	// started this quarantine happened.
	entered, faultAt time.Time
	// fails counts the faults within the window.
	fails int
	// why says what held the GPU, or what the step waits for.
	why string
	// holdAfterDrain: the GPU failed again soon after it returned.
	holdAfterDrain bool
	// noReset: the driver offers no reset.
	noReset bool
	// cleanSince is when the GPU started answering during validation.
	cleanSince time.Time
	// evicted remembers when each pod's eviction (by namespace/name) was
	// last asked for, and blocked which refusals were already told.
	evicted map[string]time.Time
	blocked map[string]bool
	// shown is set once the Node showed this quarantine.
	shown bool
}

func (g *gpuState) quarantined() bool { return g.state != gpunode.QuarantineReturned }

// Controller runs the quarantine of a node's GPUs.
type Controller struct {
	o   Options
	log *slog.Logger

	mu      sync.Mutex
	policy  Policy
	gpus    map[int]*gpuState
	uuids   map[int]string
	resumed bool
	written *NodeStatus
	// writeErr is the last failed write's error, said once.
	writeErr string
}

// evictRetry is how long an asked eviction is given before it is asked
// again.
const evictRetry = 10 * time.Second

// refreshTimeout bounds a read of the GPUs by the inventory after a reset.
const refreshTimeout = 30 * time.Second

// New validates the options and returns a Controller.
func New(o Options) (*Controller, error) {
	switch {
	case o.Pods == nil, o.GPUs == nil, o.Holder == nil, o.Node == nil:
		return nil, errors.New("quarantine: Pods, GPUs, Holder and Node are required")
	}
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	if o.Interval <= 0 {
		o.Interval = time.Second
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Events == nil {
		o.Events = discardEvents{}
	}
	if o.Metrics == nil {
		o.Metrics = NewMetrics()
	}
	c := &Controller{o: o, log: o.Logger, policy: o.Policy, gpus: map[int]*gpuState{}, uuids: map[int]string{}}
	for _, d := range o.Devices {
		c.uuids[d.Index] = d.UUID
		o.Metrics.setState(d.Index, d.UUID, "", stateInService)
	}
	return c, nil
}

type discardEvents struct{}

func (discardEvents) Eventf(string, string, string, ...any) {}

// SetPolicy replaces the policy (after a config reload); GPUs already in
// quarantine keep their class.
func (c *Controller) SetPolicy(p Policy) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.policy = p
}

// Run handles faults and drives the steps until ctx ends.
func (c *Controller) Run(ctx context.Context, faults <-chan health.Fault) error {
	t := c.o.Clock.NewTicker(c.o.Interval)
	defer t.Stop()
	c.Step(ctx)
	for {
		select {
		case <-ctx.Done():
			return nil
		case f := <-faults:
			c.Fault(ctx, f)
		case <-t.C():
			c.Step(ctx)
		}
	}
}

// Fault handles one critical event and shows it on the Node at once.
func (c *Controller) Fault(ctx context.Context, f health.Fault) {
	c.mu.Lock()
	c.fault(f)
	// The Node shows the fault before any step is taken: a GPU whose
	// quarantine ends within the step would otherwise never be shown.
	if c.resumed {
		c.sync(ctx)
	}
	c.mu.Unlock()
	c.Step(ctx)
}

func (c *Controller) fault(f health.Fault) {
	now := c.o.Clock.Now()
	g := c.gpus[f.GPU]
	class := c.policy.classOf(f.XID)
	if g == nil {
		uuid := cmpOr(c.uuids[f.GPU], f.UUID)
		g = &gpuState{index: f.GPU, uuid: uuid, xid: f.XID, class: class, faultAt: f.Time, fails: 1}
		c.gpus[f.GPU] = g
		c.o.Holder.Hold(g.uuid, fmt.Sprintf("quarantined after XID %d", f.XID))
		c.o.Events.Eventf(corev1.EventTypeWarning, ReasonQuarantined, "GPU %d (%s): XID %d (%s, scope %s): taken out of service; %s",
			g.index, g.uuid, f.XID, class.Name, class.Scope, plan(class))
		c.enter(g, c.first(g), now, "")
		return
	}
	switch g.state {
	case gpunode.QuarantineReturned:
		g.fails++
		g.xid, g.class, g.faultAt, g.holdAfterDrain, g.shown = f.XID, class, f.Time, true, false
		c.o.Holder.Hold(g.uuid, fmt.Sprintf("failed again after XID %d", f.XID))
		c.o.Events.Eventf(corev1.EventTypeWarning, ReasonFailedAgain, "GPU %d (%s): XID %d %s after it returned (window %s, failure %d): it stays quarantined",
			g.index, g.uuid, f.XID, now.Sub(g.entered).Round(time.Second), c.policy.Window, g.fails)
		c.enter(g, c.first(g), now, "")
	case gpunode.QuarantineValidating:
		if f.Time.Before(g.entered) {
			return // seen before the reset: the fault already handled
		}
		g.fails++
		g.xid = f.XID
		c.o.Events.Eventf(corev1.EventTypeWarning, ReasonFailedAgain, "GPU %d (%s): XID %d during revalidation (failure %d): it stays quarantined",
			g.index, g.uuid, f.XID, g.fails)
		c.hold(g, now, fmt.Sprintf("XID %d during revalidation", f.XID))
	default:
		// The same episode: a node-wide class wins over a GPU-wide one.
		if class.NodeWide() && !g.class.NodeWide() {
			g.class, g.xid, g.shown = class, f.XID, false
		}
		c.log.Info("another fault on a quarantined GPU", "gpu", g.index, "xid", f.XID, "state", g.state)
	}
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// plan says what the class does, for the first event.
func plan(c configv1.QuarantineClass) string {
	var steps []string
	if c.NodeWide() {
		steps = append(steps, "node tainted "+gpunode.TaintGPUFault+":NoSchedule")
	}
	if c.DoesEvict() {
		steps = append(steps, "its pods evicted")
	}
	if c.DoesReset() {
		steps = append(steps, "GPU reset")
	}
	steps = append(steps, "revalidated")
	return strings.Join(steps, ", then ")
}

// first is the state a fault starts in.
func (c *Controller) first(g *gpuState) string {
	switch {
	case g.class.DoesEvict():
		return gpunode.QuarantineDraining
	case g.holdAfterDrain:
		return gpunode.QuarantineHeld
	case g.class.DoesReset():
		return gpunode.QuarantineResetting
	}
	return gpunode.QuarantineValidating
}

// enter moves g to state.
func (c *Controller) enter(g *gpuState, state string, now time.Time, why string) {
	from := g.state
	if from != "" {
		c.o.Metrics.leave(from, now.Sub(g.entered))
	}
	c.o.Metrics.transition(cmpOr(from, stateInService), state, g.class.Name)
	c.o.Metrics.setState(g.index, g.uuid, cmpOr(from, stateInService), state)
	g.state, g.entered, g.why, g.cleanSince = state, now, why, time.Time{}
	if state == gpunode.QuarantineDraining {
		g.evicted, g.blocked = map[string]time.Time{}, map[string]bool{}
	}
	c.log.Info("GPU quarantine step", "gpu", g.index, "uuid", g.uuid, "from", from, "to", state, "xid", g.xid, "why", why)
}

func (c *Controller) hold(g *gpuState, now time.Time, why string) {
	c.enter(g, gpunode.QuarantineHeld, now, why)
	c.o.Events.Eventf(corev1.EventTypeWarning, ReasonHeld, "GPU %d (%s): stays quarantined: %s; tried again at %s",
		g.index, g.uuid, why, now.Add(c.policy.RetryHeldAfter).UTC().Format(time.RFC3339))
}

// Step drives every GPU one step and shows the result on the Node.
func (c *Controller) Step(ctx context.Context) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.resumed {
		c.resume(ctx)
	}
	for _, i := range sortedKeys(c.gpus) {
		c.step(ctx, c.gpus[i])
	}
	// Until the Node's record is read, writing would overwrite it.
	if c.resumed {
		c.sync(ctx)
	}
}

func sortedKeys(m map[int]*gpuState) []int {
	keys := make([]int, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

func (c *Controller) step(ctx context.Context, g *gpuState) {
	now := c.o.Clock.Now()
	in := now.Sub(g.entered)
	p := c.policy
	switch g.state {
	case gpunode.QuarantineDraining:
		c.drain(ctx, g, now, in)
	case gpunode.QuarantineResetting:
		c.reset(ctx, g, now)
	case gpunode.QuarantineValidating:
		c.validate(ctx, g, now, in)
	case gpunode.QuarantineHeld:
		if in >= p.RetryHeldAfter {
			g.holdAfterDrain = false
			next := gpunode.QuarantineResetting
			if g.noReset || !g.class.DoesReset() {
				next = gpunode.QuarantineValidating
			}
			c.o.Events.Eventf(corev1.EventTypeNormal, ReasonRetry, "GPU %d (%s): held for %s; %s it again", g.index, g.uuid, in.Round(time.Second),
				map[bool]string{true: "resetting and revalidating", false: "revalidating"}[next == gpunode.QuarantineResetting])
			if g.noReset && g.class.DoesReset() {
				// The driver has no reset, so the GPU was to be reset by
				// hand while it was held.
				c.refresh(ctx, g)
			}
			c.enter(g, next, c.o.Clock.Now(), "")
			c.step(ctx, g)
		}
	case gpunode.QuarantineReturned:
		if in >= p.Window {
			c.o.Metrics.setState(g.index, g.uuid, g.state, stateInService)
			delete(c.gpus, g.index)
		}
	}
}

func (c *Controller) drain(ctx context.Context, g *gpuState, now time.Time, in time.Duration) {
	pods, err := c.o.Pods.OnGPU(ctx, g.index)
	if err != nil {
		g.why = fmt.Sprintf("the pods on the GPU cannot be listed: %v", err)
		c.log.Warn("listing the pods on a quarantined GPU", "gpu", g.index, "err", err)
	}
	if err == nil && len(pods) == 0 {
		c.o.Events.Eventf(corev1.EventTypeNormal, ReasonDrained, "GPU %d (%s): no pod holds it any more", g.index, g.uuid)
		c.afterDrain(ctx, g, now)
		return
	}
	if in >= c.policy.EvictionTimeout {
		names := make([]string, 0, len(pods))
		for _, p := range pods {
			names = append(names, p.String())
		}
		c.o.Events.Eventf(corev1.EventTypeWarning, ReasonEvictionTimedOut, "GPU %d (%s): %d pods still hold it after %s (%s); going on without them",
			g.index, g.uuid, len(pods), c.policy.EvictionTimeout, strings.Join(names, ", "))
		c.afterDrain(ctx, g, now)
		return
	}
	var waiting []string
	for _, p := range pods {
		key := p.String()
		if at, ok := g.evicted[key]; ok && now.Sub(at) < evictRetry {
			waiting = append(waiting, p.String())
			continue
		}
		err := c.o.Pods.Evict(ctx, p)
		switch {
		case err == nil || apierrors.IsNotFound(err):
			g.evicted[key] = now
			c.o.Metrics.eviction("evicted")
			c.o.Events.Eventf(corev1.EventTypeNormal, ReasonEvicted, "GPU %d (%s): evicted pod %s, which held it", g.index, g.uuid, p)
		case apierrors.IsTooManyRequests(err):
			g.evicted[key] = now
			c.o.Metrics.eviction("refused")
			if !g.blocked[key] {
				g.blocked[key] = true
				c.o.Events.Eventf(corev1.EventTypeWarning, ReasonEvictionRefused, "GPU %d (%s): eviction of pod %s refused (%v); retried until %s",
					g.index, g.uuid, p, err, g.entered.Add(c.policy.EvictionTimeout).UTC().Format(time.RFC3339))
			}
		default:
			c.o.Metrics.eviction("failed")
			c.log.Warn("evicting a pod from a quarantined GPU", "gpu", g.index, "pod", p.String(), "err", err)
		}
		waiting = append(waiting, p.String())
	}
	if len(waiting) > 0 {
		g.why = fmt.Sprintf("waiting for %d pods to leave: %s", len(waiting), strings.Join(waiting, ", "))
	}
}

func (c *Controller) afterDrain(ctx context.Context, g *gpuState, now time.Time) {
	switch {
	case g.holdAfterDrain:
		c.hold(g, now, fmt.Sprintf("failed again (XID %d) within %s of returning", g.xid, c.policy.Window))
	case g.class.DoesReset():
		c.enter(g, gpunode.QuarantineResetting, now, "")
		c.reset(ctx, g, now)
	default:
		c.enter(g, gpunode.QuarantineValidating, now, "")
		c.validate(ctx, g, now, 0)
	}
}

func (c *Controller) reset(ctx context.Context, g *gpuState, now time.Time) {
	if !g.class.DoesReset() {
		c.enter(g, gpunode.QuarantineValidating, now, "")
		return
	}
	rctx, cancel := context.WithTimeout(ctx, c.policy.ResetTimeout)
	err := c.o.GPUs.Reset(rctx, g.index)
	cancel()
	if ctx.Err() != nil {
		return // stopping: the record resumes the reset
	}
	now = c.o.Clock.Now()
	switch {
	case err == nil:
		c.o.Metrics.reset("ok")
		c.o.Events.Eventf(corev1.EventTypeNormal, ReasonReset, "GPU %d (%s): reset; revalidating it for %s", g.index, g.uuid, c.policy.Validation)
		c.refresh(ctx, g)
		c.enter(g, gpunode.QuarantineValidating, c.o.Clock.Now(), "")
	case errors.Is(err, gpu.ErrNotSupported):
		c.o.Metrics.reset("unsupported")
		g.noReset = true
		c.o.Events.Eventf(corev1.EventTypeWarning, ReasonResetFailed, "GPU %d (%s): %v", g.index, g.uuid, err)
		c.hold(g, now, fmt.Sprintf("the driver cannot reset it here (%v)", err))
	default:
		c.o.Metrics.reset("failed")
		c.o.Events.Eventf(corev1.EventTypeWarning, ReasonResetFailed, "GPU %d (%s): reset failed: %v", g.index, g.uuid, err)
		c.hold(g, now, fmt.Sprintf("reset failed: %v", err))
	}
}

// refresh has the inventory read the GPUs again after g was reset. A
// failure does not stop the revalidation: the GPU answers or not whatever
// the inventory shows.
func (c *Controller) refresh(ctx context.Context, g *gpuState) {
	if c.o.Inventory == nil {
		return
	}
	rctx, cancel := context.WithTimeout(ctx, refreshTimeout)
	err := c.o.Inventory.Refresh(rctx)
	cancel()
	switch {
	case ctx.Err() != nil:
		// Stopping: the next start reads the GPUs anew.
	case err != nil:
		c.o.Metrics.refresh("failed")
		c.log.Warn("reading the GPUs again after a reset", "gpu", g.index, "uuid", g.uuid, "err", err)
		c.o.Events.Eventf(corev1.EventTypeWarning, ReasonRefreshFailed,
			"GPU %d (%s): the devices published of it were not read again after its reset (%v); restart the agent to publish them anew, else they show the GPU as it was before the reset (MIG mode and instances) until its MIG layout next changes",
			g.index, g.uuid, err)
	default:
		c.o.Metrics.refresh("ok")
	}
}

func (c *Controller) validate(ctx context.Context, g *gpuState, now time.Time, in time.Duration) {
	err := c.o.GPUs.Check(ctx, g.index)
	switch {
	case err != nil:
		g.cleanSince = time.Time{}
		g.why = fmt.Sprintf("does not answer: %v", err)
		if in >= c.policy.ValidationTimeout {
			c.hold(g, now, fmt.Sprintf("did not answer within %s: %v", c.policy.ValidationTimeout, err))
		}
		return
	case g.cleanSince.IsZero():
		g.cleanSince = now
	}
	if now.Sub(g.cleanSince) >= c.policy.Validation {
		c.o.Holder.Release(g.uuid)
		c.o.Events.Eventf(corev1.EventTypeNormal, ReasonReturned, "GPU %d (%s): answered for %s without a critical event; back in service",
			g.index, g.uuid, c.policy.Validation)
		c.enter(g, gpunode.QuarantineReturned, now, "")
		return
	}
	if in >= c.policy.ValidationTimeout {
		c.hold(g, now, fmt.Sprintf("did not pass revalidation within %s", c.policy.ValidationTimeout))
		return
	}
	g.why = fmt.Sprintf("answering since %s", g.cleanSince.UTC().Format(time.RFC3339))
}

// resume takes the quarantine back from the Node's record after a
// restart: a GPU that was quarantined is held again and revalidated (a
// held one stays held for the rest of its time), a returned one keeps its
// window. Until the record is read, no fault is lost: faults are handled
// and the record is read again at the next step.
func (c *Controller) resume(ctx context.Context) {
	rec, err := c.o.Node.Record(ctx)
	if err != nil {
		c.log.Warn("reading the quarantine record on the Node; retrying", "err", err)
		return
	}
	c.resumed = true
	for _, r := range rec.GPUs {
		if c.uuids[r.Index] != r.UUID || c.gpus[r.Index] != nil {
			c.log.Info("forgetting a quarantine record of a GPU this node no longer has", "gpu", r.Index, "uuid", r.UUID)
			continue
		}
		g := &gpuState{index: r.Index, uuid: r.UUID, xid: r.XID, class: c.policy.classByName(r.Class, r.XID), fails: r.Fails, faultAt: r.Since, shown: true}
		c.gpus[r.Index] = g
		// Timed steps keep their time; a reset or a revalidation that a
		// restart cut short starts again.
		state, since := r.State, r.Since
		if state == gpunode.QuarantineResetting || state == gpunode.QuarantineValidating {
			since = c.o.Clock.Now()
		}
		if state != gpunode.QuarantineReturned {
			c.o.Holder.Hold(g.uuid, "quarantine resumed after a restart")
		}
		c.enter(g, state, since, "resumed after a restart")
		c.o.Events.Eventf(corev1.EventTypeNormal, ReasonResumed, "GPU %d (%s): quarantine resumed after an agent restart: %s", g.index, g.uuid, state)
	}
}
