package adapter

import (
	"context"
	"fmt"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
)

// BareBinder binds pods to the nodes it is given through gpuplane-scheduler's
// own bind pipeline and nothing else: the API clients, bind connections,
// requests in flight per connection, client budget and bind workers Run
// builds from the same Config, with no informers, cache or cycle. What it
// reaches is what the API server lets gpuplane-scheduler's binds reach, so
// a benchmark measures with it how much of the scheduler's time is its
// binding (test/integration/schedulerscale's bare-binder rounds). It decides
// and checks nothing: the caller picks the nodes.
type BareBinder struct {
	client kubernetes.Interface
	w      *apiWriter
}

// NewBareBinder builds the clients and bind workers of cfg (after
// cfg.Defaults) and opens the bind connections, as Run does at its start.
// The workers stop when ctx ends; Wait waits for them.
func NewBareBinder(ctx context.Context, cfg Config) (*BareBinder, error) {
	cfg = cfg.Defaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	_, client, lanes, err := newAPIClients(cfg)
	if err != nil {
		return nil, err
	}
	openLanes(ctx, lanes, logr.Discard())
	w := newAPIWriter(ctx, client, nil, cfg, logr.Discard(), newMetrics(), nil)
	w.lanes = lanes
	return &BareBinder{client: client, w: w}, nil
}

// Client is the typed client on the shared connection, the one Run's
// informers and writes use; its requests count against the binds' budget.
func (b *BareBinder) Client() kubernetes.Interface { return b.client }

// Bind queues pod's binding to node on the bind workers; done runs with
// its result. It blocks while the workers' queue is full, as a cycle does.
func (b *BareBinder) Bind(ctx context.Context, pod *corev1.Pod, node string, done func(error)) {
	if node == "" {
		done(fmt.Errorf("binding %s/%s: no node", pod.Namespace, pod.Name))
		return
	}
	b.w.bind(ctx, bindTask{pod: pod, assumption: assumption{node: node}, done: done})
}

// Wait blocks until the bind workers stopped, after NewBareBinder's ctx
// ended.
func (b *BareBinder) Wait() { b.w.wait() }
