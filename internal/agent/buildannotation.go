package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gpuplane/gpuplane/api/buildinfo"
	"github.com/gpuplane/gpuplane/internal/labels"
)

// buildFieldManager owns the gpuplane.io/agent-build annotation on the
// agent's Node.
const buildFieldManager = "gpuplane-agent-build"

// buildPart writes the agent's build on its Node (buildinfo.AgentAnnotation)
// by server-side apply, so that `gpuplane version` can list what runs on
// each node. It retries until the API server takes it, backing off from
// retry to a minute, then waits for the agent to stop: the annotation is
// not worth stopping the agent for.
func buildPart(nodes labels.NodePatcher, node string, info buildinfo.Info, retry time.Duration, log *slog.Logger) (part, error) {
	value, err := buildinfo.Encode(info)
	if err != nil {
		return part{}, fmt.Errorf("the agent's build info: %w", err)
	}
	body, err := json.Marshal(map[string]any{
		"apiVersion": "v1", "kind": "Node",
		"metadata": map[string]any{"name": node, "annotations": map[string]string{buildinfo.AgentAnnotation: value}},
	})
	if err != nil {
		return part{}, fmt.Errorf("encoding the build annotation: %w", err)
	}
	force := true
	opts := metav1.PatchOptions{FieldManager: buildFieldManager, Force: &force}
	return part{name: "build", run: func(ctx context.Context) error {
		wait := retry
		for {
			_, err := nodes.Patch(ctx, node, types.ApplyPatchType, body, opts)
			if err == nil {
				log.Debug("recorded the agent's build on the node", "annotation", buildinfo.AgentAnnotation, "version", info.Version)
				<-ctx.Done()
				return nil
			}
			log.Warn("cannot record the agent's build on the node; retrying", "annotation", buildinfo.AgentAnnotation, "err", err, "in", wait)
			t := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				t.Stop()
				return nil
			case <-t.C:
			}
			wait = min(2*wait, time.Minute)
		}
	}}, nil
}
