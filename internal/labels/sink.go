package labels

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	"k8s.io/client-go/kubernetes"
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

// NodeSink applies labels and annotations to a Node with server-side
// apply. Its field manager owns exactly the keys of the last apply: keys
// it no longer produces are removed by the API server, and keys set by
// anyone else are left alone.
type NodeSink struct {
	client       kubernetes.Interface
	node         string
	fieldManager string
}

var _ Sink = (*NodeSink)(nil)

// NewNodeSink returns a NodeSink writing to the Node named node under
// fieldManager (DefaultFieldManager when empty).
func NewNodeSink(client kubernetes.Interface, node, fieldManager string) (*NodeSink, error) {
	if client == nil {
		return nil, errors.New("node sink: the Kubernetes client is nil")
	}
	if node == "" {
		return nil, errors.New("node sink: the node name is empty (set NODE_NAME from the pod's spec.nodeName)")
	}
	if fieldManager == "" {
		fieldManager = DefaultFieldManager
	}
	return &NodeSink{client: client, node: node, fieldManager: fieldManager}, nil
}

// Name implements Sink.
func (s *NodeSink) Name() string { return "node/" + s.node }

// Write implements Sink.
func (s *NodeSink) Write(ctx context.Context, labels, annotations Labels) error {
	ac := corev1ac.Node(s.node).WithLabels(labels).WithAnnotations(annotations)
	// Force: the agent is the authority on these keys, also when GPU
	// Feature Discovery wrote them before.
	_, err := s.client.CoreV1().Nodes().Apply(ctx, ac, metav1.ApplyOptions{FieldManager: s.fieldManager, Force: true})
	if err != nil {
		return fmt.Errorf("applying %d labels to node %s: %w", len(labels), s.node, err)
	}
	return nil
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
