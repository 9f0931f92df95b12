package labels

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"time"

	"k8s.io/utils/clock"

	"github.com/gpuplane/gpuplane/internal/gpu"
)

// RunnerOptions configure a Runner.
type RunnerOptions struct {
	// Inventory is the node's GPUs. Required.
	Inventory gpu.Inventory
	// Labelers compute the labels, in order; New returns the standard set.
	Labelers []Labeler
	// Sink receives the labels. Required.
	Sink Sink
	// Interval is the time between passes in Run; 60s when zero.
	Interval time.Duration
	// InitialBackoff and MaxBackoff bound the wait before retrying a failed
	// pass, doubling from the first to the second; 1s and 2m when zero.
	InitialBackoff time.Duration
	MaxBackoff     time.Duration
	// Clock is the time source; the real clock when nil.
	Clock clock.WithTicker
	// Logger receives progress and failures; slog.Default() when nil.
	Logger *slog.Logger
}

// Runner computes labels and writes them, once or on an interval.
type Runner struct {
	opts RunnerOptions
	last Labels
}

// NewRunner validates opts and returns a Runner.
func NewRunner(opts RunnerOptions) (*Runner, error) {
	if opts.Inventory == nil {
		return nil, errors.New("labels runner: the GPU inventory is nil")
	}
	if opts.Sink == nil {
		return nil, errors.New("labels runner: the sink is nil")
	}
	if len(opts.Labelers) == 0 {
		return nil, errors.New("labels runner: no labelers")
	}
	if opts.Interval < 0 || opts.InitialBackoff < 0 || opts.MaxBackoff < 0 {
		return nil, fmt.Errorf("labels runner: interval and backoffs must not be negative (interval %v, backoff %v..%v)", opts.Interval, opts.InitialBackoff, opts.MaxBackoff)
	}
	if opts.Interval == 0 {
		opts.Interval = time.Minute
	}
	if opts.InitialBackoff == 0 {
		opts.InitialBackoff = time.Second
	}
	if opts.MaxBackoff == 0 {
		opts.MaxBackoff = 2 * time.Minute
	}
	if opts.MaxBackoff < opts.InitialBackoff {
		opts.MaxBackoff = opts.InitialBackoff
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	return &Runner{opts: opts}, nil
}

// Pass computes the labels once and writes them, without retrying.
func (r *Runner) Pass(ctx context.Context) error {
	in, err := ReadInput(ctx, r.opts.Inventory, r.opts.Clock.Now())
	if err != nil {
		return fmt.Errorf("computing GPU labels: %w", err)
	}
	labels, annotations, err := Compute(r.opts.Labelers, in)
	if err != nil {
		return fmt.Errorf("computing GPU labels: %w", err)
	}
	if err := r.opts.Sink.Write(ctx, labels, annotations); err != nil {
		return fmt.Errorf("writing GPU labels to %s: %w", r.opts.Sink.Name(), err)
	}
	if !maps.Equal(labels, r.last) {
		r.opts.Logger.Info("wrote GPU labels", "sink", r.opts.Sink.Name(), "labels", len(labels), "annotations", len(annotations))
	}
	r.last = labels
	return nil
}

// Once runs passes until one succeeds, backing off between failures, or
// until ctx ends.
func (r *Runner) Once(ctx context.Context) error {
	backoff := r.opts.InitialBackoff
	for {
		err := r.Pass(ctx)
		if err == nil {
			return nil
		}
		r.opts.Logger.Error("labelling failed, retrying", "err", err, "retryIn", backoff)
		if !r.wait(ctx, backoff) {
			return fmt.Errorf("labelling stopped before it succeeded: %w (last error: %w)", ctx.Err(), err)
		}
		backoff = min(2*backoff, r.opts.MaxBackoff)
	}
}

// Run labels the node every Interval until ctx ends, retrying a failed
// pass with backoff. It returns nil when ctx ends.
func (r *Runner) Run(ctx context.Context) error {
	for {
		if err := r.Once(ctx); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		if !r.wait(ctx, r.opts.Interval) {
			return nil
		}
	}
}

// wait blocks for d on the runner's clock and reports whether ctx is still
// live.
func (r *Runner) wait(ctx context.Context, d time.Duration) bool {
	t := r.opts.Clock.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C():
		return true
	}
}
