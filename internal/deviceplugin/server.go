package deviceplugin

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/gpuplane/gpuplane/internal/gpu"
	"github.com/gpuplane/gpuplane/internal/sharing"
)

// HealthSource says whether a GPU or MIG device (by UUID) is healthy and
// when that may have changed. *health.Monitor implements it.
type HealthSource interface {
	Healthy(uuid string) bool
	// Changes returns a channel that receives after a change, and a
	// function that stops it.
	Changes() (<-chan struct{}, func())
}

// AllHealthy is a HealthSource for when health checks are off.
type AllHealthy struct{}

var _ HealthSource = AllHealthy{}

// Healthy implements HealthSource.
func (AllHealthy) Healthy(string) bool { return true }

// Changes implements HealthSource; it never fires.
func (AllHealthy) Changes() (<-chan struct{}, func()) { return nil, func() {} }

// AllocationRecorder is what a HealthSource may also be: the node's ledger
// of held devices (internal/ledger), told of every device Allocate hands
// out, which refuses a device a DRA claim holds.
type AllocationRecorder interface {
	// Allocated records that the plugin gave the devices (by GPU or MIG
	// UUID) to a container, or refuses.
	Allocated(uuids []string) error
}

// Steerer names the devices a container being admitted should get when a
// scheduler chose them: the kubelet asks GetPreferredAllocation with the
// free device IDs and a count, never with the pod, so the Steerer works
// out which pod is being admitted from the pods bound to the node.
type Steerer interface {
	// Steer returns size IDs of res's devices, all in available and
	// including mustInclude, that a pod awaiting admission was placed on;
	// ok is false when no such pod fits the request, and the resource's
	// own preference applies.
	Steer(res *sharing.Resource, available, mustInclude []string, size int) (ids []string, ok bool)
}

// Limiter is what a Steerer may also tell: the part of a GPU the pod that
// was just steered ids of res asked for, so that Allocate passes its
// limits to the container.
type Limiter interface {
	// Limits returns the compute share in thousandths (0: none asked) and
	// the memory in MiB (0: none asked); ok is false when ids were not
	// steered to a pod that asked for part of a GPU.
	Limits(res *sharing.Resource, ids []string) (milli, memoryMiB int64, ok bool)
}

// Avoider is what a Steerer may also tell: the physical GPUs (by index)
// that the scheduler's choices for the node's pods leave no room on for
// one more of res's devices. The resource's own preference, for a request
// no pod was steered to, leaves their devices out while enough others are
// free: a pod another scheduler placed then does not share, or take, a GPU
// gpuplane-scheduler gave or is about to give its own pods.
type Avoider interface {
	Avoid(res *sharing.Resource) map[int]bool
}

// Server serves one sharing.
type Server struct {
	pluginapi.UnimplementedDevicePluginServer

	name   string
	health HealthSource
	steer  Steerer
	topo   *gpu.Topology
	socket string
	log    *slog.Logger

	mu sync.Mutex
	// res and contract are what the server offers; replace swaps them and
	// closes replaced so that open ListAndWatch streams send the new list.
	res      *sharing.Resource
	contract Contract
	replaced chan struct{}
	grpc     *grpc.Server
	stopCh   chan struct{}
	// streams counts the kubelet's open ListAndWatch streams; idleSince is
	// when the server last had none (since it started, was registered or
	// lost its last stream).
	streams   int
	idleSince time.Time
}

var _ pluginapi.DevicePluginServer = (*Server)(nil)

// ServerOptions configure a Server.
type ServerOptions struct {
	Resource *sharing.Resource
	Contract Contract
	Health   HealthSource
	// Steer, when set, is asked first which devices a container being
	// admitted gets: those its scheduler chose (see Steerer).
	Steer Steerer
	// Topology may be nil: whole GPUs are then chosen by index.
	Topology *gpu.Topology
	// Dir is the kubelet's device-plugin directory.
	Dir    string
	Logger *slog.Logger
}

// NewServer checks its options and returns a server that is not yet
// listening.
func NewServer(o ServerOptions) (*Server, error) {
	if o.Resource == nil {
		return nil, errors.New("device plugin server: no resource")
	}
	if o.Dir == "" {
		return nil, errors.New("device plugin server: no device-plugin directory")
	}
	if o.Health == nil {
		o.Health = AllHealthy{}
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return &Server{
		name: o.Resource.Name, res: o.Resource, contract: o.Contract, replaced: make(chan struct{}),
		health: o.Health, steer: o.Steer, topo: o.Topology,
		socket: filepath.Join(o.Dir, SocketName(o.Resource.Name)),
		log:    o.Logger.With("resource", o.Resource.Name),
	}, nil
}

// SocketName is the file name of a resource's socket.
func SocketName(resourceName string) string {
	return "gpuplane-" + strings.NewReplacer("/", "-").Replace(resourceName) + ".sock"
}

// Name returns the served resource's name, which never changes.
func (s *Server) Name() string { return s.name }

// Resource returns the served sharing.
func (s *Server) Resource() *sharing.Resource {
	res, _ := s.serving()
	return res
}

func (s *Server) serving() (*sharing.Resource, Contract) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.res, s.contract
}

// replace serves res, a resource of the same name, and contract from now
// on. The kubelet learns the new device list on the ListAndWatch streams it
// has open: the server need not register again.
func (s *Server) replace(res *sharing.Resource, contract Contract) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.res, s.contract = res, contract
	close(s.replaced)
	s.replaced = make(chan struct{})
}

// Socket returns the socket path.
func (s *Server) Socket() string { return s.socket }

// Start listens on the socket (replacing a stale one) and serves.
func (s *Server) Start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.grpc != nil {
		return nil
	}
	if err := os.Remove(s.socket); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("removing stale socket %s: %w", s.socket, err)
	}
	lis, err := net.Listen("unix", s.socket)
	if err != nil {
		return fmt.Errorf("listening on %s: %w", s.socket, err)
	}
	// Stop removes the socket itself: a listener closed late (when Serve
	// starts after Stop) must not unlink the socket of a newer server.
	if ul, ok := lis.(*net.UnixListener); ok {
		ul.SetUnlinkOnClose(false)
	}
	s.grpc = grpc.NewServer()
	s.stopCh = make(chan struct{})
	s.streams, s.idleSince = 0, time.Now()
	pluginapi.RegisterDevicePluginServer(s.grpc, s)
	srv := s.grpc
	go func() {
		if err := srv.Serve(lis); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			s.log.Error("device plugin server stopped", "socket", s.socket, "err", err)
		}
	}()
	return nil
}

// Stop ends the server, its ListAndWatch streams, and removes its socket.
func (s *Server) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.grpc == nil {
		return
	}
	close(s.stopCh)
	s.grpc.Stop()
	s.grpc = nil
	if err := os.Remove(s.socket); err != nil && !errors.Is(err, os.ErrNotExist) {
		s.log.Warn("removing socket", "socket", s.socket, "err", err)
	}
}

// unwatchedFor is how long the running server has had no ListAndWatch
// stream from the kubelet, 0 while it has one or is not running.
func (s *Server) unwatchedFor(now time.Time) time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.grpc == nil || s.streams > 0 {
		return 0
	}
	return now.Sub(s.idleSince)
}

// Register tells the kubelet at kubeletSocket about this sharing.
func (s *Server) Register(ctx context.Context, kubeletSocket string) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	conn, err := grpc.NewClient("unix://"+kubeletSocket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return fmt.Errorf("connecting to the kubelet at %s: %w", kubeletSocket, err)
	}
	defer func() { _ = conn.Close() }()
	_, err = pluginapi.NewRegistrationClient(conn).Register(ctx, &pluginapi.RegisterRequest{
		Version:      pluginapi.Version,
		Endpoint:     filepath.Base(s.socket),
		ResourceName: s.name,
		Options:      s.options(),
	})
	if err != nil {
		return fmt.Errorf("registering %s with the kubelet at %s: %w", s.name, kubeletSocket, err)
	}
	s.mu.Lock()
	if s.streams == 0 {
		s.idleSince = time.Now()
	}
	s.mu.Unlock()
	return nil
}

func (s *Server) options() *pluginapi.DevicePluginOptions {
	return &pluginapi.DevicePluginOptions{GetPreferredAllocationAvailable: true}
}

// GetDevicePluginOptions implements DevicePluginServer.
func (s *Server) GetDevicePluginOptions(context.Context, *pluginapi.Empty) (*pluginapi.DevicePluginOptions, error) {
	return s.options(), nil
}

// devices is res's device list with health and topology.
func (s *Server) devices(res *sharing.Resource) []*pluginapi.Device {
	out := make([]*pluginapi.Device, len(res.Devices))
	for i := range res.Devices {
		d := &res.Devices[i]
		dev := &pluginapi.Device{ID: d.ID, Health: pluginapi.Healthy}
		if !s.healthy(d) {
			dev.Health = pluginapi.Unhealthy
		}
		if d.NUMANode >= 0 {
			dev.Topology = &pluginapi.TopologyInfo{Nodes: []*pluginapi.NUMANode{{ID: int64(d.NUMANode)}}}
		}
		out[i] = dev
	}
	return out
}

func (s *Server) healthy(d *sharing.Device) bool {
	return s.health.Healthy(d.UUID) && (d.GPUUUID == d.UUID || s.health.Healthy(d.GPUUUID))
}

// ListAndWatch implements DevicePluginServer: the device list now, and
// again after every health change and replace, until the server stops.
func (s *Server) ListAndWatch(_ *pluginapi.Empty, stream grpc.ServerStreamingServer[pluginapi.ListAndWatchResponse]) error {
	s.mu.Lock()
	stop, replaced := s.stopCh, s.replaced
	s.streams++
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		if s.streams--; s.streams == 0 {
			s.idleSince = time.Now()
		}
		s.mu.Unlock()
	}()
	changes, cancel := s.health.Changes()
	defer cancel()
	// A list is sent when the resource was replaced or its health
	// changed: a health change that comes with a replace must not hide
	// the new device list.
	var lastRes *sharing.Resource
	lastKey := ""
	send := func() error {
		s.mu.Lock()
		res := s.res
		replaced = s.replaced
		s.mu.Unlock()
		devs := s.devices(res)
		key := fingerprint(devs)
		if res == lastRes && key == lastKey {
			return nil
		}
		lastRes, lastKey = res, key
		s.log.Debug("sending device list", "devices", len(devs))
		return stream.Send(&pluginapi.ListAndWatchResponse{Devices: devs})
	}
	if err := send(); err != nil {
		return fmt.Errorf("sending the device list of %s: %w", s.name, err)
	}
	for {
		select {
		case <-stop:
			return nil
		case <-stream.Context().Done():
			return nil
		case <-replaced:
		case <-changes:
		}
		if err := send(); err != nil {
			return fmt.Errorf("sending the device list of %s: %w", s.name, err)
		}
	}
}

func fingerprint(devs []*pluginapi.Device) string {
	var b strings.Builder
	for _, d := range devs {
		if d.Health != pluginapi.Healthy {
			b.WriteString(d.ID)
			b.WriteByte(',')
		}
	}
	return b.String()
}

// GetPreferredAllocation implements DevicePluginServer: the devices the
// Steerer names for a pod its scheduler placed, else the resource's own
// preference (packed or NVLink-aware for whole GPUs, spread for replicas).
func (s *Server) GetPreferredAllocation(_ context.Context, req *pluginapi.PreferredAllocationRequest) (*pluginapi.PreferredAllocationResponse, error) {
	res, _ := s.serving()
	resp := &pluginapi.PreferredAllocationResponse{}
	for _, cr := range req.ContainerRequests {
		if s.steer != nil {
			if ids, ok := s.steer.Steer(res, cr.AvailableDeviceIDs, cr.MustIncludeDeviceIDs, int(cr.AllocationSize)); ok {
				resp.ContainerResponses = append(resp.ContainerResponses, &pluginapi.ContainerPreferredAllocationResponse{DeviceIDs: ids})
				continue
			}
		}
		available := cr.AvailableDeviceIDs
		if a, ok := s.steer.(Avoider); ok {
			available = leaveOut(res, available, cr.MustIncludeDeviceIDs, int(cr.AllocationSize), a.Avoid(res))
		}
		ids, err := res.Preferred(available, cr.MustIncludeDeviceIDs, int(cr.AllocationSize), s.topo)
		if err != nil {
			return nil, status.Errorf(codes.InvalidArgument, "preferred allocation for %s: %v", res.Name, err)
		}
		resp.ContainerResponses = append(resp.ContainerResponses, &pluginapi.ContainerPreferredAllocationResponse{DeviceIDs: ids})
	}
	return resp, nil
}

// leaveOut returns available without the devices on the GPUs of avoid,
// those of mustInclude kept, when at least size remain; else available.
func leaveOut(res *sharing.Resource, available, mustInclude []string, size int, avoid map[int]bool) []string {
	if len(avoid) == 0 {
		return available
	}
	kept := make([]string, 0, len(available))
	for _, id := range available {
		if d, ok := res.Device(id); !ok || !avoid[d.GPUIndex] || slices.Contains(mustInclude, id) {
			kept = append(kept, id)
		}
	}
	if len(kept) < size {
		return available
	}
	return kept
}

// Allocate implements DevicePluginServer. An unknown or unhealthy device
// fails the request with an error naming it.
func (s *Server) Allocate(_ context.Context, req *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
	res, contract := s.serving()
	resp := &pluginapi.AllocateResponse{ContainerResponses: make([]*pluginapi.ContainerAllocateResponse, 0, len(req.ContainerRequests))}
	for _, cr := range req.ContainerRequests {
		if res.FailRequestsGreaterThanOne && res.HasReplicas() && len(cr.DevicesIds) > 1 {
			return nil, status.Errorf(codes.InvalidArgument,
				"%s is shared (failRequestsGreaterThanOne) and a container may request only 1, got %d; request 1 or use a whole-GPU resource", res.Name, len(cr.DevicesIds))
		}
		devs := make([]*sharing.Device, 0, len(cr.DevicesIds))
		for _, id := range cr.DevicesIds {
			d, ok := res.Device(id)
			if !ok {
				return nil, status.Errorf(codes.InvalidArgument, "%s has no device %q", res.Name, id)
			}
			if !s.healthy(d) {
				return nil, status.Errorf(codes.FailedPrecondition, "device %q of %s is unhealthy", id, res.Name)
			}
			devs = append(devs, d)
		}
		if rec, ok := s.health.(AllocationRecorder); ok {
			uuids := make([]string, len(devs))
			for i, d := range devs {
				uuids[i] = d.UUID
			}
			if err := rec.Allocated(uuids); err != nil {
				return nil, status.Errorf(codes.FailedPrecondition, "allocating %v of %s: %v", cr.DevicesIds, res.Name, err)
			}
		}
		cresp, err := contract.containerResponse(res, devs)
		if err != nil {
			return nil, status.Errorf(codes.Internal, "allocating %v of %s: %v", cr.DevicesIds, res.Name, err)
		}
		if l, ok := s.steer.(Limiter); ok {
			if milli, mem, ok := l.Limits(res, cr.DevicesIds); ok {
				cresp.Envs = fractionEnv(cresp.Envs, devs, milli, mem)
			}
		}
		resp.ContainerResponses = append(resp.ContainerResponses, cresp)
	}
	return resp, nil
}

// PreStartContainer implements DevicePluginServer; nothing is needed.
func (s *Server) PreStartContainer(context.Context, *pluginapi.PreStartContainerRequest) (*pluginapi.PreStartContainerResponse, error) {
	return &pluginapi.PreStartContainerResponse{}, nil
}
