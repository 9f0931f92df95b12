package scheduler_test

import (
	"maps"
	"reflect"
	"slices"
	"strings"
	"testing"
	"unsafe"

	"github.com/gpuplane/gpuplane/internal/scheduler"
	"github.com/gpuplane/gpuplane/internal/scheduler/model"
	"github.com/gpuplane/gpuplane/internal/scheduler/schedtest"
)

// sameNode is a node with every field sync compares set.
func sameNode() model.Node {
	n := schedtest.Node("n-0", 64000, 1<<20).GPUs(4, "A100").Obj()
	n.Labels = map[string]string{"zone": "a", "rack": "r1"}
	n.Domains = map[string]string{"kubernetes.io/hostname": "n-0"}
	n.Taints = []model.Taint{{Key: "dedicated", Value: "gpu", Effect: "NoSchedule"}}
	n.Allocatable = map[string]int64{"pods": 110, "example.com/nic": 2}
	n.Volumes = &model.NodeVolumes{Limits: []model.AttachLimit{{Driver: "csi.example.com", Max: 16}}}
	return n
}

// deepNode copies n sharing no string, slice or map with it.
func deepNode(n model.Node) model.Node {
	n.Name = strings.Clone(n.Name)
	n.GPUs = slices.Clone(n.GPUs)
	n.Taints = slices.Clone(n.Taints)
	n.Labels = maps.Clone(n.Labels)
	n.Domains = maps.Clone(n.Domains)
	n.Allocatable = maps.Clone(n.Allocatable)
	if n.Volumes != nil {
		v := *n.Volumes
		v.Limits = slices.Clone(v.Limits)
		n.Volumes = &v
	}
	return n
}

// TestSameNodes: a node is unchanged when every field the state reads is,
// whether the driver passes the very same strings, slices and maps (a
// shallow copy) or equal new ones (a deep copy); a change to any one field
// is seen either way.
func TestSameNodes(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(*model.Node)
		same   bool
	}{
		{"unchanged", func(*model.Node) {}, true},
		{"name", func(n *model.Node) { n.Name = "n-1" }, false},
		{"cpu", func(n *model.Node) { n.MilliCPU-- }, false},
		{"memory", func(n *model.Node) { n.MemoryMiB-- }, false},
		{"unschedulable", func(n *model.Node) { n.Unschedulable = true }, false},
		{"a GPU", func(n *model.Node) { n.GPUs = slices.Clone(n.GPUs); n.GPUs[1].Model = "H100" }, false},
		{"a GPU fewer", func(n *model.Node) { n.GPUs = n.GPUs[:3] }, false},
		{"a taint", func(n *model.Node) { n.Taints = []model.Taint{{Key: "dedicated", Value: "cpu", Effect: "NoSchedule"}} }, false},
		{"no taints", func(n *model.Node) { n.Taints = nil }, false},
		{"a label", func(n *model.Node) { n.Labels = map[string]string{"zone": "b", "rack": "r1"} }, false},
		{"a label more", func(n *model.Node) { n.Labels = map[string]string{"zone": "a", "rack": "r1", "x": ""} }, false},
		{"a domain", func(n *model.Node) { n.Domains = map[string]string{"kubernetes.io/hostname": "n-1"} }, false},
		{"an allocatable", func(n *model.Node) { n.Allocatable = map[string]int64{"pods": 100, "example.com/nic": 2} }, false},
		{"allocatable nil", func(n *model.Node) { n.Allocatable = nil }, false},
		{"volume limits", func(n *model.Node) {
			n.Volumes = &model.NodeVolumes{Limits: []model.AttachLimit{{Driver: "csi.example.com", Max: 8}}}
		}, false},
		{"volume limits nil", func(n *model.Node) { n.Volumes = nil }, false},
		{"labels emptied", func(n *model.Node) { n.Labels = map[string]string{} }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			old := []model.Node{schedtest.Node("n-9", 1000, 1024).Obj(), sameNode()}
			for _, copyOf := range []struct {
				name string
				f    func(model.Node) model.Node
			}{{"shallow", func(n model.Node) model.Node { return n }}, {"deep", deepNode}} {
				next := []model.Node{old[0], copyOf.f(old[1])}
				tc.change(&next[1])
				if got := scheduler.SameNodes(old, next); got != tc.same {
					t.Errorf("%s copy: SameNodes = %v, want %v", copyOf.name, got, tc.same)
				}
			}
		})
	}
	t.Run("nil labels equal empty ones", func(t *testing.T) {
		a, b := sameNode(), sameNode()
		a.Labels, a.Domains, b.Labels, b.Domains = nil, map[string]string{}, map[string]string{}, nil
		if !scheduler.SameNodes([]model.Node{a}, []model.Node{b}) {
			t.Error("SameNodes = false, want true")
		}
	})
	t.Run("empty allocatable is not nil", func(t *testing.T) {
		a, b := sameNode(), sameNode()
		a.Allocatable, b.Allocatable = nil, map[string]int64{}
		if scheduler.SameNodes([]model.Node{a}, []model.Node{b}) || scheduler.SameNodes([]model.Node{b}, []model.Node{a}) {
			t.Error("SameNodes = true, want false")
		}
	})
	t.Run("a node more", func(t *testing.T) {
		if scheduler.SameNodes([]model.Node{sameNode()}, []model.Node{sameNode(), schedtest.Node("n-9", 1000, 1024).Obj()}) {
			t.Error("SameNodes = true, want false")
		}
	})
}

// TestSyncAdoptsEqualNodes: a snapshot whose nodes equal the last one's
// but are new copies (a driver that rebuilt its node list) leaves the
// state as it was and hands the scheduler the new copies to compare with,
// so that the next cycle finds them unchanged by identity instead of
// comparing every field of every node again; the topology the state read
// stays.
func TestSyncAdoptsEqualNodes(t *testing.T) {
	s, err := scheduler.New(scheduler.Config{})
	if err != nil {
		t.Fatal(err)
	}
	first := []model.Node{schedtest.Node("n-9", 1000, 1024).Obj(), sameNode()}
	pending := []model.PodGroup{{Name: "g", Queue: "default", MinMember: 1, Pods: []model.Pod{{Name: "p", Request: schedtest.GPU(1, 1000)}}}}
	if _, err := s.Cycle(&model.Snapshot{Nodes: first, Pending: pending}); err != nil {
		t.Fatal(err)
	}
	st := scheduler.StateOf(s)
	next := []model.Node{first[0], deepNode(first[1])}
	if _, err := s.Cycle(&model.Snapshot{Nodes: next, Pending: pending}); err != nil {
		t.Fatal(err)
	}
	if scheduler.StateOf(s) != st {
		t.Fatal("equal nodes rebuilt the state")
	}
	kept := scheduler.NodesOf(s)
	if n := &kept[1]; !sameIdentity(n, &next[1]) {
		t.Errorf("the scheduler compares the next snapshot with %+v, want the copies it was given last", *n)
	}
	if kept[1].Topology != first[1].Topology {
		t.Error("the node's topology changed")
	}
}

// sameIdentity reports whether a and b share their name, slices and maps.
func sameIdentity(a, b *model.Node) bool {
	return unsafe.StringData(a.Name) == unsafe.StringData(b.Name) && &a.GPUs[0] == &b.GPUs[0] && &a.Taints[0] == &b.Taints[0] &&
		a.Volumes == b.Volumes && reflect.ValueOf(a.Labels).UnsafePointer() == reflect.ValueOf(b.Labels).UnsafePointer() &&
		reflect.ValueOf(a.Domains).UnsafePointer() == reflect.ValueOf(b.Domains).UnsafePointer() &&
		reflect.ValueOf(a.Allocatable).UnsafePointer() == reflect.ValueOf(b.Allocatable).UnsafePointer()
}

// sameAllocation is a running pod with every field sync compares set.
func sameAllocation() model.Allocation {
	req := schedtest.GPU(1, 4000)
	req.Namespace = "team-a"
	req.Labels = map[string]string{"app": "train", "role": "worker"}
	req.Affinity = &model.PodAffinity{RequiredAnti: []model.PodAffinityTerm{{
		Selector: &model.LabelSelector{MatchLabels: map[string]string{"app": "train"}}, Namespaces: []string{"team-a"}, TopologyKey: "kubernetes.io/hostname"}}}
	req.Scalars = map[string]int64{"example.com/nic": 1}
	req.HostPorts = []model.HostPort{{Port: 8080}}
	req.Volumes = &model.PodVolumes{Exclusive: []string{"team-a/data"}}
	return model.Allocation{Pod: "p", Group: "g", Queue: "q", Priority: 3, Node: "n-0", Request: req,
		GPUs: []model.GPUShare{{Index: 2, Milli: model.MilliPerGPU}}, StartedAt: 7}
}

// deepAllocation copies a sharing no string, slice or map with it.
func deepAllocation(a model.Allocation) model.Allocation {
	a.Pod, a.Group, a.Queue, a.Node = strings.Clone(a.Pod), strings.Clone(a.Group), strings.Clone(a.Queue), strings.Clone(a.Node)
	a.GPUs = slices.Clone(a.GPUs)
	r := &a.Request
	r.Namespace = strings.Clone(r.Namespace)
	r.Labels, r.Scalars, r.HostPorts = maps.Clone(r.Labels), maps.Clone(r.Scalars), slices.Clone(r.HostPorts)
	if r.Affinity != nil {
		aff := *r.Affinity
		aff.RequiredAnti = slices.Clone(aff.RequiredAnti)
		r.Affinity = &aff
	}
	if r.Volumes != nil {
		v := *r.Volumes
		v.Exclusive = slices.Clone(v.Exclusive)
		r.Volumes = &v
	}
	return a
}

// TestSameAlloc: a running pod is unchanged when everything that counts
// while it runs is, shared or copied; a change to any of it is seen.
func TestSameAlloc(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(*model.Allocation)
		same   bool
	}{
		{"unchanged", func(*model.Allocation) {}, true},
		{"pod", func(a *model.Allocation) { a.Pod = "p2" }, false},
		{"group", func(a *model.Allocation) { a.Group = "g2" }, false},
		{"queue", func(a *model.Allocation) { a.Queue = "q2" }, false},
		{"priority", func(a *model.Allocation) { a.Priority++ }, false},
		{"started", func(a *model.Allocation) { a.StartedAt++ }, false},
		{"non-preemptible", func(a *model.Allocation) { a.NonPreemptible = true }, false},
		{"cpu", func(a *model.Allocation) { a.Request.MilliCPU++ }, false},
		{"GPUs", func(a *model.Allocation) { a.GPUs = []model.GPUShare{{Index: 3, Milli: model.MilliPerGPU}} }, false},
		{"namespace", func(a *model.Allocation) { a.Request.Namespace = "team-b" }, false},
		{"a label", func(a *model.Allocation) { a.Request.Labels = map[string]string{"app": "serve", "role": "worker"} }, false},
		{"affinity", func(a *model.Allocation) { a.Request.Affinity = nil }, false},
		{"a scalar", func(a *model.Allocation) { a.Request.Scalars = map[string]int64{"example.com/nic": 2} }, false},
		{"a host port", func(a *model.Allocation) { a.Request.HostPorts = []model.HostPort{{Port: 8081}} }, false},
		{"volumes", func(a *model.Allocation) { a.Request.Volumes = &model.PodVolumes{Exclusive: []string{"team-a/other"}} }, false},
		{"tolerations do not count once running", func(a *model.Allocation) {
			a.Request.Tolerations = []model.Toleration{{Key: "dedicated", Exists: true}}
		}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			old := sameAllocation()
			for _, copyOf := range []struct {
				name string
				f    func(model.Allocation) model.Allocation
			}{{"shallow", func(a model.Allocation) model.Allocation { return a }}, {"deep", deepAllocation}} {
				next := copyOf.f(old)
				tc.change(&next)
				if got := scheduler.SameAlloc(&old, &next); got != tc.same {
					t.Errorf("%s copy: SameAlloc = %v, want %v", copyOf.name, got, tc.same)
				}
			}
		})
	}
}
