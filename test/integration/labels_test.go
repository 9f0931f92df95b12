// Package integration_test checks GPU feature labels on a Node of the real
// API server from the integration framework: server-side apply under the
// agent's field manager adds them, replaces them when the GPUs or the
// sharing change, removes the ones it no longer produces, and leaves every
// other owner's labels alone.
package integration_test

import (
	"context"
	"io"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/gpuplane/gpuplane/api/gpunode"
	"github.com/gpuplane/gpuplane/internal/gpu/sim"
	"github.com/gpuplane/gpuplane/internal/labels"
	"github.com/gpuplane/gpuplane/internal/localcluster"
	"github.com/gpuplane/gpuplane/test/integration/framework"
)

var env *framework.Env

func TestMain(m *testing.M) {
	os.Exit(framework.Main(m, localcluster.DefaultConfig(), &env))
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// labelRunner labels node from a simulated DGX H100 with cfg's labelers,
// except the one named drop.
func labelRunner(t *testing.T, client kubernetes.Interface, node string, cfg labels.Config, drop string, backoff time.Duration) (*labels.Runner, *sim.Backend) {
	t.Helper()
	p, err := sim.Load("dgxh100")
	if err != nil {
		t.Fatal(err)
	}
	b, err := sim.New(p, sim.Options{NodeName: node})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	all, err := labels.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var ls []labels.Labeler
	for _, l := range all {
		if l.Name() != drop {
			ls = append(ls, l)
		}
	}
	sink, err := labels.NewNodeSink(client.CoreV1().Nodes(), node, "")
	if err != nil {
		t.Fatal(err)
	}
	r, err := labels.NewRunner(labels.RunnerOptions{Inventory: b, Labelers: ls, Sink: sink, InitialBackoff: backoff, MaxBackoff: 4 * backoff, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	return r, b
}

func TestLabelsOnANode(t *testing.T) {
	ctx := context.Background()
	const node = "labels-node"
	obj := framework.GPUNode(node).Label("team", "ml").Obj()
	if _, err := env.Client.CoreV1().Nodes().Create(ctx, obj, metav1.CreateOptions{FieldManager: "kubectl"}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Client.CoreV1().Nodes().Delete(context.Background(), node, metav1.DeleteOptions{}) })

	noDMI := labels.Config{MachineTypeFile: "/nonexistent", SysfsRoot: t.TempDir()}
	shared := noDMI
	shared.Sharing = map[string]labels.Sharing{labels.ResourceGPU: {Strategy: labels.SharingTimeSlicing, Replicas: 4}}
	mixed := noDMI
	mixed.MIGStrategy = labels.MIGStrategyMixed
	steps := []struct {
		name    string
		cfg     labels.Config
		drop    string
		want    map[string]string
		missing []string
	}{
		{
			name: "time-sliced",
			cfg:  shared,
			want: map[string]string{
				"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3-SHARED", "nvidia.com/gpu.replicas": "4",
				"nvidia.com/gpu.sharing-strategy": "time-slicing", "nvidia.com/gpu.count": "8",
				"nvidia.com/mig.strategy": "none", "team": "ml", "kubernetes.io/hostname": node,
			},
		},
		{
			name: "sharing off, mixed MIG strategy",
			cfg:  mixed,
			want: map[string]string{
				"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", "nvidia.com/gpu.replicas": "1",
				"nvidia.com/gpu.sharing-strategy": "none", "nvidia.com/mig.strategy": "mixed", "team": "ml",
			},
		},
		{
			// A labeler set without the MIG labeler: its keys must go.
			name:    "labels no longer produced are removed",
			cfg:     noDMI,
			drop:    "mig",
			want:    map[string]string{"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", "team": "ml"},
			missing: []string{"nvidia.com/mig.capable", "nvidia.com/mig.strategy"},
		},
	}
	for _, st := range steps {
		t.Run(st.name, func(t *testing.T) {
			r, b := labelRunner(t, env.Client, node, st.cfg, st.drop, 100*time.Millisecond)
			devs, err := b.Devices(ctx)
			if err != nil {
				t.Fatal(err)
			}
			// The builder set GPU Feature Discovery's memory label to another
			// value; the agent's apply takes the key over.
			st.want["nvidia.com/gpu.memory"] = strconv.FormatUint(devs[0].MemoryMiB, 10)
			runCtx, cancel := context.WithTimeout(ctx, time.Minute)
			defer cancel()
			if err := r.Once(runCtx); err != nil {
				t.Fatalf("labelling: %v", err)
			}
			n, err := env.Client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			for k, v := range st.want {
				if n.Labels[k] != v {
					t.Errorf("label %s = %q, want %q", k, n.Labels[k], v)
				}
			}
			for _, k := range st.missing {
				if v, ok := n.Labels[k]; ok {
					t.Errorf("label %s = %q still present", k, v)
				}
			}
			topo, err := gpunode.ParseTopology(n.Annotations[gpunode.TopologyAnnotation])
			if err != nil {
				t.Fatalf("topology annotation: %v", err)
			}
			if len(topo.Groups) != 1 || len(topo.Groups[0].GPUs) != 8 || topo.Groups[0].NVLinks != 18 {
				t.Errorf("topology = %+v, want one NVLink group of 8 GPUs with 18 links", topo)
			}
			if n.Annotations[localcluster.KwokNodeAnnotation] != localcluster.KwokNodeAnnotationValue {
				t.Errorf("another owner's annotation was changed: %v", n.Annotations)
			}
			owners := map[string]bool{}
			for _, mf := range n.ManagedFields {
				owners[mf.Manager] = true
			}
			if !owners[labels.DefaultFieldManager] {
				t.Errorf("no managed fields for %s: %v", labels.DefaultFieldManager, owners)
			}
		})
	}
}

func TestLabelsRetryWhileTheAPIServerIsUnreachable(t *testing.T) {
	// Nothing listens on port 1 of the loopback address.
	client, err := kubernetes.NewForConfig(&rest.Config{Host: "https://127.0.0.1:1", Timeout: time.Second,
		TLSClientConfig: rest.TLSClientConfig{Insecure: true}})
	if err != nil {
		t.Fatal(err)
	}
	r, _ := labelRunner(t, client, "unreachable-node", labels.Config{MachineTypeFile: "/nonexistent", SysfsRoot: t.TempDir()}, "", 50*time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	err = r.Once(ctx)
	if err == nil {
		t.Fatal("labelling succeeded without an API server")
	}
	if !strings.Contains(err.Error(), "labelling stopped before it succeeded") || !strings.Contains(err.Error(), "node unreachable-node") {
		t.Errorf("error = %v, want it to say the node write kept failing until the context ended", err)
	}
}
