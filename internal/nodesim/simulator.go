package nodesim

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"

	"google.golang.org/grpc"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/client-go/kubernetes"
	listersv1 "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/util/workqueue"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"
)

// Label set on every simulated node, so tools can tell them apart from
// kwok nodes and real ones.
const SimulatedNodeLabel = "gpuplane.io/simulated-node"

// Config describes one simulated node.
type Config struct {
	// NodeName is the Node's name; required.
	NodeName string
	// Dir stands for the kubelet's device-plugin directory: kubelet.sock and
	// the plugins' sockets live here, the PodResources socket in
	// Dir/pod-resources. Required; created if missing. Unix socket paths
	// are limited to 107 bytes, so keep it short.
	Dir string
	// Client talks to the API server with rights over nodes, leases, pods
	// and events.
	Client kubernetes.Interface

	// Labels are added to the Node's labels.
	Labels map[string]string
	// CPU, Memory and Pods are the Node's non-GPU capacity; empty means
	// 224 CPUs, 2Ti and 110 pods (a DGX H100's CPUs and memory).
	CPU, Memory, Pods string
	// DeleteNodeOnStop deletes the Node and its Lease when the simulator
	// stops.
	DeleteNodeOnStop bool

	// Containers, when set, runs the containers of the pods bound to the
	// node whose images it has binaries for, as processes.
	Containers *ContainerConfig

	// Agent, when set, starts gpuplane-agent against Dir as a child process
	// that stops with the simulator. Without it, an agent started elsewhere
	// with --kubelet-dir Dir registers on its own.
	Agent *AgentConfig

	// LeaseDuration is the node Lease's duration; it is renewed every
	// quarter of it. 0 means 40s (the kubelet's default).
	LeaseDuration time.Duration
	// Logger receives progress; nil discards it.
	Logger *slog.Logger
}

func (c Config) withDefaults() (Config, error) {
	switch {
	case c.NodeName == "":
		return c, errors.New("nodesim config: NodeName: required")
	case c.Dir == "":
		return c, errors.New("nodesim config: Dir: required")
	case c.Client == nil:
		return c, errors.New("nodesim config: Client: required")
	}
	if len(filepath.Join(c.Dir, "pod-resources", "kubelet.sock")) > 100 {
		return c, fmt.Errorf("nodesim config: Dir: %q is too long for unix sockets below it; use a shorter path", c.Dir)
	}
	defaults := map[*string]string{&c.CPU: "224", &c.Memory: "2Ti", &c.Pods: "110"}
	for p, d := range defaults {
		if *p == "" {
			*p = d
		}
	}
	for name, q := range map[string]string{"CPU": c.CPU, "Memory": c.Memory, "Pods": c.Pods} {
		if _, err := resource.ParseQuantity(q); err != nil {
			return c, fmt.Errorf("nodesim config: %s: %q is not a quantity: %w", name, q, err)
		}
	}
	if c.LeaseDuration == 0 {
		c.LeaseDuration = 40 * time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c, nil
}

// Simulator is one running simulated node.
type Simulator struct {
	cfg    Config
	log    *slog.Logger
	client kubernetes.Interface

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	registrationServer *grpc.Server
	podResourcesServer *grpc.Server
	agent              *agentSupervisor
	dra                *draState

	nodeDirty chan struct{}
	// admitMu serializes pod admission; order keeps it in arrival order.
	admitMu   sync.Mutex
	order     *admissionOrder
	podLister listersv1.PodLister
	queue     workqueue.TypedRateLimitingInterface[string]

	mu      sync.Mutex
	plugins map[string]*plugin
	// pods are the pods the node has admitted, by namespace/name.
	pods map[string]*podState
	// inUse maps resource -> device ID -> the key of the pod holding it.
	inUse map[string]map[string]string
	// nextIP numbers pod IPs.
	nextIP int
	// nodeIP is the node's InternalIP.
	nodeIP string

	stopOnce sync.Once
	stopErr  error
}

// Start creates or adopts the Node, serves the kubelet's sockets, starts the
// agent if configured, and returns once the Node exists. It does not wait
// for the agent's resources to reach the Node.
func Start(ctx context.Context, cfg Config) (*Simulator, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Join(cfg.Dir, "plugins_registry"), 0o750); err != nil {
		return nil, fmt.Errorf("creating the plugin registry directory of node %s: %w", cfg.NodeName, err)
	}
	if err := os.MkdirAll(filepath.Join(cfg.Dir, "pod-resources"), 0o750); err != nil {
		return nil, fmt.Errorf("creating the kubelet directory of node %s: %w", cfg.NodeName, err)
	}
	runCtx, cancel := context.WithCancel(context.Background())
	s := &Simulator{
		cfg:       cfg,
		log:       cfg.Logger.With("node", cfg.NodeName),
		client:    cfg.Client,
		ctx:       runCtx,
		cancel:    cancel,
		nodeDirty: make(chan struct{}, 1),
		plugins:   map[string]*plugin{},
		pods:      map[string]*podState{},
		inUse:     map[string]map[string]string{},
		nodeIP:    "127.0.0.1",
		dra:       newDRAState(),
	}
	if err := s.start(ctx); err != nil {
		stopCtx, stopCancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer stopCancel()
		return nil, errors.Join(err, s.Stop(stopCtx))
	}
	return s, nil
}

func (s *Simulator) start(ctx context.Context) error {
	if err := s.ensureNode(ctx); err != nil {
		return err
	}
	if err := s.serveSockets(); err != nil {
		return err
	}
	s.wg.Go(s.runNodeStatus)
	s.wg.Go(s.runLease)
	s.wg.Go(s.runPluginWatcher)
	if err := s.startPods(ctx); err != nil {
		return err
	}
	if s.cfg.Agent != nil {
		a, err := superviseAgent(s.cfg, s.log)
		if err != nil {
			return err
		}
		s.agent = a
	}
	s.log.Info("simulated node started", "dir", s.cfg.Dir)
	return nil
}

// serveSockets serves the Registration service on Dir/kubelet.sock and the
// PodResources service on Dir/pod-resources/kubelet.sock. The registration
// socket is created last-to-first so that a plugin watching for it finds
// the simulator ready to dial back.
func (s *Simulator) serveSockets() error {
	prSocket := s.PodResourcesSocket()
	prListener, err := listenUnix(prSocket)
	if err != nil {
		return err
	}
	s.podResourcesServer = grpc.NewServer()
	podresourcesv1.RegisterPodResourcesListerServer(s.podResourcesServer, &podResources{sim: s})
	s.wg.Go(func() {
		if err := s.podResourcesServer.Serve(prListener); err != nil {
			s.log.Error("PodResources server stopped", "err", err)
		}
	})

	regListener, err := listenUnix(s.RegistrationSocket())
	if err != nil {
		return err
	}
	s.registrationServer = grpc.NewServer()
	pluginapi.RegisterRegistrationServer(s.registrationServer, &registration{sim: s})
	s.wg.Go(func() {
		if err := s.registrationServer.Serve(regListener); err != nil {
			s.log.Error("registration server stopped", "err", err)
		}
	})
	return nil
}

func listenUnix(path string) (net.Listener, error) {
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("removing the stale socket %s: %w", path, err)
	}
	l, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("listening on %s: %w", path, err)
	}
	return l, nil
}

// NodeName returns the simulated Node's name.
func (s *Simulator) NodeName() string { return s.cfg.NodeName }

// Dir returns the simulated kubelet's device-plugin directory.
func (s *Simulator) Dir() string { return s.cfg.Dir }

// RegistrationSocket is where device plugins register.
func (s *Simulator) RegistrationSocket() string {
	return filepath.Join(s.cfg.Dir, filepath.Base(pluginapi.KubeletSocket))
}

// PodResourcesSocket is where the PodResources API is served.
func (s *Simulator) PodResourcesSocket() string {
	return filepath.Join(s.cfg.Dir, "pod-resources", "kubelet.sock")
}

// AgentPid returns the running agent's process id, or 0 when the
// simulator started none.
func (s *Simulator) AgentPid() int {
	if s.agent == nil {
		return 0
	}
	return s.agent.current().child.Pid()
}

// AgentMetricsURL returns the URL of the started agent's /metrics, or ""
// when there is none. It stays the same across agent restarts.
func (s *Simulator) AgentMetricsURL() string {
	if s.agent == nil || s.agent.metricsAddr == "" {
		return ""
	}
	return "http://" + s.agent.metricsAddr + "/metrics"
}

// AgentRestarts returns how often the agent exited and was started again,
// and why it last exited (nil when it never did).
func (s *Simulator) AgentRestarts() (int, error) {
	if s.agent == nil {
		return 0, nil
	}
	return s.agent.restartCount()
}

// Resources returns, per registered resource, the number of devices and of
// healthy ones, as the Node reports them.
func (s *Simulator) Resources() map[string][2]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string][2]int, len(s.plugins))
	for name, p := range s.plugins {
		out[name] = [2]int{len(p.devices), len(p.healthy())}
	}
	return out
}

// Stop stops the agent, the servers and the pod and node loops, removes the
// sockets, and deletes the Node if configured. It is safe to call twice.
func (s *Simulator) Stop(ctx context.Context) error {
	s.stopOnce.Do(func() { s.stopErr = s.stop(ctx) })
	return s.stopErr
}

func (s *Simulator) stop(ctx context.Context) error {
	var errs []error
	if s.agent != nil {
		if err := s.agent.stop(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	s.cancel()
	s.mu.Lock()
	var runs []*runPod
	for _, st := range s.pods {
		if st.run != nil {
			runs = append(runs, st.run)
		}
	}
	s.mu.Unlock()
	for _, r := range runs {
		r.stop()
	}
	if s.registrationServer != nil {
		s.registrationServer.Stop()
	}
	if s.podResourcesServer != nil {
		s.podResourcesServer.Stop()
	}
	s.mu.Lock()
	for _, p := range s.plugins {
		p.cancel()
		_ = p.conn.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
	for _, path := range []string{s.RegistrationSocket(), s.PodResourcesSocket()} {
		if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, fmt.Errorf("removing %s: %w", path, err))
		}
	}
	if s.cfg.DeleteNodeOnStop {
		if err := s.deleteNode(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	s.log.Info("simulated node stopped")
	return errors.Join(errs...)
}
