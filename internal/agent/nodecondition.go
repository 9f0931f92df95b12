package agent

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/gpuplane/gpuplane/api/gpunode"
	"github.com/gpuplane/gpuplane/internal/nodecond"
)

// conditionFieldManager owns the GPUReady condition in the Node's status.
const conditionFieldManager = "gpuplane-agent-condition"

// conditionInterval is how often the checks run (they read the agent's own
// state); the condition is written only when its status, reason or message
// changes, so the Node follows the agent within this long.
const conditionInterval = 2 * time.Second

// nodeCondition is what the agent says of its node in the GPUReady
// condition: the first failing check, or that all pass.
type nodeCondition struct {
	status  corev1.ConditionStatus
	reason  string
	message string
}

// checkNode runs the node's checks in order and returns the condition:
// GPUs listed, their device nodes present and no MIG change pending
// (host), device plugin registered with the kubelet, GPU events watched,
// CDI specs written (host). Each failure names its fix.
func checkNode(gpus int, p *probes) nodeCondition {
	if gpus == 0 {
		return nodeCondition{corev1.ConditionFalse, gpunode.ReasonNoGPUs,
			"NVML lists no GPUs. Fix: check `nvidia-smi -L` on the node; a GPU that fell off the bus needs a reset or a reboot"}
	}
	m := p.manager.Load()
	var registered []string
	if m != nil {
		registered = slices.Sorted(maps.Keys(m.Registrations()))
	}
	if c := p.host.check(registered); c != nil && c.reason != gpunode.ReasonCDISpecsMissing {
		return *c
	}
	switch {
	case p.withheld.Load():
		// The GPUs are served through DRA only: nothing to register.
	case m == nil:
		return nodeCondition{corev1.ConditionFalse, gpunode.ReasonDevicePluginNotRegistered,
			"the device plugin is starting (reading its config). Fix: wait; if it stays, the agent's log says why"}
	case m.Ready() != nil:
		return nodeCondition{corev1.ConditionFalse, gpunode.ReasonDevicePluginNotRegistered,
			fmt.Sprintf("%v. Fix: check that the kubelet runs and that its device-plugins directory (under --kubelet-dir, default /var/lib/kubelet) is mounted into the agent", m.Ready())}
	}
	if mon := p.health.monitor.Load(); mon != nil {
		if st := mon.Status(); !st.Monitoring && !st.Disabled {
			return nodeCondition{corev1.ConditionFalse, gpunode.ReasonHealthMonitorDown,
				fmt.Sprintf("GPU events are not watched, so failing GPUs go unseen: %s. Fix: the agent restarts itself after %s without events; if that does not mend it, check the driver (nvidia-smi -q)", st.Err, liveGrace)}
		}
	}
	if c := p.host.check(registered); c != nil {
		return *c
	}
	resources := registered
	return nodeCondition{corev1.ConditionTrue, gpunode.ReasonAgentReady,
		fmt.Sprintf("%d GPUs offered as %s; GPU events watched", gpus, strings.Join(resources, ", "))}
}

// conditionWriter keeps the GPUReady condition on the agent's Node
// (nodecond.Writer under conditionFieldManager, so that the kubelet's
// conditions are never touched) and logs its changes.
type conditionWriter struct {
	cond *nodecond.Writer
	log  *slog.Logger
}

func newConditionWriter(patch nodecond.NodePatcher, node string, log *slog.Logger) *conditionWriter {
	return &conditionWriter{cond: nodecond.New(patch, node, gpunode.ConditionGPUReady, conditionFieldManager), log: log}
}

// set writes c when it differs from what was last written; a failed write
// is retried at the next call.
func (w *conditionWriter) set(ctx context.Context, c nodeCondition) error {
	prev, had := w.cond.Last()
	wrote, err := w.cond.Set(ctx, nodecond.Condition{Status: c.status, Reason: c.reason, Message: c.message})
	if err != nil {
		return err
	}
	if wrote && (!had || c.status != prev.Status || c.reason != prev.Reason) {
		w.log.Info("node condition", "type", gpunode.ConditionGPUReady, "status", c.status, "reason", c.reason, "message", c.message)
	}
	return nil
}

// run checks the node every conditionInterval until ctx ends. Failed
// writes are logged and retried; they never stop the agent.
func (w *conditionWriter) run(ctx context.Context, check func() nodeCondition) error {
	t := time.NewTicker(conditionInterval)
	defer t.Stop()
	for {
		if err := w.set(ctx, check()); err != nil && ctx.Err() == nil {
			w.log.Warn("node condition not written; retrying", "err", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}
