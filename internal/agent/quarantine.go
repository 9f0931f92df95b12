package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/record"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"

	configv1 "github.com/gpuplane/gpuplane/api/config/v1"
	"github.com/gpuplane/gpuplane/api/reasons"
	"github.com/gpuplane/gpuplane/internal/cliutil"
	"github.com/gpuplane/gpuplane/internal/gpu"
	"github.com/gpuplane/gpuplane/internal/gpu/sim"
	"github.com/gpuplane/gpuplane/internal/metrics"
	"github.com/gpuplane/gpuplane/internal/quarantine"
	"github.com/gpuplane/gpuplane/internal/sharing"
)

// quarantinePart runs the GPU quarantine (internal/quarantine) over the
// device plugin's health monitor, the kubelet's PodResources API and the
// API server.
type quarantinePart struct {
	node    *quarantine.KubeNode
	pods    *quarantine.KubePods
	backend gpu.Backend
	devices []gpu.Device
	health  *monitorHealth
	events  func(ctx context.Context) quarantine.Recorder
	metrics *quarantine.Metrics
	log     *slog.Logger
	// dra is the DRA driver, when it runs: its devices are read again
	// after a GPU's reset.
	dra *draLink

	policy chan quarantine.Policy
	first  quarantine.Policy
}

// newQuarantinePart wires the quarantine; nil when the config switches it
// off. Pods on a GPU are found through the PodResources socket, by the
// devices the plugin serves (served), and through link, the pods holding
// DRA claims; without a socket, no pod is evicted and each drain waits its
// timeout. The quarantine needs the API server: it taints, evicts and
// writes the Node's condition.
func newQuarantinePart(cfg *rest.Config, node string, conf *configv1.Config, backend gpu.Backend, devices []gpu.Device,
	pods *nodePods, served func() *sharing.Served, link *draLink, podResourcesSocket string, h *monitorHealth, log *slog.Logger) (*quarantinePart, error) {
	if conf.Health.Quarantine.Disabled || conf.Health.Disabled {
		log.Info("GPU quarantine is off (health.quarantine.disabled or health.disabled): a failed GPU's devices are only withdrawn")
		return nil, nil
	}
	// The Node's taint and condition have a client (and a request budget)
	// of their own, so that events and evictions never delay them.
	c, err := newNodeClient(cfg)
	if err != nil {
		return nil, err
	}
	// Its writes are bounded by the GPUs' steps (a handful per fault), so
	// client-go's default budget (5/s) would only delay a burst of faults.
	writerCfg := rest.CopyConfig(cfg)
	writerCfg.QPS, writerCfg.Burst = 50, 100
	nodeWriter, err := newNodeClient(writerCfg)
	if err != nil {
		return nil, err
	}
	var lister quarantine.PodResourcesLister
	if podResourcesSocket != "" {
		lister = metrics.NewSocketPodResources(podResourcesSocket)
	} else {
		log.Warn("--pod-resources-socket is empty: the quarantine cannot tell which pods use a failed GPU, so it evicts none and waits out each drain")
		lister = noPodResources{}
	}
	evict := func(ctx context.Context, p quarantine.PodRef) error {
		return c.evict(ctx, &corev1.Pod{ObjectMeta: objectMeta(p)})
	}
	var uid func(namespace, name string) (types.UID, bool)
	if pods != nil {
		uid = func(namespace, name string) (types.UID, bool) {
			p, ok := pods.byKey(namespace, name)
			if !ok {
				return "", false
			}
			return p.UID, true
		}
	}
	q := &quarantinePart{
		node: quarantine.NewKubeNode(nodeWriter.rest, node), pods: quarantine.NewKubePods(lister, served, evict, uid),
		backend: backend, devices: devices, health: h, metrics: quarantine.NewMetrics(), log: log,
		policy: make(chan quarantine.Policy, 1), first: quarantine.PolicyFrom(conf.Health.Quarantine), dra: link,
	}
	q.pods.SetClaimPods(link.quarantinePods)
	q.events = func(ctx context.Context) quarantine.Recorder {
		broadcaster := record.NewBroadcaster(record.WithContext(ctx))
		broadcaster.StartRecordingToSink(eventSink{rest: c.rest})
		go func() { <-ctx.Done(); broadcaster.Shutdown() }()
		sch := runtime.NewScheme()
		_ = corev1.AddToScheme(sch)
		rec := broadcaster.NewRecorder(sch, corev1.EventSource{Component: name, Host: node})
		// The kubelet names its Node's events this way: UID is the name.
		ref := &corev1.ObjectReference{Kind: "Node", Name: node, UID: types.UID(node)}
		return nodeEvents{rec: rec, ref: ref}
	}
	return q, nil
}

func objectMeta(p quarantine.PodRef) metav1.ObjectMeta {
	return metav1.ObjectMeta{Namespace: p.Namespace, Name: p.Name, UID: p.UID}
}

type nodeEvents struct {
	rec record.EventRecorder
	ref *corev1.ObjectReference
}

// Eventf records a quarantine step on the Node, its message ending with
// the step's troubleshooting entry.
func (e nodeEvents) Eventf(eventtype, reason, messageFmt string, args ...any) {
	e.rec.Event(e.ref, eventtype, reason, reasons.WithDocs(reason, fmt.Sprintf(messageFmt, args...)))
}

type noPodResources struct{}

func (noPodResources) List(context.Context) (*podresourcesv1.ListPodResourcesResponse, error) {
	return nil, errors.New("no PodResources socket (--pod-resources-socket is empty)")
}

// register adds the quarantine's series to the agent's /metrics.
func (q *quarantinePart) register(r prometheus.Registerer) error {
	if err := q.metrics.Register(r); err != nil {
		return fmt.Errorf("registering the quarantine's metrics: %w", err)
	}
	return nil
}

// setConfig follows the config the plugin serves (followers).
func (q *quarantinePart) setConfig(c *configv1.Config) {
	p := quarantine.PolicyFrom(c.Health.Quarantine)
	select {
	case <-q.policy:
	default:
	}
	q.policy <- p
}

// run waits for the device plugin's health monitor, then runs the
// quarantine on its faults until ctx ends.
func (q *quarantinePart) run(ctx context.Context) error {
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	mon := q.health.monitor.Load()
	for mon == nil {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		mon = q.health.monitor.Load()
	}
	faults, stop := mon.Faults()
	defer stop()
	c, err := quarantine.New(q.options(mon, q.events(ctx)))
	if err != nil {
		return err
	}
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case p := <-q.policy:
				c.SetPolicy(p)
			}
		}
	}()
	q.log.Info("GPU quarantine running: a critical GPU fault takes the GPU out of service until it passes revalidation")
	return c.Run(ctx, faults)
}

// options are the quarantine's, holding GPUs out of service through
// holder and telling its steps to events.
func (q *quarantinePart) options(holder quarantine.Holder, events quarantine.Recorder) quarantine.Options {
	return quarantine.Options{
		Policy: q.first, Devices: q.devices, Pods: q.pods, GPUs: quarantine.BackendGPUs{Backend: q.backend, Devices: q.devices},
		Holder: holder, Node: q.node, Inventory: q.dra.inventory(), Events: events, Metrics: q.metrics, Logger: q.log,
	}
}

// simControlPart serves the simulated GPUs' fault controls on a loopback
// address (--simulate-control-addr).
func simControlPart(backend gpu.Backend, addr string, log *slog.Logger) (part, error) {
	b, ok := backend.(*sim.Backend)
	if !ok {
		return part{}, cliutil.Usagef("--simulate-control-addr: only with --simulate (the GPUs are %s)", backend.Name())
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return part{}, cliutil.Usagef("--simulate-control-addr: %q is not host:port: %w", addr, err)
	}
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return part{}, cliutil.Usagef("--simulate-control-addr: %q is not a loopback address; the controls have no authentication, so use 127.0.0.1:PORT", addr)
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return part{}, fmt.Errorf("--simulate-control-addr: %w", err)
	}
	srv := &http.Server{Handler: b.ControlHandler(), ReadHeaderTimeout: 5 * time.Second}
	return part{name: "sim control", run: func(ctx context.Context) error {
		go func() { <-ctx.Done(); _ = srv.Close() }()
		log.Info("simulated GPU fault controls served", "addr", l.Addr().String())
		if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
			return err
		}
		return nil
	}}, nil
}
