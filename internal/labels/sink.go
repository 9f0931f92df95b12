package labels

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Sink is where labels go.
type Sink interface {
	// Name identifies the sink in logs.
	Name() string
	// Write replaces the labels (and annotations, where the sink keeps them)
	// it wrote last time with these.
	Write(ctx context.Context, labels, annotations Labels) error
}

// DefaultFieldManager is the server-side-apply field manager of the agent.
const DefaultFieldManager = "gpuplane-agent"

// NodePatcher patches Nodes: the Patch method of client-go's typed Node
// client (clientset.CoreV1().Nodes()), or any client that can send an
// apply patch to the nodes resource. NodeSink takes this one method rather
// than a clientset, or client-go's apply configurations, because both link
// client-go's scheme of every API group, which more than doubles the
// agent's binary and resident memory.
type NodePatcher interface {
	Patch(ctx context.Context, name string, pt types.PatchType, data []byte, opts metav1.PatchOptions, subresources ...string) (*corev1.Node, error)
}

// NodeSink applies labels and annotations to a Node with server-side
// apply. Its field manager owns exactly the keys of the last apply: keys
// it no longer produces are removed by the API server, and keys set by
// anyone else are left alone.
type NodeSink struct {
	nodes        NodePatcher
	node         string
	fieldManager string
}

var _ Sink = (*NodeSink)(nil)

// NewNodeSink returns a NodeSink writing to the Node named node through
// nodes under fieldManager (DefaultFieldManager when empty).
func NewNodeSink(nodes NodePatcher, node, fieldManager string) (*NodeSink, error) {
	if nodes == nil {
		return nil, errors.New("node sink: the Kubernetes client is nil")
	}
	if node == "" {
		return nil, errors.New("node sink: the node name is empty (set NODE_NAME from the pod's spec.nodeName)")
	}
	if fieldManager == "" {
		fieldManager = DefaultFieldManager
	}
	return &NodeSink{nodes: nodes, node: node, fieldManager: fieldManager}, nil
}

// Name implements Sink.
func (s *NodeSink) Name() string { return "node/" + s.node }

// Write implements Sink.
func (s *NodeSink) Write(ctx context.Context, labels, annotations Labels) error {
	body, err := json.Marshal(nodeApply{
		APIVersion: "v1", Kind: "Node",
		Metadata: applyMeta{Name: s.node, Labels: labels, Annotations: annotations},
	})
	if err != nil {
		return fmt.Errorf("encoding the labels of node %s: %w", s.node, err)
	}
	// Force: the agent is the authority on these keys, also when GPU
	// Feature Discovery wrote them before.
	force := true
	_, err = s.nodes.Patch(ctx, s.node, types.ApplyPatchType, body, metav1.PatchOptions{FieldManager: s.fieldManager, Force: &force})
	if err != nil {
		return fmt.Errorf("applying %d labels to node %s: %w", len(labels), s.node, err)
	}
	return nil
}

// nodeApply is the server-side apply body of a Node: exactly the keys the
// sink owns. An empty map is left out, which gives up every key of that
// map the field manager owned before.
type nodeApply struct {
	APIVersion string    `json:"apiVersion"`
	Kind       string    `json:"kind"`
	Metadata   applyMeta `json:"metadata"`
}

type applyMeta struct {
	Name        string `json:"name"`
	Labels      Labels `json:"labels,omitempty"`
	Annotations Labels `json:"annotations,omitempty"`
}

// DefaultFeatureFile is where node-feature-discovery's local source reads
// GPU Feature Discovery's labels.
const DefaultFeatureFile = "/etc/kubernetes/node-feature-discovery/features.d/gfd"

// FeatureFileSink writes labels to a node-feature-discovery features file,
// one key=value per line, replacing the file atomically so that
// node-feature-discovery never reads half a file. Annotations are dropped:
// the format has none.
type FeatureFileSink struct {
	path string
}

var _ Sink = (*FeatureFileSink)(nil)

// NewFeatureFileSink returns a FeatureFileSink writing path.
func NewFeatureFileSink(path string) (*FeatureFileSink, error) {
	if path == "" {
		return nil, errors.New("feature file sink: the path is empty")
	}
	return &FeatureFileSink{path: path}, nil
}

// Name implements Sink.
func (s *FeatureFileSink) Name() string { return "file/" + s.path }

// Write implements Sink.
func (s *FeatureFileSink) Write(_ context.Context, labels, _ Labels) error {
	var b strings.Builder
	for _, k := range labels.Keys() {
		b.WriteString(k)
		b.WriteByte('=')
		b.WriteString(labels[k])
		b.WriteByte('\n')
	}
	dir := filepath.Dir(s.path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("creating the features directory: %w", err)
	}
	// The temporary file must not look like a features file to
	// node-feature-discovery, which reads every file in the directory.
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(s.path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("writing features file %s: %w", s.path, err)
	}
	defer os.Remove(tmp.Name()) // gone after a successful rename
	if _, err := tmp.WriteString(b.String()); err != nil {
		tmp.Close() // the write error is the one to report
		return fmt.Errorf("writing features file %s: %w", s.path, err)
	}
	if err := tmp.Chmod(0o644); err != nil {
		tmp.Close() // the chmod error is the one to report
		return fmt.Errorf("writing features file %s: %w", s.path, err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close() // the sync error is the one to report
		return fmt.Errorf("writing features file %s: %w", s.path, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("writing features file %s: %w", s.path, err)
	}
	if err := os.Rename(tmp.Name(), s.path); err != nil {
		return fmt.Errorf("replacing features file %s: %w", s.path, err)
	}
	return nil
}
