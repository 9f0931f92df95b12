package quarantine

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/gpuplane/gpuplane/api/gpunode"
	"github.com/gpuplane/gpuplane/internal/nodecond"
)

// Event reasons on the Node, one per step.
const (
	ReasonQuarantined      = "GPUQuarantined"
	ReasonFailedAgain      = "GPUFailedAgain"
	ReasonEvicted          = "GPUPodEvicted"
	ReasonEvictionRefused  = "GPUPodEvictionRefused"
	ReasonEvictionTimedOut = "GPUDrainTimedOut"
	ReasonDrained          = "GPUDrained"
	ReasonReset            = "GPUReset"
	ReasonResetFailed      = "GPUResetFailed"
	ReasonRefreshFailed    = "GPUInventoryRefreshFailed"
	ReasonHeld             = "GPUHeld"
	ReasonRetry            = "GPURetry"
	ReasonReturned         = "GPUReturned"
	ReasonResumed          = "GPUQuarantineResumed"
)

// stateInService is the metrics' name of a GPU not in quarantine.
const stateInService = "in-service"

// NodeStatus is what the Node shows of the quarantine.
type NodeStatus struct {
	// TaintValue is the value of gpunode.TaintGPUFault; "" means no taint.
	TaintValue string
	// Condition is gpunode.ConditionGPUQuarantine.
	Condition Condition
	// Record is gpunode.QuarantineAnnotation; no GPUs removes it.
	Record gpunode.QuarantineRecord
}

// Condition is the GPUQuarantine condition, as every Node condition the
// agent writes says it.
type Condition = nodecond.Condition

// maxMessage bounds the condition's message.
const maxMessage = 2048

// status computes what the Node must show.
func (c *Controller) status() NodeStatus {
	var s NodeStatus
	var lines []string
	held := false
	for _, i := range sortedKeys(c.gpus) {
		g := c.gpus[i]
		s.Record.GPUs = append(s.Record.GPUs, gpunode.QuarantinedGPU{
			Index: g.index, UUID: g.uuid, XID: g.xid, Class: g.class.Name, State: g.state,
			Node: g.class.NodeWide(), Since: g.entered, Fails: g.fails,
		})
		if !g.quarantined() {
			continue
		}
		if g.class.NodeWide() && s.TaintValue == "" {
			s.TaintValue = gpunode.TaintValue(g.xid)
		}
		line := fmt.Sprintf("GPU %d (%s): XID %d (%s), %s", g.index, g.uuid, g.xid, g.class.Name, g.state)
		if g.state == gpunode.QuarantineHeld {
			held = true
			line += fmt.Sprintf(" until %s", g.entered.Add(c.policy.RetryHeldAfter).UTC().Format(time.RFC3339))
		}
		if g.why != "" {
			line += ": " + g.why
		}
		if g.fails > 1 {
			line += fmt.Sprintf(" (failure %d within %s)", g.fails, c.policy.Window)
		}
		lines = append(lines, line)
	}
	switch {
	case len(lines) == 0:
		s.Condition = Condition{Status: corev1.ConditionFalse, Reason: gpunode.ReasonNoGPUQuarantined, Message: "every GPU is in service"}
	case held:
		s.Condition = Condition{Status: corev1.ConditionTrue, Reason: gpunode.ReasonGPUHeld, Message: strings.Join(lines, "; ")}
	default:
		s.Condition = Condition{Status: corev1.ConditionTrue, Reason: gpunode.ReasonGPUQuarantined, Message: strings.Join(lines, "; ")}
	}
	if len(s.Condition.Message) > maxMessage {
		s.Condition.Message = s.Condition.Message[:maxMessage-3] + "..."
	}
	return s
}

// sync writes the status when it differs from what was last written; a
// failed write is retried at the next step.
func (c *Controller) sync(ctx context.Context) {
	s := c.status()
	if c.written != nil && reflect.DeepEqual(*c.written, s) {
		return
	}
	if err := c.o.Node.Write(ctx, s); err != nil {
		// Retried every step; said again only when the error changes.
		if ctx.Err() == nil && err.Error() != c.writeErr {
			c.log.Warn("showing the GPU quarantine on the Node; retrying every step", "err", err)
		}
		c.writeErr = err.Error()
		return
	}
	if c.writeErr != "" {
		c.log.Info("the GPU quarantine is shown on the Node again")
		c.writeErr = ""
	}
	c.written = &s
	now := c.o.Clock.Now()
	for _, g := range c.gpus {
		if g.quarantined() && !g.shown {
			g.shown = true
			c.o.Metrics.shown(now.Sub(g.faultAt))
		}
	}
}

// Quarantined lists the GPUs (by index) in quarantine now, with their
// state.
func (c *Controller) Quarantined() map[int]string {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[int]string{}
	for i, g := range c.gpus {
		if g.quarantined() {
			out[i] = g.state
		}
	}
	return out
}
