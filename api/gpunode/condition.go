package gpunode

import (
	"encoding/json"
	"fmt"
	"time"
)

// NodeCondition is one condition of a Node's status that a part of
// gpuplane-agent owns (GPUReady, GPUQuarantine, MIGConfigApplied).
type NodeCondition struct {
	Type, Status, Reason, Message string
	// Heartbeat is when the condition was last written, Transition when
	// its status last changed.
	Heartbeat, Transition time.Time
}

// ConditionApplyPatch is the server-side apply body that sets c on node's
// status. Each part applies under a field manager of its own, so it owns
// its condition alone and never touches the kubelet's.
func ConditionApplyPatch(node string, c NodeCondition) ([]byte, error) {
	body, err := json.Marshal(map[string]any{
		"apiVersion": "v1", "kind": "Node",
		"metadata": map[string]any{"name": node},
		"status": map[string]any{"conditions": []map[string]any{{
			"type": c.Type, "status": c.Status, "reason": c.Reason, "message": c.Message,
			"lastHeartbeatTime":  c.Heartbeat.UTC().Format(time.RFC3339),
			"lastTransitionTime": c.Transition.UTC().Format(time.RFC3339),
		}}},
	})
	if err != nil {
		return nil, fmt.Errorf("encoding the %s condition of node %s: %w", c.Type, node, err)
	}
	return body, nil
}
