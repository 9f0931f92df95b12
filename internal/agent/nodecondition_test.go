package agent

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gpuplane/gpuplane/api/gpunode"
	"github.com/gpuplane/gpuplane/internal/deviceplugin"
)

// recordingPatcher records the patches sent to a Node; fail makes them
// fail.
type recordingPatcher struct {
	patches []map[string]any
	subs    [][]string
	fail    error
}

func (r *recordingPatcher) Patch(_ context.Context, name string, pt types.PatchType, data []byte, opts metav1.PatchOptions, sub ...string) (*corev1.Node, error) {
	if r.fail != nil {
		return nil, r.fail
	}
	if pt != types.ApplyPatchType || opts.FieldManager != conditionFieldManager || opts.Force == nil || !*opts.Force {
		return nil, errors.New("not a forced server-side apply by the condition's field manager")
	}
	var m map[string]any
	if err := json.Unmarshal(data, &m); err != nil {
		return nil, err
	}
	r.patches = append(r.patches, m)
	r.subs = append(r.subs, sub)
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}, nil
}

func (r *recordingPatcher) condition(i int) map[string]any {
	return r.patches[i]["status"].(map[string]any)["conditions"].([]any)[0].(map[string]any)
}

// The checks in order: no GPUs, the plugin not started or not registered,
// then GPU events; each failure says how to fix it.
func TestCheckNode(t *testing.T) {
	p := newProbes(newMonitorHealth(nil))
	if c := checkNode(0, p); c.status != corev1.ConditionFalse || c.reason != gpunode.ReasonNoGPUs || !strings.Contains(c.message, "Fix:") {
		t.Errorf("no GPUs: %+v", c)
	}
	if c := checkNode(8, p); c.reason != gpunode.ReasonDevicePluginNotRegistered || !strings.Contains(c.message, "starting") {
		t.Errorf("plugin not started: %+v", c)
	}
	m, err := deviceplugin.NewManager(deviceplugin.ManagerOptions{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	p.setManager(m)
	if c := checkNode(8, p); c.reason != gpunode.ReasonDevicePluginNotRegistered || !strings.Contains(c.message, "no resources to advertise") || !strings.Contains(c.message, "--kubelet-dir") {
		t.Errorf("plugin serving nothing: %+v", c)
	}
}

// The writer applies the condition only when it changes, keeps the
// transition time while the status stays, and retries a failed write.
func TestConditionWriter(t *testing.T) {
	r := &recordingPatcher{}
	w := newConditionWriter(r, "gpu-node-1", slog.New(slog.DiscardHandler))
	now := time.Date(2026, 11, 25, 10, 0, 0, 0, time.UTC)
	w.cond.Now = func() time.Time { return now }
	ctx := context.Background()
	down := nodeCondition{corev1.ConditionFalse, gpunode.ReasonDevicePluginNotRegistered, "not registered. Fix: x"}
	if err := w.set(ctx, down); err != nil {
		t.Fatal(err)
	}
	if err := w.set(ctx, down); err != nil || len(r.patches) != 1 {
		t.Fatalf("the same condition twice: %d patches (%v), want 1", len(r.patches), err)
	}
	if len(r.subs[0]) != 1 || r.subs[0][0] != "status" || r.patches[0]["metadata"].(map[string]any)["name"] != "gpu-node-1" {
		t.Errorf("patch %v to %v, want gpu-node-1's status", r.patches[0], r.subs[0])
	}
	c := r.condition(0)
	if c["type"] != gpunode.ConditionGPUReady || c["status"] != "False" || c["reason"] != gpunode.ReasonDevicePluginNotRegistered || c["lastTransitionTime"] != "2026-11-25T10:00:00Z" {
		t.Errorf("condition %v", c)
	}
	// Another reason, the same status: the transition time stays.
	now = now.Add(time.Minute)
	if err := w.set(ctx, nodeCondition{corev1.ConditionFalse, gpunode.ReasonHealthMonitorDown, "events. Fix: y"}); err != nil {
		t.Fatal(err)
	}
	if c := r.condition(1); c["lastTransitionTime"] != "2026-11-25T10:00:00Z" || c["lastHeartbeatTime"] != "2026-11-25T10:01:00Z" {
		t.Errorf("same status, new reason: %v, want the first transition time kept", c)
	}
	// A failed write is retried by the next call with the same condition.
	now = now.Add(time.Minute)
	up := nodeCondition{corev1.ConditionTrue, gpunode.ReasonAgentReady, "8 GPUs offered"}
	r.fail = errors.New("the API server is away")
	if err := w.set(ctx, up); err == nil || !strings.Contains(err.Error(), "GPUReady") {
		t.Errorf("failed write: %v, want an error naming the condition", err)
	}
	r.fail = nil
	if err := w.set(ctx, up); err != nil || len(r.patches) != 3 {
		t.Fatalf("retry: %d patches (%v), want 3", len(r.patches), err)
	}
	if c := r.condition(2); c["status"] != "True" || c["lastTransitionTime"] != "2026-11-25T10:02:00Z" {
		t.Errorf("to True: %v, want a new transition time", c)
	}
}
