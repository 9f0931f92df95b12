package nodesim

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sort"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// plugin is one registered device plugin: one resource and its devices as
// the last ListAndWatch answer described them.
type plugin struct {
	resource string
	endpoint string
	options  *pluginapi.DevicePluginOptions
	conn     *grpc.ClientConn
	client   pluginapi.DevicePluginClient
	cancel   context.CancelFunc
	// devices is the last device list; connected is false once the stream
	// ended, when every device counts as unhealthy (as kubelet does until
	// the plugin registers again).
	devices   map[string]*pluginapi.Device
	connected bool
}

// healthy returns the IDs of the plugin's healthy devices, sorted.
func (p *plugin) healthy() []string {
	var ids []string
	if !p.connected {
		return ids
	}
	for id, d := range p.devices {
		if d.Health == pluginapi.Healthy {
			ids = append(ids, id)
		}
	}
	sort.Strings(ids)
	return ids
}

// registration implements the kubelet's Registration service.
type registration struct {
	pluginapi.UnimplementedRegistrationServer
	sim *Simulator
}

var _ pluginapi.RegistrationServer = (*registration)(nil)

// Register accepts a plugin, dials its endpoint and starts consuming its
// device list, replacing an earlier registration of the same resource.
func (r *registration) Register(_ context.Context, req *pluginapi.RegisterRequest) (*pluginapi.Empty, error) {
	if err := validateRegistration(req); err != nil {
		r.sim.log.Warn("refusing a device plugin registration", "resource", req.GetResourceName(), "err", err)
		return nil, err
	}
	if err := r.sim.addPlugin(req); err != nil {
		return nil, err
	}
	return &pluginapi.Empty{}, nil
}

// validateRegistration applies the kubelet's checks to a registration.
func validateRegistration(req *pluginapi.RegisterRequest) error {
	supported := false
	for _, v := range pluginapi.SupportedVersions {
		if req.GetVersion() == v {
			supported = true
		}
	}
	if !supported {
		return fmt.Errorf("device plugin API version %q is not supported; want one of %v", req.GetVersion(), pluginapi.SupportedVersions)
	}
	name := req.GetResourceName()
	domain, _, ok := strings.Cut(name, "/")
	if !ok || domain == "" || strings.HasSuffix(domain, "kubernetes.io") {
		return fmt.Errorf("resource name %q is not an extended resource name (domain/name outside kubernetes.io)", name)
	}
	if req.GetEndpoint() == "" || filepath.Base(req.GetEndpoint()) != req.GetEndpoint() {
		return fmt.Errorf("endpoint %q must be a socket file name in the device-plugin directory", req.GetEndpoint())
	}
	return nil
}

// addPlugin connects to a newly registered plugin and starts its
// ListAndWatch consumer.
func (s *Simulator) addPlugin(req *pluginapi.RegisterRequest) error {
	socket := filepath.Join(s.cfg.Dir, req.GetEndpoint())
	conn, err := grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return fmt.Errorf("dialing device plugin %s at %s: %w", req.GetResourceName(), socket, err)
	}
	ctx, cancel := context.WithCancel(s.ctx)
	p := &plugin{
		resource: req.GetResourceName(),
		endpoint: req.GetEndpoint(),
		options:  req.GetOptions(),
		conn:     conn,
		client:   pluginapi.NewDevicePluginClient(conn),
		cancel:   cancel,
		devices:  map[string]*pluginapi.Device{},
	}
	if p.options == nil {
		p.options = &pluginapi.DevicePluginOptions{}
	}
	s.mu.Lock()
	old := s.plugins[p.resource]
	s.plugins[p.resource] = p
	s.mu.Unlock()
	if old != nil {
		old.cancel()
		_ = old.conn.Close()
	}
	s.log.Info("device plugin registered", "resource", p.resource, "endpoint", p.endpoint,
		"preferredAllocation", p.options.GetGetPreferredAllocationAvailable())
	s.wg.Go(func() { s.watchPlugin(ctx, p) })
	return nil
}

// watchPlugin consumes the plugin's ListAndWatch stream into its device
// list until the stream ends or the registration is replaced.
func (s *Simulator) watchPlugin(ctx context.Context, p *plugin) {
	stream, err := p.client.ListAndWatch(ctx, &pluginapi.Empty{})
	if err == nil {
		for {
			var resp *pluginapi.ListAndWatchResponse
			resp, err = stream.Recv()
			if err != nil {
				break
			}
			devices := make(map[string]*pluginapi.Device, len(resp.GetDevices()))
			for _, d := range resp.GetDevices() {
				devices[d.GetID()] = d
			}
			s.mu.Lock()
			p.devices = devices
			p.connected = true
			s.mu.Unlock()
			s.log.Debug("device list", "resource", p.resource, "devices", len(devices))
			s.nodeChanged()
		}
	}
	if ctx.Err() != nil {
		return
	}
	s.mu.Lock()
	p.connected = false
	s.mu.Unlock()
	s.log.Warn("device plugin stream ended; its devices count as unhealthy until it registers again",
		"resource", p.resource, "err", describeGRPC(err))
	s.nodeChanged()
}

// describeGRPC shortens gRPC errors for logs.
func describeGRPC(err error) string {
	if err == nil {
		return ""
	}
	if st, ok := status.FromError(err); ok {
		return st.Code().String() + ": " + st.Message()
	}
	return err.Error()
}

// pluginFor returns the plugin serving resource, connected or not.
func (s *Simulator) pluginFor(resource string) (*plugin, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	p, ok := s.plugins[resource]
	return p, ok
}

// errNoPlugin says a pod asked for a resource no plugin serves.
var errNoPlugin = errors.New("no device plugin serves the resource")
