// Package metricstest builds simulated GPU nodes with pods for the metrics
// tests: a sim backend running one process per pod, the host files the
// exporter reads (/proc/<pid>/cgroup, the kubelet's device checkpoint) in
// a temporary directory, and a real PodResources gRPC server on a unix
// socket serving the matching allocation, since no kubelet runs in tests.
//
// It must only be imported by tests and benchmarks.
package metricstest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/gpuplane/gpuplane/internal/gpu"
	"github.com/gpuplane/gpuplane/internal/gpu/sim"
)

// Pod is one simulated pod holding one replica of a GPU (or a MIG device)
// and running one process on it.
type Pod struct {
	Namespace, Name, Container, UID string
	Resource                        string
	// DeviceID is the ID the kubelet lists: <uuid>::<replica> when shared.
	DeviceID string
	GPU      int
	// MIG names the MIG device the process runs in, or is nil.
	MIG    *sim.MIGRef
	PID    uint32
	MemMiB uint64
	Util   uint32
	// CgroupV1 writes the process's cgroup file in the v1 format.
	CgroupV1 bool
}

// Node is a simulated node with pods.
type Node struct {
	Backend        *sim.Backend
	Clock          *sim.ManualClock
	Pods           []Pod
	ProcRoot       string
	CheckpointPath string
}

// NewNode starts a simulated node of the named profile ("dgxh100").
func NewNode(tb testing.TB, profile, nodeName string) *Node {
	tb.Helper()
	p, err := sim.Load(profile)
	if err != nil {
		tb.Fatalf("loading sim profile: %v", err)
	}
	clk := sim.NewManualClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	b, err := sim.New(p, sim.Options{NodeName: nodeName, Clock: clk})
	if err != nil {
		tb.Fatalf("starting sim: %v", err)
	}
	tb.Cleanup(func() { _ = b.Close() })
	dir := tb.TempDir()
	n := &Node{Backend: b, Clock: clk, ProcRoot: filepath.Join(dir, "proc"), CheckpointPath: filepath.Join(dir, "kubelet_internal_checkpoint")}
	if err := os.MkdirAll(n.ProcRoot, 0o755); err != nil {
		tb.Fatal(err)
	}
	return n
}

// Devices lists the node's GPUs.
func (n *Node) Devices(tb testing.TB) []gpu.Device {
	tb.Helper()
	devs, err := n.Backend.Devices(context.Background())
	if err != nil {
		tb.Fatal(err)
	}
	return devs
}

// TimeSliced gives each of the node's GPUs perGPU pods sharing it through
// time-slicing under resource (nvidia.com/gpu, or a renamed
// nvidia.com/gpu.shared). Pod k on GPU g uses (k+1) GiB and k+1 percent.
func (n *Node) TimeSliced(tb testing.TB, resource string, perGPU int) {
	tb.Helper()
	for g, d := range n.Devices(tb) {
		for k := range perGPU {
			n.AddPod(tb, Pod{
				Namespace: fmt.Sprintf("team-%d", g%3), Name: fmt.Sprintf("train-%d-%d", g, k), Container: "main",
				Resource: resource, DeviceID: fmt.Sprintf("%s::%d", d.UUID, k), GPU: g,
				PID: uint32(10000 + g*100 + k), MemMiB: uint64(1024 * (k + 1)), Util: uint32(k + 1),
				CgroupV1: k%2 == 1,
			})
		}
	}
}

// AddPod runs the pod's process and writes its cgroup file. Its UID is
// derived from its PID when empty.
func (n *Node) AddPod(tb testing.TB, p Pod) {
	tb.Helper()
	if p.UID == "" {
		p.UID = fmt.Sprintf("%08x-0000-4000-8000-%012x", p.PID, p.PID)
	}
	if err := n.Backend.RunProcess(p.GPU, sim.Proc{PID: p.PID, MemMiB: p.MemMiB, Util: p.Util, MemUtil: p.Util, MIG: p.MIG}); err != nil {
		tb.Fatalf("running the process of pod %s: %v", p.Name, err)
	}
	dir := filepath.Join(n.ProcRoot, fmt.Sprint(p.PID))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		tb.Fatal(err)
	}
	cid := fmt.Sprintf("%064x", p.PID)
	content := fmt.Sprintf("0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod%s.slice/cri-containerd-%s.scope\n",
		underscores(p.UID), cid)
	if p.CgroupV1 {
		content = fmt.Sprintf("12:pids:/kubepods/burstable/pod%s/%s\n11:memory:/kubepods/burstable/pod%s/%s\n1:name=systemd:/kubepods/burstable/pod%s/%s\n",
			p.UID, cid, p.UID, cid, p.UID, cid)
	}
	if err := os.WriteFile(filepath.Join(dir, "cgroup"), []byte(content), 0o644); err != nil {
		tb.Fatal(err)
	}
	n.Pods = append(n.Pods, p)
}

func underscores(s string) string {
	b := []byte(s)
	for i := range b {
		if b[i] == '-' {
			b[i] = '_'
		}
	}
	return string(b)
}

// WriteCheckpoint writes the kubelet's device checkpoint for the pods, in
// the format of Kubernetes 1.20 and later.
func (n *Node) WriteCheckpoint(tb testing.TB) {
	tb.Helper()
	type entry struct {
		PodUID        string
		ContainerName string
		ResourceName  string
		DeviceIDs     map[string][]string
		AllocResp     []byte
	}
	var f struct {
		Data struct {
			PodDeviceEntries  []entry
			RegisteredDevices map[string][]string
		}
		Checksum uint64
	}
	for _, p := range n.Pods {
		f.Data.PodDeviceEntries = append(f.Data.PodDeviceEntries, entry{
			PodUID: p.UID, ContainerName: p.Container, ResourceName: p.Resource,
			DeviceIDs: map[string][]string{"-1": {p.DeviceID}},
		})
	}
	b, err := json.Marshal(f)
	if err != nil {
		tb.Fatal(err)
	}
	if err := os.WriteFile(n.CheckpointPath, b, 0o644); err != nil {
		tb.Fatal(err)
	}
}

// Response is the PodResources List answer for the pods.
func (n *Node) Response() *podresourcesv1.ListPodResourcesResponse {
	resp := &podresourcesv1.ListPodResourcesResponse{}
	for _, p := range n.Pods {
		resp.PodResources = append(resp.PodResources, &podresourcesv1.PodResources{
			Name: p.Name, Namespace: p.Namespace,
			Containers: []*podresourcesv1.ContainerResources{{
				Name:    p.Container,
				Devices: []*podresourcesv1.ContainerDevices{{ResourceName: p.Resource, DeviceIds: []string{p.DeviceID}}},
			}},
		})
	}
	return resp
}

// StaticLister is a PodResourcesLister answering with a fixed response.
type StaticLister struct {
	Resp *podresourcesv1.ListPodResourcesResponse
	Err  error
}

// List returns the fixed answer.
func (s *StaticLister) List(context.Context) (*podresourcesv1.ListPodResourcesResponse, error) {
	return s.Resp, s.Err
}

// podResourcesServer implements the kubelet's PodResources v1 service with
// a fixed answer.
type podResourcesServer struct {
	podresourcesv1.UnimplementedPodResourcesListerServer
	mu   sync.Mutex
	resp *podresourcesv1.ListPodResourcesResponse
}

func (s *podResourcesServer) List(context.Context, *podresourcesv1.ListPodResourcesRequest) (*podresourcesv1.ListPodResourcesResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.resp, nil
}

// ServePodResources serves resp as the kubelet's PodResources API on a
// unix socket in a new temporary directory and returns the socket's path.
// The server stops when the test ends.
func ServePodResources(tb testing.TB, resp *podresourcesv1.ListPodResourcesResponse) string {
	tb.Helper()
	// Unix socket paths are limited to about 100 bytes; test temp
	// directories can be longer.
	dir, err := os.MkdirTemp("", "podres")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = os.RemoveAll(dir) })
	path := filepath.Join(dir, "kubelet.sock")
	ln, err := (&net.ListenConfig{}).Listen(context.Background(), "unix", path)
	if err != nil {
		tb.Fatalf("listening on %s: %v", path, err)
	}
	srv := grpc.NewServer()
	podresourcesv1.RegisterPodResourcesListerServer(srv, &podResourcesServer{resp: resp})
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	tb.Cleanup(func() {
		srv.Stop()
		if err := <-done; err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			tb.Errorf("PodResources server: %v", err)
		}
	})
	return path
}
