package nodesim

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	drapb "k8s.io/kubelet/pkg/apis/dra/v1"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"

	apidra "github.com/gpuplane/gpuplane/api/dra"
)

// draPlugin is a DRA driver registered through the plugin registration
// directory.
type draPlugin struct {
	name     string
	endpoint string
	conn     *grpc.ClientConn
	client   drapb.DRAPluginClient
}

// draState is the node's DRA side: registered drivers, and which pods use
// which prepared claims.
type draState struct {
	mu      sync.Mutex
	plugins map[string]*draPlugin
	// seen are the registration sockets already handled.
	seen map[string]bool
	// users maps a prepared claim's UID to the keys of the pods using it.
	users map[types.UID]map[string]bool
	// claims maps a claim UID to what unprepare needs.
	claims map[types.UID]preparedRef
	// podClaims maps a pod key to the claim UIDs it uses.
	podClaims map[string][]types.UID
	// unprepare holds claims no pod uses whose unprepare has not
	// succeeded yet: tried again until it does, as the kubelet does.
	unprepare map[types.UID]*pendingUnprepare
}

type pendingUnprepare struct {
	ref      preparedRef
	drivers  []string
	nextTry  time.Time
	attempts int
}

type preparedRef struct {
	namespace, name string
	drivers         []string
}

func newDRAState() *draState {
	return &draState{plugins: map[string]*draPlugin{}, seen: map[string]bool{}, users: map[types.UID]map[string]bool{},
		claims: map[types.UID]preparedRef{}, podClaims: map[string][]types.UID{}, unprepare: map[types.UID]*pendingUnprepare{}}
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
// sockets), asks each GetInfo, and keeps a client of every DRA driver.
func (s *Simulator) runPluginWatcher() {
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		entries, _ := os.ReadDir(s.PluginRegistryDir())
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
			s.dra.mu.Lock()
			done := s.dra.seen[key]
			s.dra.mu.Unlock()
			if done {
				continue
			}
			if err := s.registerDRA(path); err != nil {
				s.log.Warn("registering a plugin; retrying", "socket", path, "err", err)
				continue
			}
			s.dra.mu.Lock()
			s.dra.seen[key] = true
			s.dra.mu.Unlock()
		}
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

// registerDRA does the kubelet's side of plugin registration for one
// socket: GetInfo, a client of the driver's endpoint, then
// NotifyRegistrationStatus.
func (s *Simulator) registerDRA(socket string) error {
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
	if info.Type != registerapi.DRAPlugin {
		_, _ = reg.NotifyRegistrationStatus(ctx, &registerapi.RegistrationStatus{PluginRegistered: false, Error: "only DRA plugins are handled here"})
		return nil
	}
	if !slices.Contains(info.SupportedVersions, drapb.DRAPluginService) {
		msg := fmt.Sprintf("the plugin offers %v, not %s", info.SupportedVersions, drapb.DRAPluginService)
		_, _ = reg.NotifyRegistrationStatus(ctx, &registerapi.RegistrationStatus{PluginRegistered: false, Error: msg})
		return fmt.Errorf("plugin %s: %s", info.Name, msg)
	}
	endpoint := info.Endpoint
	if endpoint == "" {
		return fmt.Errorf("plugin %s: no endpoint", info.Name)
	}
	dconn, err := grpc.NewClient("unix://"+endpoint, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	p := &draPlugin{name: info.Name, endpoint: endpoint, conn: dconn, client: drapb.NewDRAPluginClient(dconn)}
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

// claimNotReadyError says a pod's claim cannot be prepared yet; the pod
// stays Pending and is tried again, as the kubelet does.
type claimNotReadyError struct{ msg string }

func (e *claimNotReadyError) Error() string { return e.msg }

// podClaimNames are the claims a pod uses: by its reference name, the
// claim's name in the namespace.
func podClaimNames(pod *corev1.Pod) (map[string]string, error) {
	out := map[string]string{}
	for _, rc := range pod.Spec.ResourceClaims {
		switch {
		case rc.ResourceClaimName != nil:
			out[rc.Name] = *rc.ResourceClaimName
		case rc.ResourceClaimTemplateName != nil:
			i := slices.IndexFunc(pod.Status.ResourceClaimStatuses, func(st corev1.PodResourceClaimStatus) bool { return st.Name == rc.Name })
			if i < 0 || pod.Status.ResourceClaimStatuses[i].ResourceClaimName == nil {
				return nil, &claimNotReadyError{fmt.Sprintf("the claim of %s (template %s) is not created yet", rc.Name, *rc.ResourceClaimTemplateName)}
			}
			out[rc.Name] = *pod.Status.ResourceClaimStatuses[i].ResourceClaimName
		}
	}
	if st := pod.Status.ExtendedResourceClaimStatus; st != nil && st.ResourceClaimName != "" {
		out[st.ResourceClaimName] = st.ResourceClaimName
	}
	return out, nil
}

// prepareClaims prepares a pod's claims as the kubelet's DRA manager does
// before the pod's containers start: every claim must be allocated and
// reserved for the pod; each driver named in an allocation is called with
// NodePrepareResources. The CDI devices are recorded on the pod. A pod
// without claims needs nothing.
func (s *Simulator) prepareClaims(ctx context.Context, key string, pod *corev1.Pod) error {
	names, err := podClaimNames(pod)
	if err != nil || len(names) == 0 {
		return err
	}
	recorded := map[string][]string{}
	for ref, name := range names {
		c, err := s.client.ResourceV1().ResourceClaims(pod.Namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return &claimNotReadyError{fmt.Sprintf("ResourceClaim %s/%s: %v", pod.Namespace, name, err)}
		}
		if c.Status.Allocation == nil {
			return &claimNotReadyError{fmt.Sprintf("ResourceClaim %s/%s is not allocated", pod.Namespace, name)}
		}
		if !slices.ContainsFunc(c.Status.ReservedFor, func(r resourceapi.ResourceClaimConsumerReference) bool { return r.UID == pod.UID }) {
			return &claimNotReadyError{fmt.Sprintf("ResourceClaim %s/%s is not reserved for the pod", pod.Namespace, name)}
		}
		var drivers []string
		for _, r := range c.Status.Allocation.Devices.Results {
			if !slices.Contains(drivers, r.Driver) {
				drivers = append(drivers, r.Driver)
			}
		}
		slices.Sort(drivers)
		var ids []string
		for _, drv := range drivers {
			s.dra.mu.Lock()
			p := s.dra.plugins[drv]
			s.dra.mu.Unlock()
			if p == nil {
				return &claimNotReadyError{fmt.Sprintf("DRA driver %s of ResourceClaim %s/%s is not registered on the node", drv, pod.Namespace, name)}
			}
			cctx, cancel := context.WithTimeout(ctx, 45*time.Second)
			resp, err := p.client.NodePrepareResources(cctx, &drapb.NodePrepareResourcesRequest{Claims: []*drapb.Claim{{Namespace: c.Namespace, Name: c.Name, Uid: string(c.UID)}}})
			cancel()
			if err != nil {
				return &claimNotReadyError{fmt.Sprintf("NodePrepareResources of %s for ResourceClaim %s/%s: %v", drv, pod.Namespace, name, err)}
			}
			r := resp.Claims[string(c.UID)]
			if r == nil {
				return &claimNotReadyError{fmt.Sprintf("driver %s answered nothing for ResourceClaim %s/%s", drv, pod.Namespace, name)}
			}
			if r.Error != "" {
				return &claimNotReadyError{fmt.Sprintf("driver %s could not prepare ResourceClaim %s/%s: %s", drv, pod.Namespace, name, r.Error)}
			}
			for _, d := range r.Devices {
				ids = append(ids, d.CdiDeviceIds...)
			}
			s.noteClaim(key, c.UID, preparedRef{namespace: c.Namespace, name: c.Name, drivers: drivers})
		}
		recorded[ref] = ids
	}
	raw, err := json.Marshal(recorded)
	if err != nil {
		return err
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{
		"annotations": map[string]string{apidra.PodClaimsAnnotation: string(raw)},
		"uid":         pod.UID,
	}})
	if err != nil {
		return err
	}
	if _, err := s.client.CoreV1().Pods(pod.Namespace).Patch(ctx, pod.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("recording the prepared claims on pod %s: %w", key, err)
	}
	s.log.Info("claims prepared", "pod", key, "devices", string(raw))
	return nil
}

func (s *Simulator) noteClaim(key string, uid types.UID, ref preparedRef) {
	s.dra.mu.Lock()
	defer s.dra.mu.Unlock()
	if s.dra.users[uid] == nil {
		s.dra.users[uid] = map[string]bool{}
	}
	s.dra.users[uid][key] = true
	s.dra.claims[uid] = ref
	if !slices.Contains(s.dra.podClaims[key], uid) {
		s.dra.podClaims[key] = append(s.dra.podClaims[key], uid)
	}
}

// releaseClaims unprepares the claims an ended pod used that no other pod
// of the node uses, as the kubelet does once the pod's containers are
// gone.
func (s *Simulator) releaseClaims(key string) {
	s.dra.mu.Lock()
	var done []types.UID
	for _, uid := range s.dra.podClaims[key] {
		delete(s.dra.users[uid], key)
		if len(s.dra.users[uid]) == 0 {
			done = append(done, uid)
		}
	}
	delete(s.dra.podClaims, key)
	refs := map[types.UID]preparedRef{}
	for _, uid := range done {
		refs[uid] = s.dra.claims[uid]
		delete(s.dra.users, uid)
		delete(s.dra.claims, uid)
	}
	for uid, ref := range refs {
		s.dra.unprepare[uid] = &pendingUnprepare{ref: ref, drivers: slices.Clone(ref.drivers)}
	}
	s.dra.mu.Unlock()
	s.unprepareDue()
}

// unprepareDue calls NodeUnprepareResources for every claim waiting for it
// whose retry time has come; a driver that fails (not running, restarting)
// is asked again with backoff.
func (s *Simulator) unprepareDue() {
	now := time.Now()
	s.dra.mu.Lock()
	due := map[types.UID]*pendingUnprepare{}
	for uid, p := range s.dra.unprepare {
		if !now.Before(p.nextTry) {
			due[uid] = p
		}
	}
	s.dra.mu.Unlock()
	for uid, p := range due {
		var left []string
		for _, drv := range p.drivers {
			if err := s.unprepareOne(uid, p.ref, drv); err != nil {
				s.log.Warn("NodeUnprepareResources; retrying", "claim", p.ref.namespace+"/"+p.ref.name, "driver", drv, "err", err)
				left = append(left, drv)
				continue
			}
			s.log.Info("claim unprepared", "claim", p.ref.namespace+"/"+p.ref.name, "driver", drv)
		}
		s.dra.mu.Lock()
		if len(left) == 0 {
			delete(s.dra.unprepare, uid)
		} else {
			p.drivers, p.attempts = left, p.attempts+1
			p.nextTry = time.Now().Add(min(time.Duration(1<<min(p.attempts, 5))*250*time.Millisecond, 8*time.Second))
		}
		s.dra.mu.Unlock()
	}
}

func (s *Simulator) unprepareOne(uid types.UID, ref preparedRef, drv string) error {
	s.dra.mu.Lock()
	p := s.dra.plugins[drv]
	s.dra.mu.Unlock()
	if p == nil {
		return fmt.Errorf("driver %s is not registered", drv)
	}
	ctx, cancel := context.WithTimeout(s.ctx, 45*time.Second)
	defer cancel()
	resp, err := p.client.NodeUnprepareResources(ctx, &drapb.NodeUnprepareResourcesRequest{Claims: []*drapb.Claim{{Namespace: ref.namespace, Name: ref.name, Uid: string(uid)}}})
	if err != nil {
		return err
	}
	if r := resp.Claims[string(uid)]; r != nil && r.Error != "" {
		return fmt.Errorf("%s", r.Error)
	}
	return nil
}
