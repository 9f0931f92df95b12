package adapter

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/gpuplane/gpuplane/api/scheduling/v1alpha1"
	"github.com/gpuplane/gpuplane/internal/testutil/build"
)

// ViewOf gives the core what a cycle gives it: the nodes, the running
// allocations on them, the pending pods with their requests, and says
// why it holds back a pod it does not offer.
func TestViewOf(t *testing.T) {
	objs := []runtime.Object{
		build.Node("a").CPU("8").Memory("16Gi").Pods(110).GPUs(4).Obj(),
		build.Pod("ns", "running").NodeName("a").Request(corev1.ResourceCPU, "2").GPUs(2).Obj(),
		build.Pod("ns", "waits").SchedulerName(v1alpha1.SchedulerName).Request(corev1.ResourceCPU, "1").GPUs(1).Obj(),
		build.Pod("ns", "bad").SchedulerName(v1alpha1.SchedulerName).Limit("nvidia.com/gpu", "2").Request("nvidia.com/gpu", "1").Obj(),
	}
	v, err := ViewOf(v1alpha1.SchedulerName, objs, time.Unix(100, 0))
	if err != nil {
		t.Fatal(err)
	}
	snap := &v.Snapshot
	if len(snap.Nodes) != 1 || snap.Nodes[0].Name != "a" || len(snap.Nodes[0].GPUs) != 4 {
		t.Fatalf("nodes %+v", snap.Nodes)
	}
	if r := snap.RunningByNode[0]; len(r) != 1 || r[0].Pod != "ns/running" || r[0].Request.MilliCPU != 2000 || len(r[0].GPUs) != 2 {
		t.Fatalf("running %+v", snap.RunningByNode)
	}
	if len(snap.Pending) != 1 || snap.Pending[0].Pods[0].Name != "ns/waits" || snap.Pending[0].Pods[0].Request.GPUs != 1 {
		t.Fatalf("pending %+v", snap.Pending)
	}
	if why := v.Held["ns/bad"]; why == "" {
		t.Fatalf("held %v: want ns/bad with its reason", v.Held)
	}
}

// ViewOf refuses a kind gpuplane-scheduler does not read, naming it.
func TestViewOfRefusesUnreadKinds(t *testing.T) {
	_, err := ViewOf(v1alpha1.SchedulerName, []runtime.Object{&corev1.ConfigMap{}}, time.Unix(100, 0))
	if err == nil || err.Error() != "objs[0]: gpuplane-scheduler does not read a *v1.ConfigMap" {
		t.Fatalf("error = %v", err)
	}
}
