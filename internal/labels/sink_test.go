package labels

import (
	"context"
	"maps"
	"os"
	"path/filepath"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/gpuplane/gpuplane/api/gpunode"
)

func TestNodeSinkOwnsOnlyItsKeys(t *testing.T) {
	ctx := context.Background()
	client := fake.NewClientset()
	_, err := client.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{
		Name:   "node-a",
		Labels: map[string]string{"kubernetes.io/hostname": "node-a", "team": "ml"},
	}}, metav1.CreateOptions{FieldManager: "kubelet"})
	if err != nil {
		t.Fatal(err)
	}
	sink, err := NewNodeSink(client.CoreV1().Nodes(), "node-a", "")
	if err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		name        string
		labels      Labels
		annotations Labels
		want        map[string]string
	}{
		{
			name:        "first apply adds labels",
			labels:      Labels{"nvidia.com/gpu.count": "8", "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"},
			annotations: Labels{gpunode.TopologyAnnotation: `{"v":1}`},
			want:        map[string]string{"kubernetes.io/hostname": "node-a", "team": "ml", "nvidia.com/gpu.count": "8", "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"},
		},
		{
			name:   "labels no longer produced are removed",
			labels: Labels{"nvidia.com/gpu.count": "7"},
			want:   map[string]string{"kubernetes.io/hostname": "node-a", "team": "ml", "nvidia.com/gpu.count": "7"},
		},
	}
	for _, st := range steps {
		t.Run(st.name, func(t *testing.T) {
			if err := sink.Write(ctx, st.labels, st.annotations); err != nil {
				t.Fatalf("Write: %v", err)
			}
			n, err := client.CoreV1().Nodes().Get(ctx, "node-a", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if !maps.Equal(n.Labels, st.want) {
				t.Errorf("labels = %v, want %v", n.Labels, st.want)
			}
			_, hasTopo := n.Annotations[gpunode.TopologyAnnotation]
			if hasTopo != (st.annotations[gpunode.TopologyAnnotation] != "") {
				t.Errorf("annotations = %v, want topology only when applied", n.Annotations)
			}
		})
	}
}

func TestNewSinkRejects(t *testing.T) {
	tests := []struct {
		name string
		new  func() error
	}{
		{name: "nil client", new: func() error { _, err := NewNodeSink(nil, "n", ""); return err }},
		{name: "no node name", new: func() error { _, err := NewNodeSink(fake.NewClientset().CoreV1().Nodes(), "", ""); return err }},
		{name: "no file", new: func() error { _, err := NewFeatureFileSink(""); return err }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.new() == nil {
				t.Fatal("constructor accepted invalid arguments")
			}
		})
	}
}

func TestFeatureFileSink(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "features.d")
	path := filepath.Join(dir, "gfd")
	sink, err := NewFeatureFileSink(path)
	if err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		name   string
		labels Labels
		want   string
	}{
		{name: "create", labels: Labels{"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", "nvidia.com/gpu.count": "8"}, want: "nvidia.com/gpu.count=8\nnvidia.com/gpu.product=NVIDIA-H100-80GB-HBM3\n"},
		{name: "replace", labels: Labels{"nvidia.com/gpu.count": "4"}, want: "nvidia.com/gpu.count=4\n"},
	}
	for _, st := range steps {
		t.Run(st.name, func(t *testing.T) {
			if err := sink.Write(context.Background(), st.labels, Labels{gpunode.TopologyAnnotation: "{}"}); err != nil {
				t.Fatalf("Write: %v", err)
			}
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if string(b) != st.want {
				t.Errorf("file = %q, want %q", b, st.want)
			}
			entries, err := os.ReadDir(dir)
			if err != nil {
				t.Fatal(err)
			}
			if len(entries) != 1 {
				t.Errorf("directory holds %d files, want only the features file (no leftovers)", len(entries))
			}
		})
	}
}
