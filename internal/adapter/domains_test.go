package adapter

import (
	"reflect"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gpuplane/gpuplane/internal/scheduler/model"
	"github.com/gpuplane/gpuplane/internal/testutil/build"
)

// TestNodeDomainsCarryReadKeysOnly: the core's nodes carry, as domains,
// only the label keys a pod reads as topology keys, and as class labels
// only what node selectors read. A label nothing reads changes no model
// node (every map is the one passed before, which the core tells by
// identity); a topology label that is read changes that node's domains
// alone; a label a node selector reads changes that node's class labels
// alone, the class keeping its number.
func TestNodeDomainsCarryReadKeysOnly(t *testing.T) {
	const zone = "topology.kubernetes.io/zone"
	c := newClusterCache("gpuplane-scheduler")
	node := func(name, z, pool, tick string) *corev1.Node {
		n := build.Node(name).Label("kubernetes.io/hostname", name).Label(zone, z).Label("pool", pool).Label("example.com/tick", tick).
			CPU("64").Memory("512Gi").Pods(110).Product("NVIDIA-H100-80GB-HBM3", 81559).GPUs(8).Obj()
		n.ResourceVersion = tick
		return slimNode(n)
	}
	c.upsertNode(node("n0", "z0", "gpu", "1"))
	c.upsertNode(node("n1", "z1", "gpu", "1"))
	c.upsertNode(node("n2", "z1", "gpu", "1"))
	c.upsertNode(node("n3", "z0", "cpu", "1"))
	p := newPod("ns", "spread").GPUs(1).Label("app", "web").NodeSelector("pool", "gpu").Obj()
	p.UID = types.UID(p.Name)
	p.Spec.TopologySpreadConstraints = []corev1.TopologySpreadConstraint{{MaxSkew: 1, TopologyKey: zone,
		WhenUnsatisfiable: corev1.DoNotSchedule, LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}}}
	c.upsertPod(slimPod(p))
	b := newBuilder("gpuplane-scheduler", 64, logr.Discard())
	snap := func() []model.Node {
		return c.snapshot(b, newRefusals(), time.Unix(1000, 0)).snap.Nodes
	}
	same := func(x, y map[string]string) bool {
		return reflect.ValueOf(x).UnsafePointer() == reflect.ValueOf(y).UnsafePointer()
	}
	// changed fails t unless exactly the nodes named in want have other
	// domains or class labels in next than in last.
	changed := func(step string, last, next []model.Node, domains, labels string) {
		t.Helper()
		for i := range next {
			name := next[i].Name
			if got := !same(last[i].Domains, next[i].Domains); got != (name == domains) {
				t.Errorf("%s: node %s's domains changed: %v (%v to %v)", step, name, got, last[i].Domains, next[i].Domains)
			}
			if got := !same(last[i].Labels, next[i].Labels); got != (name == labels) {
				t.Errorf("%s: node %s's class labels changed: %v (%v to %v)", step, name, got, last[i].Labels, next[i].Labels)
			}
		}
	}

	first := snap()
	for _, n := range first {
		if len(n.Domains) != 1 || n.Domains[zone] == "" {
			t.Errorf("node %s has domains %v, want its zone alone", n.Name, n.Domains)
		}
		// The pod's class and its spread's nodes (nodeAffinityPolicy
		// Honor): the nodes of pool gpu.
		want := 2
		if n.Name == "n3" {
			want = 0
		}
		if len(n.Labels) != want {
			t.Errorf("node %s has class labels %v, want %d", n.Name, n.Labels, want)
		}
	}

	c.upsertNode(node("n1", "z1", "gpu", "2"))
	second := snap()
	changed("a label nothing reads", first, second, "", "")

	c.upsertNode(node("n2", "z2", "gpu", "3"))
	third := snap()
	changed("the zone, which the spread reads", second, third, "n2", "")
	if got := third[2].Domains[zone]; got != "z2" {
		t.Errorf("n2's zone is %q, want z2", got)
	}

	c.upsertNode(node("n0", "z0", "cpu", "4"))
	fourth := snap()
	changed("the pool, which the node selector reads", third, fourth, "", "n0")
	if len(fourth[0].Labels) != 0 || !reflect.DeepEqual(fourth[1].Labels, third[0].Labels) {
		t.Errorf("class labels n0 %v, n1 %v; want none on n0 and n1's as before", fourth[0].Labels, fourth[1].Labels)
	}
}
