package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/rest"

	"github.com/gpuplane/gpuplane/api/gpunode"
	"github.com/gpuplane/gpuplane/internal/dra"
)

// nodeGetter reads one Node.
type nodeGetter interface {
	Get(ctx context.Context, name string) (*corev1.Node, error)
}

// Get reads a Node.
func (c *nodeClient) Get(ctx context.Context, name string) (*corev1.Node, error) {
	out := &corev1.Node{}
	if err := c.rest.Get().Resource("nodes").Name(name).Do(ctx).Into(out); err != nil {
		return nil, err
	}
	return out, nil
}

// gpuAPIInputs is what decides through which API the node's GPUs are
// served.
type gpuAPIInputs struct {
	// flag is --gpu-api; label the Node's gpunode.LabelGPUAPI, if set.
	flag     gpunode.GPUAPI
	label    string
	labelled bool
	// draOn is --dra. prepared counts the claims the DRA driver's
	// checkpoint holds (-1: the checkpoint cannot be read).
	draOn    bool
	prepared int
}

// chooseGPUAPI decides through which API the node's GPUs are served: the
// label when it is valid, else the flag. DRA needs --dra, without which
// the device plugin keeps serving. A node moved off DRA while claims are
// prepared on it keeps the driver (beside the device plugin, from one
// ledger) until they are unprepared: without the driver nothing would
// hold their GPUs, and the device plugin would give them out again. notes
// say why the choice is not simply the label.
func chooseGPUAPI(in gpuAPIInputs) (gpunode.GPUAPI, []string) {
	api := in.flag
	var notes []string
	if in.labelled {
		if l, err := gpunode.ParseGPUAPI(in.label); err != nil {
			notes = append(notes, fmt.Sprintf("the node's %s label is not valid (%v); using --gpu-api %s", gpunode.LabelGPUAPI, err, in.flag))
		} else {
			api = l
		}
	}
	if api.DRA() && !api.DevicePlugin() && !in.draOn {
		notes = append(notes, "the node's GPUs are to be served through DRA only, but the DRA driver is off (--dra): the device plugin keeps serving them")
		return gpunode.GPUAPIDevicePlugin, notes
	}
	if !api.DRA() && in.draOn && in.prepared != 0 {
		why := fmt.Sprintf("%d ResourceClaims are prepared on this node", in.prepared)
		if in.prepared < 0 {
			why = "the DRA driver's checkpoint cannot be read, so claims may be prepared on this node"
		}
		notes = append(notes, why+": the DRA driver keeps serving them beside the device plugin until they are unprepared")
		return gpunode.GPUAPIBoth, notes
	}
	return api, notes
}

// preparedClaims counts the claims in the DRA driver's checkpoint, -1
// when it cannot be read; 0 without --dra.
func preparedClaims(f *runFlags, log *slog.Logger) int {
	if !f.dra.enabled {
		return 0
	}
	n, err := dra.PreparedClaims(f.dra.checkpointPath())
	if err != nil {
		log.Error("reading the DRA driver's checkpoint", "err", err)
		return -1
	}
	return n
}

// gpuAPI decides, at start, through which API the node's GPUs are served
// (chooseGPUAPI) from the Node as read now. An unreadable Node counts as
// unlabelled, never fatal.
func gpuAPI(ctx context.Context, flag string, draOn bool, prepared int, nodes nodeGetter, node string, log *slog.Logger) (gpunode.GPUAPI, error) {
	api, err := gpunode.ParseGPUAPI(flag)
	if err != nil {
		return "", fmt.Errorf("--gpu-api: %w", err)
	}
	in := gpuAPIInputs{flag: api, draOn: draOn, prepared: prepared}
	if nodes != nil {
		ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		n, err := nodes.Get(ctx, node)
		if err != nil {
			log.Warn("reading the node's GPU API label; using --gpu-api", "label", gpunode.LabelGPUAPI, "gpuAPI", api, "err", err)
		} else {
			in.label, in.labelled = n.Labels[gpunode.LabelGPUAPI]
		}
	}
	got, notes := chooseGPUAPI(in)
	for _, n := range notes {
		log.Warn(n, "gpuAPI", got)
	}
	return got, nil
}

// gpuAPIFor is gpuAPI over the API server, when there is one.
func gpuAPIFor(ctx context.Context, f *runFlags, api *rest.Config, node string, log *slog.Logger) (gpunode.GPUAPI, error) {
	var nodes nodeGetter
	if api != nil {
		c, err := newNodeClient(api)
		if err != nil {
			return "", err
		}
		nodes = c
	}
	return gpuAPI(ctx, f.gpuAPI, f.dra.enabled, preparedClaims(f, log), nodes, node, log)
}

// gpuAPISwitch ends the agent's parts when the node is to be served
// through another API: runAgent starts them again, as after a restart,
// from the checkpoints of both the device plugin and the DRA driver.
type gpuAPISwitch struct {
	from, to gpunode.GPUAPI
}

func (s *gpuAPISwitch) Error() string {
	return fmt.Sprintf("the node's GPUs are to be served through %s instead of %s", s.to, s.from)
}

// isGPUAPISwitch reports whether err asks for the parts to start again.
func isGPUAPISwitch(err error) (*gpuAPISwitch, bool) {
	var s *gpuAPISwitch
	return s, errors.As(err, &s)
}

// gpuAPIRecheck is how often a node kept on DRA for its prepared claims
// looks whether they are gone, besides every change of the Node.
const gpuAPIRecheck = 15 * time.Second

// gpuAPIWatch follows the Node's gpunode.LabelGPUAPI label (and, while the
// driver stays only for prepared claims, the checkpoint) and returns a
// gpuAPISwitch once the choice differs from running.
func gpuAPIWatch(cfg *rest.Config, f *runFlags, node string, running gpunode.GPUAPI, log *slog.Logger) (part, error) {
	flag, err := gpunode.ParseGPUAPI(f.gpuAPI)
	if err != nil {
		return part{}, fmt.Errorf("--gpu-api: %w", err)
	}
	c, err := newNodeClient(cfg)
	if err != nil {
		return part{}, err
	}
	run := func(ctx context.Context) error {
		type seen struct {
			label    string
			labelled bool
		}
		labels := make(chan seen, 1)
		watchNodeKeys(ctx, c, node, []string{gpunode.LabelGPUAPI}, nil, func(n *corev1.Node) {
			v, set := n.Labels[gpunode.LabelGPUAPI]
			select {
			case <-labels:
			default:
			}
			labels <- seen{v, set}
		})
		t := time.NewTicker(gpuAPIRecheck)
		defer t.Stop()
		var last seen
		known, reported := false, ""
		for {
			select {
			case <-ctx.Done():
				return nil
			case last = <-labels:
				known = true
			case <-t.C:
			}
			if !known {
				continue
			}
			in := gpuAPIInputs{flag: flag, label: last.label, labelled: last.labelled, draOn: f.dra.enabled}
			want, notes := chooseGPUAPI(in)
			if running.DRA() && !want.DRA() {
				// Only a node leaving DRA needs the checkpoint read,
				// not every update of a node that stays.
				in.prepared = preparedClaims(f, log)
				want, notes = chooseGPUAPI(in)
			}
			if want != running {
				log.Info("the node's GPU API changed: starting the agent's parts again to serve through it", "label", gpunode.LabelGPUAPI, "from", running, "to", want)
				return &gpuAPISwitch{from: running, to: want}
			}
			// Say once why the node stays as it is.
			if s := fmt.Sprint(notes); len(notes) > 0 && s != reported {
				for _, n := range notes {
					log.Warn(n, "gpuAPI", running)
				}
				reported = s
			}
		}
	}
	return part{name: "gpu api", run: run}, nil
}
