package mig

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/gpuplane/gpuplane/api/gpunode"
)

// Status is what a node says about its MIG config: the
// nvidia.com/mig.config.state label and the MIGConfigApplied condition.
type Status struct {
	// Config is the config the node's label names.
	Config string
	// State is one of gpunode.MIGConfigState*.
	State string
	// Reason is one of gpunode.ReasonMIG*; Message says what happened,
	// naming the GPU, the pod or the field.
	Reason, Message string
	// GPUs are the node's GPUs as the pass left them, for the
	// gpuplane.io/mig-layout annotation; nil when they could not be read.
	GPUs []GPU
}

// Pod is a pod that holds devices of GPUs a plan changes: through the
// device plugin, or through prepared DRA ResourceClaims (Claims). A Pod
// with no Name is a claim still prepared on the GPUs that no pod uses any
// more: there is nothing to evict, and the GPUs wait until the kubelet
// unprepares it.
type Pod struct {
	Namespace, Name, UID string
	// GPUs are the indices of the GPUs it holds devices of.
	GPUs []int
	// Claims are the ResourceClaims (in Namespace) by which it holds them.
	Claims []string
}

func (p Pod) String() string {
	if p.Name == "" {
		return "ResourceClaim " + p.Namespace + "/" + strings.Join(p.Claims, ",") + " (no pod)"
	}
	return p.Namespace + "/" + p.Name
}

// ErrEvictionBlocked is wrapped by Cluster.Evict when the Eviction API
// refuses, because a PodDisruptionBudget allows no disruption now.
var ErrEvictionBlocked = errors.New("the eviction is refused by a PodDisruptionBudget")

// Cluster is the reconciler's view of the API server and the kubelet.
type Cluster interface {
	// Desired returns the config the node's nvidia.com/mig.config label
	// names ("" when it has none) and the mig-parted config the agent's
	// ConfigMap holds; err says why the ConfigMap cannot be read.
	Desired(ctx context.Context) (name string, config []byte, err error)
	// PodsOn lists the pods holding devices of the given GPUs.
	PodsOn(ctx context.Context, gpus map[int]bool) ([]Pod, error)
	// Evict asks the Eviction API to evict a pod; a refusal by a
	// PodDisruptionBudget wraps ErrEvictionBlocked.
	Evict(ctx context.Context, p Pod) error
	// SetStatus records the status on the Node.
	SetStatus(ctx context.Context, s Status) error
}

// Devices is the device plugin's side: what the kubelet is offered.
type Devices interface {
	// Withdraw stops offering the devices of the given GPUs (they are
	// reported unhealthy, so the kubelet admits no new pod to them) and
	// offers again those of every other GPU.
	Withdraw(gpus []int)
	// Refresh re-reads the GPUs and advertises the devices they now have
	// (new MIG resources included); the GPUs still withdrawn stay so.
	Refresh(ctx context.Context) error
}

// Reconciler brings a node's GPUs to the MIG config its label names, one
// pass at a time: every pass starts from the hardware, so a failed or
// interrupted pass is finished by the next one.
type Reconciler struct {
	HW      Hardware
	Cluster Cluster
	Devices Devices
	// EvictionTimeout bounds how long pods on changing GPUs may take to
	// go, PodDisruptionBudgets included.
	EvictionTimeout time.Duration
	// Poll is how often evicted pods are checked for; 1s when zero.
	Poll time.Duration
	// Strategy, when set, returns the device plugin's MIG strategy; a
	// plan whose devices it would not offer is refused (CheckStrategy).
	Strategy func() string
	// Overrides, when set, returns per-GPU layouts that replace what the
	// label's config gives those GPUs: gpuplane-scheduler's proposals on
	// a node that follows demand (override.go). A GPU only an override
	// changes is changed only while it holds no pod: nothing is evicted
	// for it, and the pass is retried until it is idle.
	Overrides func(ctx context.Context) (map[int]Layout, error)
	Log       *slog.Logger

	// refused are the layouts the hardware refused (rolled back), by GPU
	// and layout, with why; they are for the config and ConfigMap content
	// refusedFor names, and forgotten when either changes. Reconcile runs
	// on one goroutine.
	refused    map[refusal]string
	refusedFor [sha256.Size]byte
}

// refusal is a layout one GPU refused.
type refusal struct {
	index  int
	layout string
}

// Outcome is one pass's result.
type Outcome struct {
	Status Status
	// Retry says the pass should be tried again (after a back-off): it
	// failed for a reason that may pass (a PDB, a pending mode change, a
	// call that failed) rather than for a wrong config.
	Retry bool
	// Plan is what the pass planned, nil before planning.
	Plan *Plan
}

// Reconcile runs one pass: read the label and the ConfigMap, plan and
// validate against the hardware (before anything is evicted), withdraw the
// changing GPUs' devices, evict their pods, apply, and advertise the new
// devices. It writes the status as it goes and returns the last one.
func (r *Reconciler) Reconcile(ctx context.Context) Outcome {
	log := r.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	name, data, err := r.Cluster.Desired(ctx)
	var ov map[int]Layout
	if r.Overrides != nil {
		var oerr error
		if ov, oerr = r.Overrides(ctx); oerr != nil {
			log.Warn("the node's MIG proposals cannot be read; ignoring them", "err", oerr)
		}
	}
	if name == "" && err == nil && len(ov) == 0 {
		// No config chosen: only the layout is published.
		r.status(ctx, Status{})
		return Outcome{}
	}
	if err != nil {
		return r.report(ctx, Outcome{Status: Status{Config: name, State: gpunode.MIGConfigStateFailed, Reason: gpunode.ReasonMIGInvalidConfig,
			Message: err.Error() + "; the GPUs keep their layout"}})
	}
	var spec *Spec
	if name != "" {
		if spec, err = ParseBytes(data); err != nil {
			return r.report(ctx, Outcome{Status: Status{Config: name, State: gpunode.MIGConfigStateFailed, Reason: gpunode.ReasonMIGInvalidConfig,
				Message: "the MIG ConfigMap: " + err.Error() + "; the GPUs keep their layout"}})
		}
	}
	gpus, err := GPUs(ctx, r.HW)
	if err != nil {
		return r.report(ctx, Outcome{Retry: true, Status: Status{Config: name, State: gpunode.MIGConfigStateFailed, Reason: gpunode.ReasonMIGApplyFailed, Message: err.Error()}})
	}
	plan := unchangedPlan(gpus)
	if name != "" {
		plan, err = NewPlan(spec, name, gpus)
	}
	if err == nil {
		err = withOverrides(plan, gpus, ov)
	}
	if err == nil && r.Strategy != nil {
		err = CheckStrategy(r.Strategy(), plan)
	}
	if err != nil {
		return r.report(ctx, Outcome{Status: Status{Config: name, State: gpunode.MIGConfigStateFailed, Reason: gpunode.ReasonMIGInvalidConfig,
			Message: err.Error() + "; nothing was evicted and the GPUs keep their layout"}})
	}
	skipped := r.skipRefused(name, data, plan)
	if len(plan.Changes) == 0 && len(skipped) > 0 {
		r.Devices.Withdraw(nil)
		return r.report(ctx, Outcome{Plan: plan, Status: Status{Config: name, State: gpunode.MIGConfigStateFailed, Reason: gpunode.ReasonMIGRolledBack,
			Message: strings.Join(skipped, "; ") + rolledBackFix}})
	}
	if len(plan.Changes) == 0 {
		r.Devices.Withdraw(nil)
		msg := fmt.Sprintf("GPUs %s are in config %s", indexList(gpusIndices(gpus)), name)
		if name == "" {
			msg = fmt.Sprintf("GPUs %s are in their proposed layouts (%s)", indexList(keys(overridden(ov))), gpunode.MIGProposalAnnotation)
		}
		return r.report(ctx, Outcome{Plan: plan, Status: Status{Config: name, State: gpunode.MIGConfigStateSuccess, Reason: gpunode.ReasonMIGApplied, Message: msg}})
	}
	// 1. No new pod lands on a changing GPU from here on.
	r.Devices.Withdraw(planIndices(plan))
	// Proposals never evict: a GPU only a proposal changes waits while
	// pods hold it (looked for once no new pod can land there), and
	// takes pods again meanwhile.
	waiting, err := r.holdBusyOverrides(ctx, plan)
	if err != nil {
		r.Devices.Withdraw(nil)
		return r.report(ctx, Outcome{Plan: plan, Retry: true, Status: Status{Config: name, State: gpunode.MIGConfigStateFailed, Reason: gpunode.ReasonMIGApplyFailed,
			Message: err.Error() + "; nothing was changed, the agent retries"}})
	}
	if len(plan.Changes) == 0 {
		r.Devices.Withdraw(nil)
		return r.report(ctx, Outcome{Plan: plan, Retry: true, Status: Status{Config: name, State: gpunode.MIGConfigStatePending, Reason: gpunode.ReasonMIGProposalWaiting,
			Message: strings.Join(waiting, "; ") + " (nothing is evicted for a proposed layout)"}})
	}
	changing := map[int]bool{}
	indices := planIndices(plan)
	for _, i := range indices {
		changing[i] = true
	}
	r.Devices.Withdraw(indices)
	// 2. Its pods go, through the Eviction API.
	out := r.evict(ctx, log, name, plan, changing)
	if out.Status.State != "" {
		return r.report(ctx, out)
	}
	// 3. Apply, one GPU at a time.
	r.status(ctx, Status{Config: name, State: gpunode.MIGConfigStatePending, Reason: gpunode.ReasonMIGApplying, Message: describePlan(plan)})
	var failed []string
	var rolledBack, pendingMode bool
	for _, c := range plan.Changes {
		start := time.Now()
		err := ApplyGPU(ctx, r.HW, c.Index, c.To, c.Instances)
		if err == nil {
			log.Info("MIG layout applied", "gpu", c.Index, "from", c.From.String(), "to", c.To.String(), "took", time.Since(start))
			continue
		}
		log.Error("MIG layout not applied", "gpu", c.Index, "to", c.To.String(), "err", err)
		var rb *RolledBackError
		switch {
		case errors.As(err, &rb):
			rolledBack = true
			r.refused[refusal{c.Index, c.To.String()}] = err.Error()
		case errors.Is(err, ErrModePending):
			pendingMode = true
		}
		failed = append(failed, err.Error())
	}
	// 4. Advertise what the GPUs have now. A GPU that failed stays
	// withdrawn only when it holds no devices to offer.
	r.Devices.Withdraw(nil)
	if err := r.Devices.Refresh(ctx); err != nil {
		failed = append(failed, "advertising the new devices: "+err.Error())
	}
	switch {
	case len(failed) == 0 && len(skipped) == 0 && len(waiting) > 0:
		return r.report(ctx, Outcome{Plan: plan, Retry: true, Status: Status{Config: name, State: gpunode.MIGConfigStatePending, Reason: gpunode.ReasonMIGProposalWaiting,
			Message: describePlan(plan) + "; " + strings.Join(waiting, "; ") + " (nothing is evicted for a proposed layout)"}})
	case len(failed) == 0 && len(skipped) == 0:
		return r.report(ctx, Outcome{Plan: plan, Status: Status{Config: name, State: gpunode.MIGConfigStateSuccess, Reason: gpunode.ReasonMIGApplied,
			Message: describePlan(plan) + "; other GPUs untouched"}})
	case len(failed) == 0:
		// Layouts refused before stay refused; proposals still waiting for
		// an idle GPU are retried.
		return r.report(ctx, Outcome{Plan: plan, Retry: len(waiting) > 0, Status: Status{Config: name, State: gpunode.MIGConfigStateFailed, Reason: gpunode.ReasonMIGRolledBack,
			Message: describePlan(plan) + "; " + strings.Join(append(skipped, waiting...), "; ") + rolledBackFix}})
	case rolledBack:
		return r.report(ctx, Outcome{Plan: plan, Status: Status{Config: name, State: gpunode.MIGConfigStateFailed, Reason: gpunode.ReasonMIGRolledBack,
			Message: strings.Join(append(failed, skipped...), "; ") + rolledBackFix}})
	case pendingMode:
		return r.report(ctx, Outcome{Plan: plan, Retry: true, Status: Status{Config: name, State: gpunode.MIGConfigStatePending, Reason: gpunode.ReasonMIGModePending,
			Message: strings.Join(failed, "; ") + ". Fix: stop the processes on the GPU or reset it (nvidia-smi -r -i <gpu>); the agent retries"}})
	}
	return r.report(ctx, Outcome{Plan: plan, Retry: true, Status: Status{Config: name, State: gpunode.MIGConfigStateFailed, Reason: gpunode.ReasonMIGApplyFailed,
		Message: strings.Join(failed, "; ") + "; the agent retries"}})
}

// rolledBackFix ends the message of a rolled-back layout.
const rolledBackFix = ". Fix: choose a layout the GPU accepts (gpuplane-agent mig apply --simulate checks one); the agent tries it again when the " +
	gpunode.LabelMIGConfig + " label or the MIG ConfigMap changes"

// skipRefused takes out of the plan the GPUs whose new layout the hardware
// refused before, for the same config and ConfigMap content, and returns
// why each was refused. A refused layout is not tried again on the
// periodic pass: each try would withdraw the GPU and evict the pods that
// landed on it since.
func (r *Reconciler) skipRefused(name string, data []byte, plan *Plan) []string {
	key := sha256.Sum256(append([]byte(name+"\x00"), data...))
	if r.refused == nil || key != r.refusedFor {
		r.refused, r.refusedFor = map[refusal]string{}, key
	}
	var skipped []string
	kept := plan.Changes[:0:0]
	for _, c := range plan.Changes {
		if why, ok := r.refused[refusal{c.Index, c.To.String()}]; ok {
			skipped = append(skipped, why+" (not tried again)")
			continue
		}
		kept = append(kept, c)
	}
	plan.Changes = kept
	return skipped
}

// evict evicts the pods on the changing GPUs and waits for them to go. It
// returns a zero Outcome when they are gone.
func (r *Reconciler) evict(ctx context.Context, log *slog.Logger, name string, plan *Plan, changing map[int]bool) Outcome {
	poll := r.Poll
	if poll <= 0 {
		poll = time.Second
	}
	timeout := r.EvictionTimeout
	if timeout <= 0 {
		timeout = 5 * time.Minute
	}
	deadline := time.Now().Add(timeout)
	var blocked map[string]string
	evicted := map[string]bool{}
	for first := true; ; first = false {
		pods, err := r.Cluster.PodsOn(ctx, changing)
		if err != nil {
			return Outcome{Plan: plan, Retry: true, Status: Status{Config: name, State: gpunode.MIGConfigStateFailed, Reason: gpunode.ReasonMIGApplyFailed,
				Message: "finding the pods on GPUs " + indexList(keys(changing)) + ": " + err.Error() + "; nothing was changed, the agent retries"}}
		}
		if len(pods) == 0 {
			return Outcome{}
		}
		if first {
			r.status(ctx, Status{Config: name, State: gpunode.MIGConfigStatePending, Reason: gpunode.ReasonMIGEvicting,
				Message: fmt.Sprintf("evicting %d pods from GPUs %s (%s) to apply %s", len(pods), indexList(keys(changing)), podList(pods), describePlan(plan))})
		}
		blocked = map[string]string{}
		for _, p := range pods {
			// Keyed by name and UID: pods whose UID is not known yet
			// are told apart by name.
			key := p.String() + "/" + p.UID
			if p.Name == "" || evicted[key] {
				// A claim no pod uses: the kubelet unprepares it.
				continue
			}
			err := r.Cluster.Evict(ctx, p)
			switch {
			case err == nil:
				evicted[key] = true
				log.Info("evicted a pod to change its GPUs' MIG layout", "pod", p.String(), "gpus", p.GPUs)
			case errors.Is(err, ErrEvictionBlocked):
				blocked[p.String()] = err.Error()
			default:
				log.Warn("evicting a pod failed; retrying", "pod", p.String(), "err", err)
			}
		}
		if time.Now().After(deadline) {
			var msgs []string
			for p, m := range blocked {
				msgs = append(msgs, p+": "+m)
			}
			sort.Strings(msgs)
			reason, why := gpunode.ReasonMIGApplyFailed, fmt.Sprintf("pods %s still hold GPUs %s", podList(pods), indexList(keys(changing)))
			if len(blocked) > 0 {
				reason, why = gpunode.ReasonMIGEvictionBlocked, strings.Join(msgs, "; ")
			}
			return Outcome{Plan: plan, Retry: true, Status: Status{Config: name, State: gpunode.MIGConfigStateFailed, Reason: reason,
				Message: fmt.Sprintf("after %s: %s. GPUs %s keep their layout and take no new pods; the agent retries. Fix: relax the PodDisruptionBudget or move the pods", timeout, why, indexList(keys(changing)))}}
		}
		select {
		case <-ctx.Done():
			return Outcome{Plan: plan, Retry: true, Status: Status{Config: name, State: gpunode.MIGConfigStatePending, Reason: gpunode.ReasonMIGEvicting, Message: "stopped while evicting"}}
		case <-time.After(poll):
		}
	}
}

func (r *Reconciler) status(ctx context.Context, s Status) {
	if gpus, err := GPUs(ctx, r.HW); err == nil {
		s.GPUs = gpus
	}
	if err := r.Cluster.SetStatus(ctx, s); err != nil && r.Log != nil {
		r.Log.Warn("the MIG status could not be written on the Node", "err", err)
	}
}

func (r *Reconciler) report(ctx context.Context, o Outcome) Outcome {
	r.status(ctx, o.Status)
	return o
}

// resync is how often Run passes without being asked.
const resync = 5 * time.Minute

// Run reconciles at start, whenever trigger receives, every resync, and
// after a failed pass that may pass, with a back-off from minBackoff
// doubling to maxBackoff, until ctx ends.
func (r *Reconciler) Run(ctx context.Context, trigger <-chan struct{}, minBackoff, maxBackoff time.Duration) error {
	backoff := minBackoff
	for {
		out := r.Reconcile(ctx)
		// A pass every resync even when nothing asks: a layout changed
		// behind the agent's back (nvidia-smi mig by hand) is put back.
		wait := resync
		if out.Retry {
			wait = backoff
			backoff = min(backoff*2, maxBackoff)
			if r.Log != nil {
				r.Log.Info("MIG config not reached; retrying", "in", wait, "reason", out.Status.Reason)
			}
		} else {
			backoff = minBackoff
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-trigger:
		case <-t.C:
		}
		t.Stop()
	}
}

func planIndices(p *Plan) []int {
	out := make([]int, len(p.Changes))
	for i, c := range p.Changes {
		out[i] = c.Index
	}
	return out
}

func describePlan(p *Plan) string {
	parts := make([]string, len(p.Changes))
	for i, c := range p.Changes {
		parts[i] = fmt.Sprintf("GPU %d: %s -> %s", c.Index, c.From, c.To)
	}
	return strings.Join(parts, "; ")
}

func podList(ps []Pod) string {
	names := make([]string, 0, len(ps))
	for i, p := range ps {
		if i == 5 {
			names = append(names, fmt.Sprintf("and %d more", len(ps)-5))
			break
		}
		names = append(names, p.String())
	}
	return strings.Join(names, ", ")
}

func keys(m map[int]bool) []int {
	out := make([]int, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Ints(out)
	return out
}

func gpusIndices(gs []GPU) []int {
	out := make([]int, len(gs))
	for i, g := range gs {
		out[i] = g.Index
	}
	return out
}

func indexList(is []int) string {
	s := make([]string, len(is))
	for i, x := range is {
		s[i] = strconv.Itoa(x)
	}
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, ", ")
}
