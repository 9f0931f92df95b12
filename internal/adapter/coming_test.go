package adapter

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpuplane/gpuplane/api/gpunode"
	"github.com/gpuplane/gpuplane/internal/testutil/build"
)

// A node that offers GPUs and has not registered them is read as it will
// be, coming, until its time is up; then as it is, with a warning.
func TestComingNodeRead(t *testing.T) {
	created := time.Date(2026, 11, 28, 3, 0, 0, 0, time.UTC)
	bare := func(annotations, labels map[string]string) *corev1.Node {
		n := build.Node("new").Resources(rl("cpu", "64", "memory", "256Gi")).Obj()
		n.CreationTimestamp = metav1.NewTime(created)
		n.Annotations, n.Labels = annotations, labels
		n.Spec.Taints = []corev1.Taint{{Key: "karpenter.sh/unregistered", Effect: corev1.TaintEffectNoExecute}}
		return n
	}
	tests := []struct {
		name       string
		node       *corev1.Node
		at         time.Duration // after creation
		wantComing bool
		wantGPUs   int
		wantWarn   string
	}{
		{name: "offered by annotation, within its time: coming with the offer",
			node: bare(map[string]string{gpunode.OfferAnnotation: "nvidia.com/gpu=8"}, map[string]string{LabelGPUCount: "8"}),
			at:   time.Minute, wantComing: true, wantGPUs: 8},
		{name: "time-sliced four ways under nvidia.com/gpu: 8 GPUs of 4 replicas",
			node: bare(map[string]string{gpunode.OfferAnnotation: "nvidia.com/gpu=32"}, map[string]string{LabelGPUCount: "8", LabelGPUReplicas: "4"}),
			at:   time.Minute, wantComing: true, wantGPUs: 8},
		{name: "offered by its count label alone",
			node: bare(nil, map[string]string{LabelGPUCount: "4"}),
			at:   time.Minute, wantComing: true, wantGPUs: 4},
		{name: "time up: as it is, with a warning",
			node: bare(map[string]string{gpunode.OfferAnnotation: "nvidia.com/gpu=8"}, nil),
			at:   10 * time.Minute, wantWarn: "registered none of it within 10m0s"},
		{name: "no offer: as it is",
			node: bare(nil, nil), at: time.Minute},
		{name: "registered, zero GPUs healthy: as it is",
			node: func() *corev1.Node {
				n := bare(map[string]string{gpunode.OfferAnnotation: "nvidia.com/gpu=8"}, nil)
				n.Status.Capacity[ResourceGPU], n.Status.Allocatable[ResourceGPU] = resource.MustParse("0"), resource.MustParse("0")
				return n
			}(),
			at: time.Minute},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := newClusterCache("gpuplane-scheduler")
			c.clock = func() time.Time { return created.Add(tc.at) }
			c.upsertNode(tc.node)
			ni := c.nodes["new"]
			if ni == nil {
				t.Fatalf("node left out: %v", c.badNodes)
			}
			if ni.m.Coming != tc.wantComing || len(ni.m.GPUs) != tc.wantGPUs {
				t.Errorf("coming %v with %d GPUs, want coming %v with %d", ni.m.Coming, len(ni.m.GPUs), tc.wantComing, tc.wantGPUs)
			}
			if tc.wantComing && len(ni.m.Taints) != 0 {
				t.Errorf("a coming node keeps its start-up taints %v", ni.m.Taints)
			}
			w := c.nodeWarnings["new"]
			if tc.wantWarn == "" && w.msg != "" || !strings.Contains(w.msg, tc.wantWarn) || tc.wantWarn != "" && w.reason != ReasonGPUsNotRegistered {
				t.Errorf("warning %q (%s), want one saying %q", w.msg, w.reason, tc.wantWarn)
			}
		})
	}
}

// A coming node stops counting as coming when its time is up, with no
// change to the Node: the next snapshot reads it as it is.
func TestComingNodeExpires(t *testing.T) {
	created := time.Date(2026, 11, 28, 3, 0, 0, 0, time.UTC)
	n := build.Node("new").Resources(rl("cpu", "64", "memory", "256Gi")).Obj()
	n.CreationTimestamp = metav1.NewTime(created)
	n.Annotations = map[string]string{gpunode.OfferAnnotation: "nvidia.com/gpu=8"}
	c := newClusterCache("gpuplane-scheduler")
	now := created.Add(time.Minute)
	c.clock = func() time.Time { return now }
	c.upsertNode(n)
	if !c.nodes["new"].m.Coming {
		t.Fatal("not coming a minute after its creation")
	}
	now = created.Add(DefaultComingNodeTimeout)
	c.expireComing(now)
	if ni := c.nodes["new"]; ni.m.Coming || len(ni.m.GPUs) != 0 || c.nodeWarnings["new"].reason != ReasonGPUsNotRegistered {
		t.Errorf("after its time: coming %v, %d GPUs, warning %+v; want it as it is, with %s", ni.m.Coming, len(ni.m.GPUs), c.nodeWarnings["new"], ReasonGPUsNotRegistered)
	}
}

// A coming node whose device plugin registers exactly the GPUs it offered
// changes nothing but its coming: the next snapshot must read it up, or
// nothing would ever be bound there.
func TestComingNodeRegistersItsOffer(t *testing.T) {
	created := time.Date(2026, 11, 28, 3, 0, 0, 0, time.UTC)
	n := build.Node("new").Resources(rl("cpu", "64", "memory", "256Gi")).Obj()
	n.CreationTimestamp = metav1.NewTime(created)
	n.Labels = map[string]string{LabelGPUCount: "4"}
	l := NewLive("gpuplane-scheduler")
	l.c.clock = func() time.Time { return created.Add(time.Minute) }
	coming := func() bool {
		t.Helper()
		v := l.View(created.Add(time.Minute))
		for _, m := range v.Snapshot.Nodes {
			if m.Name == "new" {
				return m.Coming
			}
		}
		t.Fatal("node new not in the snapshot")
		return false
	}
	if err := l.Upsert(n.DeepCopy()); err != nil {
		t.Fatal(err)
	}
	if !coming() {
		t.Fatal("not coming before its GPUs register")
	}
	up := n.DeepCopy()
	up.Status.Capacity[ResourceGPU], up.Status.Allocatable[ResourceGPU] = resource.MustParse("4"), resource.MustParse("4")
	if err := l.Upsert(up); err != nil {
		t.Fatal(err)
	}
	if coming() {
		t.Error("still coming after it registered the 4 GPUs it offered")
	}
}
