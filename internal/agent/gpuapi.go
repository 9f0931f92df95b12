package agent

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/rest"

	"github.com/gpuplane/gpuplane/api/gpunode"
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

// gpuAPI decides through which API the node's GPUs are served: the Node's
// gpunode.LabelGPUAPI label when it has a valid one, else the agent's
// --gpu-api. A bad label is logged with the value used instead, never
// fatal; DRA needs --dra, without which the device plugin keeps serving.
func gpuAPI(ctx context.Context, flag string, draOn bool, nodes nodeGetter, node string, log *slog.Logger) (gpunode.GPUAPI, error) {
	api, err := gpunode.ParseGPUAPI(flag)
	if err != nil {
		return "", fmt.Errorf("--gpu-api: %w", err)
	}
	if nodes != nil {
		ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		n, err := nodes.Get(ctx, node)
		switch {
		case err != nil:
			log.Warn("reading the node's GPU API label; using --gpu-api", "label", gpunode.LabelGPUAPI, "gpuAPI", api, "err", err)
		default:
			if v, ok := n.Labels[gpunode.LabelGPUAPI]; ok {
				if l, err := gpunode.ParseGPUAPI(v); err != nil {
					log.Error("the node's GPU API label is not valid; using --gpu-api", "err", err, "gpuAPI", api)
				} else {
					api = l
				}
			}
		}
	}
	if api.DRA() && !api.DevicePlugin() && !draOn {
		log.Error("the node's GPUs are to be served through DRA only, but the DRA driver is off (--dra): the device plugin keeps serving them", "gpuAPI", api)
		return gpunode.GPUAPIDevicePlugin, nil
	}
	return api, nil
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
	return gpuAPI(ctx, f.gpuAPI, f.dra.enabled, nodes, node, log)
}
