package nodesim

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"k8s.io/apimachinery/pkg/types"
	drapb "k8s.io/kubelet/pkg/apis/dra/v1"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

// draPlugin is a DRA driver registered through the plugin registration
// directory.
type draPlugin struct {
	name     string
	endpoint string
	// socket is the registration socket (path and modification time) the
	// driver registered through; when it goes away, so does the driver.
	socket string
	conn   *grpc.ClientConn
	client drapb.DRAPluginClient
}

// draState is the node's DRA side: registered drivers, and the claims the
// node's pods use, kept as the kubelet's DRA manager keeps its claim info
// cache.
type draState struct {
	mu      sync.Mutex
	plugins map[string]*draPlugin
	// seen are the registration sockets already handled.
	seen map[string]bool
	// claims are the claims of the node's pods, by UID, from the moment a
	// pod's prepare passed validation until their unprepare succeeded.
	claims map[types.UID]*claimInfo
	// podClaims maps a pod key to the claim UIDs it uses.
	podClaims map[string][]types.UID
}

// claimInfo is what the node knows of one claim, as the kubelet's
// ClaimInfo: the pods referencing it, whether its drivers prepared it, and
// the CDI devices they answered.
type claimInfo struct {
	namespace, name string
	drivers         []string
	// pods are the keys of the pods referencing the claim. An ended pod
	// stays until the claim's unprepare succeeded, or is dropped without
	// unprepare when another pod uses the claim by then.
	pods     map[string]bool
	prepared bool
	devices  []string
	// ended, when set, is the ended last pod whose claim waits for
	// NodeUnprepareResources of the drivers in left, tried again at
	// nextTry until they answer.
	ended    string
	left     []string
	nextTry  time.Time
	attempts int
}

func newDRAState() *draState {
	return &draState{plugins: map[string]*draPlugin{}, seen: map[string]bool{}, claims: map[types.UID]*claimInfo{}, podClaims: map[string][]types.UID{}}
}

// PluginRegistryDir is where DRA drivers put their registration socket,
// as in the kubelet's /var/lib/kubelet/plugins_registry.
func (s *Simulator) PluginRegistryDir() string { return filepath.Join(s.cfg.Dir, "plugins_registry") }

// PluginsDir holds each DRA driver's directory and socket, as the kubelet's
// /var/lib/kubelet/plugins.
func (s *Simulator) PluginsDir() string { return filepath.Join(s.cfg.Dir, "plugins") }

// DRADrivers lists the names of the registered DRA drivers.
func (s *Simulator) DRADrivers() []string {
	s.dra.mu.Lock()
	defer s.dra.mu.Unlock()
	var out []string
	for n := range s.dra.plugins {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

// runPluginWatcher finds registration sockets in the registry directory
// (the kubelet watches it with inotify; a short poll finds the same
// sockets), registers each new one, drops the drivers whose socket went
// away, as the kubelet's plugin manager does, and retries due unprepares.
func (s *Simulator) runPluginWatcher() {
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		s.scanRegistry()
		s.unprepareDue()
		select {
		case <-s.ctx.Done():
			s.dra.mu.Lock()
			for _, p := range s.dra.plugins {
				_ = p.conn.Close()
			}
			s.dra.mu.Unlock()
			return
		case <-tick.C:
		}
	}
}

// scanRegistry registers the sockets not seen before and deregisters the
// drivers whose socket is gone.
func (s *Simulator) scanRegistry() {
	entries, _ := os.ReadDir(s.PluginRegistryDir())
	present := map[string]bool{}
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".sock") {
			continue
		}
		path := filepath.Join(s.PluginRegistryDir(), e.Name())
		info, err := os.Stat(path)
		if err != nil {
			continue
		}
		key := fmt.Sprintf("%s@%d", path, info.ModTime().UnixNano())
		present[key] = true
		s.dra.mu.Lock()
		done := s.dra.seen[key]
		s.dra.mu.Unlock()
		if done {
			continue
		}
		if err := s.registerDRA(path, key); err != nil {
			s.log.Warn("registering a plugin; retrying", "socket", path, "err", err)
			continue
		}
		s.dra.mu.Lock()
		s.dra.seen[key] = true
		s.dra.mu.Unlock()
	}
	s.dra.mu.Lock()
	defer s.dra.mu.Unlock()
	for key := range s.dra.seen {
		if !present[key] {
			delete(s.dra.seen, key)
		}
	}
	for name, p := range s.dra.plugins {
		if !present[p.socket] {
			_ = p.conn.Close()
			delete(s.dra.plugins, name)
			s.log.Info("DRA driver deregistered: its registration socket is gone", "driver", name)
		}
	}
}

// registerDRA does the kubelet's side of plugin registration for one
// socket (pkg/kubelet/pluginmanager's operation generator): GetInfo; a
// plugin of another type or without a DRA service the node speaks is told
// it is not registered; an empty endpoint means the registration socket
// itself; a client of the endpoint; then NotifyRegistrationStatus.
func (s *Simulator) registerDRA(socket, key string) error {
	ctx, cancel := context.WithTimeout(s.ctx, 10*time.Second)
	defer cancel()
	conn, err := grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer func() { _ = conn.Close() }()
	reg := registerapi.NewRegistrationClient(conn)
	info, err := reg.GetInfo(ctx, &registerapi.InfoRequest{})
	if err != nil {
		return fmt.Errorf("GetInfo: %w", err)
	}
	// A refused plugin is told why and not asked again until its socket
	// is made anew.
	refuse := func(msg string) error {
		s.log.Warn("plugin refused", "socket", socket, "plugin", info.Name, "reason", msg)
		if _, err := reg.NotifyRegistrationStatus(ctx, &registerapi.RegistrationStatus{PluginRegistered: false, Error: msg}); err != nil {
			return fmt.Errorf("%s: telling the plugin: %w", msg, err)
		}
		return nil
	}
	if info.Type != registerapi.DRAPlugin {
		return refuse(fmt.Sprintf("RegisterPlugin error -- no handler registered for plugin type: %s at socket %s", info.Type, socket))
	}
	if !slices.Contains(info.SupportedVersions, drapb.DRAPluginService) {
		return refuse(fmt.Sprintf("RegisterPlugin error -- plugin validation failed with err: invalid supported gRPC versions of DRA driver plugin %s at endpoint %s: none of services supported by the plugin (%q) are supported by the kubelet (%q)",
			info.Name, info.Endpoint, info.SupportedVersions, []string{drapb.DRAPluginService}))
	}
	endpoint := info.Endpoint
	if endpoint == "" {
		endpoint = socket
	}
	dconn, err := grpc.NewClient("unix://"+endpoint, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	p := &draPlugin{name: info.Name, endpoint: endpoint, socket: key, conn: dconn, client: drapb.NewDRAPluginClient(dconn)}
	s.dra.mu.Lock()
	if old := s.dra.plugins[info.Name]; old != nil {
		_ = old.conn.Close()
	}
	s.dra.plugins[info.Name] = p
	s.dra.mu.Unlock()
	if _, err := reg.NotifyRegistrationStatus(ctx, &registerapi.RegistrationStatus{PluginRegistered: true}); err != nil {
		s.log.Warn("NotifyRegistrationStatus", "plugin", info.Name, "err", err)
	}
	s.log.Info("DRA driver registered", "driver", info.Name, "endpoint", endpoint)
	return nil
}
