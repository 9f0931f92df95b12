package nodecond

import (
	"context"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"

	"github.com/gpuplane/gpuplane/api/gpunode"
)

// Condition is what a part says in its condition.
type Condition struct {
	Status  corev1.ConditionStatus
	Reason  string
	Message string
}

// NodePatcher patches Nodes: the Patch method of client-go's typed Node
// client, or of the agent's core/v1-only Node client (labels.NodePatcher
// is the same interface).
type NodePatcher interface {
	Patch(ctx context.Context, name string, pt types.PatchType, data []byte, opts metav1.PatchOptions, subresources ...string) (*corev1.Node, error)
}

// Writer keeps one condition of one Node. It is safe for use by several
// goroutines.
type Writer struct {
	nodes        NodePatcher
	node         string
	condType     string
	fieldManager string
	// Now is the clock of lastHeartbeatTime and lastTransitionTime;
	// time.Now when nil. Set it before the first write.
	Now func() time.Time

	mu         sync.Mutex
	last       Condition
	written    bool
	transition time.Time
}

// New returns a Writer of the condition condType on the Node named node,
// applied through nodes under fieldManager.
func New(nodes NodePatcher, node, condType, fieldManager string) *Writer {
	return &Writer{nodes: nodes, node: node, condType: condType, fieldManager: fieldManager}
}

// Set writes c unless it is the condition last written, and reports
// whether it wrote. A failed write leaves nothing remembered: the next
// call writes again.
func (w *Writer) Set(ctx context.Context, c Condition) (bool, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.written && c == w.last {
		return false, nil
	}
	return true, w.writeLocked(ctx, c)
}

// Write writes c even when it is the condition last written, which
// refreshes its lastHeartbeatTime.
func (w *Writer) Write(ctx context.Context, c Condition) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.writeLocked(ctx, c)
}

// Last returns the condition last written, and false before the first
// successful write.
func (w *Writer) Last() (Condition, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.last, w.written
}

func (w *Writer) writeLocked(ctx context.Context, c Condition) error {
	now := time.Now()
	if w.Now != nil {
		now = w.Now()
	}
	transition := w.transition
	if !w.written || c.Status != w.last.Status {
		transition = now
	}
	body, err := gpunode.ConditionApplyPatch(w.node, gpunode.NodeCondition{Type: w.condType,
		Status: string(c.Status), Reason: c.Reason, Message: c.Message, Heartbeat: now, Transition: transition})
	if err != nil {
		return err
	}
	force := true
	opts := metav1.PatchOptions{FieldManager: w.fieldManager, Force: &force}
	if _, err := w.nodes.Patch(ctx, w.node, types.ApplyPatchType, body, opts, "status"); err != nil {
		return fmt.Errorf("writing the %s condition of node %s: %w", w.condType, w.node, err)
	}
	w.last, w.written, w.transition = c, true, transition
	return nil
}

// REST is a NodePatcher over a REST client of the core/v1 API. It sends
// the patch options as query parameters and does not decode the answer.
func REST(client rest.Interface) NodePatcher { return restPatcher{client} }

type restPatcher struct{ client rest.Interface }

func (r restPatcher) Patch(ctx context.Context, name string, pt types.PatchType, data []byte, opts metav1.PatchOptions, subresources ...string) (*corev1.Node, error) {
	req := r.client.Patch(pt).Resource("nodes").Name(name).SubResource(subresources...)
	if opts.FieldManager != "" {
		req = req.Param("fieldManager", opts.FieldManager)
	}
	if opts.Force != nil && *opts.Force {
		req = req.Param("force", "true")
	}
	if err := req.Body(data).Do(ctx).Error(); err != nil {
		return nil, err
	}
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}, nil
}
