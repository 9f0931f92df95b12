package deviceplugin

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/fsnotify/fsnotify"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/gpuplane/gpuplane/internal/gpu"
	"github.com/gpuplane/gpuplane/internal/sharing"
)

// Defaults of ManagerOptions.
const (
	DefaultRetryInterval = time.Second
	// waitingLogInterval spaces the "waiting for the kubelet" messages.
	waitingLogInterval = 30 * time.Second
	// unwatchedGrace is how long a registered server may go without a
	// ListAndWatch stream from the kubelet before it registers again. The
	// kubelet opens the stream as soon as it accepts a registration; it
	// closes it only when it drops the plugin, as in the re-registration
	// race apply avoids.
	unwatchedGrace = 5 * time.Second
)

// ManagerOptions configure a Manager.
type ManagerOptions struct {
	// Dir is the kubelet's device-plugin directory
	// (/var/lib/kubelet/device-plugins when empty).
	Dir    string
	Health HealthSource
	// Steer, when set, steers every resource's preferred allocation to
	// the devices a pod's scheduler chose (ServerOptions.Steer).
	Steer    Steerer
	Topology *gpu.Topology
	Logger   *slog.Logger
	// RetryInterval spaces registration attempts after a failure.
	RetryInterval time.Duration
}

// Manager runs one Server per resource and keeps them registered with the
// kubelet across kubelet restarts and config reloads.
type Manager struct {
	opts    ManagerOptions
	log     *slog.Logger
	kubelet string
	updates chan Set

	mu         sync.Mutex
	servers    []*Server
	registered map[string]int // resource -> registrations so far
	pending    map[string]bool
	// regErr is why the last registration attempt failed, "" after one
	// succeeded.
	regErr string
}

// Set is what the manager serves: the resources and the container contract.
type Set struct {
	Resources []*sharing.Resource
	Contract  Contract
}

// NewManager checks its options.
func NewManager(o ManagerOptions) (*Manager, error) {
	if o.Dir == "" {
		o.Dir = pluginapi.DevicePluginPath
	}
	if o.Health == nil {
		o.Health = AllHealthy{}
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.RetryInterval <= 0 {
		o.RetryInterval = DefaultRetryInterval
	}
	return &Manager{
		opts: o, log: o.Logger, kubelet: filepath.Join(o.Dir, filepath.Base(pluginapi.KubeletSocket)),
		updates: make(chan Set, 1), registered: map[string]int{}, pending: map[string]bool{},
	}, nil
}

// Update replaces the served resources (after a config reload). Run
// updates the servers of resources that stay in place, starts and
// registers servers for new ones, and stops the rest.
func (m *Manager) Update(s Set) {
	for {
		select {
		case m.updates <- s:
			return
		default:
		}
		select {
		case <-m.updates: // drop an older update not yet applied
		default:
		}
	}
}

// Ready reports whether the node's GPUs are on offer: every resource
// served and registered with the kubelet. The error says what is missing,
// for the agent's /readyz.
func (m *Manager) Ready() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.servers) == 0 {
		return errors.New("no resources to advertise yet (the node has no usable GPUs, or the plugin is starting)")
	}
	if len(m.pending) == 0 {
		return nil
	}
	waiting := slices.Sorted(maps.Keys(m.pending))
	why := m.regErr
	if !m.kubeletPresent() {
		why = "the kubelet's registration socket " + m.kubelet + " does not exist (is the kubelet running, and --kubelet-dir its device-plugins directory?)"
	}
	if why == "" {
		why = "registering"
	}
	return fmt.Errorf("%s not registered with the kubelet: %s", strings.Join(waiting, ", "), why)
}

// Registrations returns how many times each resource registered with the
// kubelet.
func (m *Manager) Registrations() map[string]int {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make(map[string]int, len(m.registered))
	for k, v := range m.registered {
		out[k] = v
	}
	return out
}

// Servers returns the running servers.
func (m *Manager) Servers() []*Server {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.servers)
}

// Run serves s until ctx ends, then stops every server and removes its
// socket. It fails only when the device-plugin directory cannot be
// watched or a server cannot listen.
func (m *Manager) Run(ctx context.Context, s Set) error {
	if err := os.MkdirAll(m.opts.Dir, 0o755); err != nil {
		return fmt.Errorf("creating the device-plugin directory %s: %w", m.opts.Dir, err)
	}
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("watching the device-plugin directory: %w", err)
	}
	defer func() { _ = w.Close() }()
	if err := w.Add(m.opts.Dir); err != nil {
		return fmt.Errorf("watching the device-plugin directory %s: %w", m.opts.Dir, err)
	}
	defer m.stopAll()
	if err := m.apply(s); err != nil {
		return err
	}
	lastWaitLog := time.Now()
	m.registerAll(ctx, true)
	retry := time.NewTicker(m.opts.RetryInterval)
	defer retry.Stop()
	for {
		select {
		case <-ctx.Done():
			m.log.Info("stopping device plugin servers")
			return nil
		case ev, ok := <-w.Events:
			if !ok {
				return errors.New("the device-plugin directory watch ended")
			}
			if err := m.handleFSEvent(ctx, ev); err != nil {
				return err
			}
		case err, ok := <-w.Errors:
			if ok {
				m.log.Error("watching the device-plugin directory", "dir", m.opts.Dir, "err", err)
			}
		case s := <-m.updates:
			m.log.Info("serving a new set of resources", "resources", len(s.Resources))
			if err := m.apply(s); err != nil {
				return err
			}
			m.registerAll(ctx, true)
		case <-retry.C:
			m.checkWatched()
			if !m.hasPending() {
				continue
			}
			if !m.kubeletPresent() {
				if time.Since(lastWaitLog) >= waitingLogInterval {
					m.log.Warn("still waiting for the kubelet: no registration socket", "socket", m.kubelet)
					lastWaitLog = time.Now()
				}
				continue
			}
			m.registerAll(ctx, false)
		}
	}
}

func (m *Manager) handleFSEvent(ctx context.Context, ev fsnotify.Event) error {
	switch {
	case ev.Name == m.kubelet && ev.Has(fsnotify.Create):
		m.log.Info("the kubelet (re)started; restarting device plugin servers and registering again", "socket", m.kubelet)
		m.restartAll()
		m.registerAll(ctx, true)
	case ev.Has(fsnotify.Remove) || ev.Has(fsnotify.Rename):
		for _, srv := range m.Servers() {
			if ev.Name != srv.Socket() {
				continue
			}
			if _, err := os.Stat(srv.Socket()); err == nil {
				continue // already re-created by us
			}
			m.log.Warn("device plugin socket removed; serving it again", "socket", srv.Socket())
			srv.Stop()
			if err := srv.Start(); err != nil {
				return err
			}
			m.mu.Lock()
			m.pending[srv.Name()] = true
			m.mu.Unlock()
		}
	}
	return nil
}

// apply serves s. A resource already served keeps its server, which
// takes the new devices and contract in place (Server.replace) and stays
// registered. Registering again under the same name would race the
// kubelet's device manager: when the stream of the earlier registration
// ends after the new one was accepted, it disconnects whichever client is
// registered under the name by then, the new one included, and the node
// offers none of the resource until the plugin registers once more.
// Resources new to s get a server each, registered by Run; those s drops
// are stopped, which tells the kubelet they are gone.
func (m *Manager) apply(s Set) error {
	running := map[string]*Server{}
	for _, srv := range m.Servers() {
		running[srv.Name()] = srv
	}
	// servers[i] serves s.Resources[i]: a running server, or one started
	// now. The running ones take their new resources only once every new
	// server has started, so that a failure leaves the last set served.
	servers := make([]*Server, len(s.Resources))
	var started []*Server
	for i, r := range s.Resources {
		if srv, ok := running[r.Name]; ok {
			servers[i] = srv
			continue
		}
		srv, err := NewServer(ServerOptions{Resource: r, Contract: s.Contract, Health: m.opts.Health, Steer: m.opts.Steer, Topology: m.opts.Topology, Dir: m.opts.Dir, Logger: m.log})
		if err == nil {
			err = srv.Start()
		}
		if err != nil {
			for _, srv := range started {
				srv.Stop()
			}
			return fmt.Errorf("starting the device plugin for %s: %w", r.Name, err)
		}
		servers[i] = srv
		started = append(started, srv)
	}
	for i, r := range s.Resources {
		if running[r.Name] == servers[i] {
			servers[i].replace(r, s.Contract)
		}
	}
	m.mu.Lock()
	pending := map[string]bool{}
	registered := map[string]int{}
	for _, srv := range servers {
		name := srv.Name()
		n, ok := m.registered[name]
		if ok {
			registered[name] = n
		}
		if !ok || m.pending[name] {
			pending[name] = true
		}
		delete(running, name)
	}
	m.servers, m.pending, m.registered = servers, pending, registered
	m.mu.Unlock()
	for _, srv := range running {
		srv.Stop() // dropped from s
	}
	if len(servers) == 0 {
		m.log.Warn("no resources to advertise: the node has no usable GPUs")
	}
	return nil
}

func (m *Manager) stopAll() {
	for _, srv := range m.Servers() {
		srv.Stop()
	}
}

func (m *Manager) restartAll() {
	for _, srv := range m.Servers() {
		srv.Stop()
		if err := srv.Start(); err != nil {
			m.log.Error("restarting a device plugin server", "resource", srv.Name(), "err", err)
		}
		m.mu.Lock()
		m.pending[srv.Name()] = true
		m.mu.Unlock()
	}
}

// checkWatched marks for registration every registered server the kubelet
// has not watched for unwatchedGrace: the kubelet dropped it. While the
// kubelet's socket is absent the kubelet is down, and its return
// re-registers everything anyway.
func (m *Manager) checkWatched() {
	if !m.kubeletPresent() {
		return
	}
	now := time.Now()
	for _, srv := range m.Servers() {
		d := srv.unwatchedFor(now)
		if d < unwatchedGrace {
			continue
		}
		m.mu.Lock()
		already := m.pending[srv.Name()]
		m.pending[srv.Name()] = true
		m.mu.Unlock()
		if !already {
			m.log.Warn("the kubelet is not watching this resource's devices (it dropped the plugin); registering again",
				"resource", srv.Name(), "unwatched", d.Round(time.Millisecond))
		}
	}
}

func (m *Manager) hasPending() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.pending) > 0
}

func (m *Manager) kubeletPresent() bool {
	_, err := os.Stat(m.kubelet)
	return err == nil
}

// registerAll registers every pending server. loud says to log when the
// kubelet is not there at all.
func (m *Manager) registerAll(ctx context.Context, loud bool) {
	if !m.kubeletPresent() {
		if loud {
			m.log.Warn("waiting for the kubelet: its registration socket does not exist yet; resources register as soon as it appears", "socket", m.kubelet)
		}
		return
	}
	for _, srv := range m.Servers() {
		m.mu.Lock()
		pending := m.pending[srv.Name()]
		m.mu.Unlock()
		if !pending {
			continue
		}
		if err := srv.Register(ctx, m.kubelet); err != nil {
			m.log.Error("registration failed; retrying", "resource", srv.Name(), "err", err, "retry", m.opts.RetryInterval)
			m.mu.Lock()
			m.regErr = fmt.Sprintf("registering %s failed: %v (retrying every %s)", srv.Name(), err, m.opts.RetryInterval)
			m.mu.Unlock()
			continue
		}
		m.mu.Lock()
		m.regErr = ""
		delete(m.pending, srv.Name())
		m.registered[srv.Name()]++
		m.mu.Unlock()
		m.log.Info("registered with the kubelet", "resource", srv.Name(), "devices", len(srv.Resource().Devices), "socket", srv.Socket())
	}
}
