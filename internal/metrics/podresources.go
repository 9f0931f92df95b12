package metrics

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"
	"strings"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"
)

// DefaultPodResourcesSocket is where the kubelet serves the PodResources
// API.
const DefaultPodResourcesSocket = "/var/lib/kubelet/pod-resources/kubelet.sock"

// PodResourcesLister lists the devices held by the node's containers.
type PodResourcesLister interface {
	List(ctx context.Context) (*podresourcesv1.ListPodResourcesResponse, error)
}

// Reasons gpuplane_podresources_up gives when the API did not answer.
const (
	ReasonSocketAbsent = "socket-absent"
	ReasonListFailed   = "list-failed"
	ReasonDisabled     = "disabled"
)

// ErrSocketAbsent is returned by the socket client when the kubelet's
// socket does not exist (no kubelet, or the directory is not mounted).
var ErrSocketAbsent = errors.New("the PodResources socket does not exist")

// SocketPodResources is a PodResourcesLister speaking gRPC to the kubelet
// over a unix socket. It connects on first use and again after the socket
// disappears, so it survives kubelet restarts.
type SocketPodResources struct {
	path string

	mu     sync.Mutex
	conn   *grpc.ClientConn
	client podresourcesv1.PodResourcesListerClient
}

var _ PodResourcesLister = (*SocketPodResources)(nil)

// NewSocketPodResources returns a lister for the socket at path
// (DefaultPodResourcesSocket when empty). It does not connect yet.
func NewSocketPodResources(path string) *SocketPodResources {
	if path == "" {
		path = DefaultPodResourcesSocket
	}
	return &SocketPodResources{path: path}
}

// List implements PodResourcesLister.
func (s *SocketPodResources) List(ctx context.Context) (*podresourcesv1.ListPodResourcesResponse, error) {
	if _, err := os.Stat(s.path); err != nil {
		s.Close() // the socket is gone; the stat error is the one to report
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("listing pod resources from %s: %w", s.path, ErrSocketAbsent)
		}
		return nil, fmt.Errorf("listing pod resources from %s: %w", s.path, err)
	}
	client, err := s.connect()
	if err != nil {
		return nil, err
	}
	resp, err := client.List(ctx, &podresourcesv1.ListPodResourcesRequest{})
	if err != nil {
		return nil, fmt.Errorf("listing pod resources from %s: %w", s.path, err)
	}
	return resp, nil
}

func (s *SocketPodResources) connect() (podresourcesv1.PodResourcesListerClient, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.client != nil {
		return s.client, nil
	}
	conn, err := grpc.NewClient("unix://"+s.path,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(16<<20)))
	if err != nil {
		return nil, fmt.Errorf("connecting to the PodResources socket %s: %w", s.path, err)
	}
	s.conn, s.client = conn, podresourcesv1.NewPodResourcesListerClient(conn)
	return s.client, nil
}

// Close drops the connection; the next List reconnects.
func (s *SocketPodResources) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.conn == nil {
		return nil
	}
	err := s.conn.Close()
	s.conn, s.client = nil, nil
	return err
}

// Holder is a container holding a device.
type Holder struct {
	Namespace, Pod, Container string
	Resource                  string
	// DeviceID is the ID the kubelet lists, with any ::N replica suffix.
	DeviceID string
}

// splitDeviceID strips a replica suffix ("GPU-...::3" -> "GPU-...").
func splitDeviceID(id string) string {
	if i := strings.Index(id, "::"); i >= 0 {
		return id[:i]
	}
	return id
}

// deviceKey resolves a kubelet device ID to the UUID of the GPU or MIG
// device it names: a UUID (GPU-..., MIG-...), a GPU index ("3") or a MIG
// index ("3:1", the second MIG device of GPU 3), each with an optional
// ::N replica suffix. ok is false for a device that is not a GPU here.
func (e *Exporter) deviceKey(id string) (string, bool) {
	base := splitDeviceID(id)
	if _, ok := e.byUUID[base]; ok {
		return base, true
	}
	if i, err := strconv.Atoi(base); err == nil && i >= 0 && i < len(e.devices) {
		return e.devices[i].UUID, true
	}
	if gi, mi, found := strings.Cut(base, ":"); found {
		g, err1 := strconv.Atoi(gi)
		m, err2 := strconv.Atoi(mi)
		if err1 == nil && err2 == nil && g >= 0 && g < len(e.devices) && m >= 0 && m < len(e.devices[g].MIGDevices) {
			return e.devices[g].MIGDevices[m].UUID, true
		}
	}
	return "", false
}
