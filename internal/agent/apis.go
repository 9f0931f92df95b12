package agent

import (
	"context"
	"fmt"
	"log/slog"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/record"

	"github.com/gpuplane/gpuplane/api/gpunode"
	"github.com/gpuplane/gpuplane/api/reasons"
	"github.com/gpuplane/gpuplane/internal/apifeatures"
)

// draNotServed asks the API server's discovery whether it serves DRA
// (apifeatures.DRA) and returns, when it does not, why the DRA driver is
// off.
func draNotServed(d discovery.DiscoveryInterface) (why string, off bool, err error) {
	served, err := apifeatures.Discover(d, apifeatures.DRA)
	if err != nil {
		return "", false, err
	}
	if served.Has(apifeatures.DRA) {
		return "", false, nil
	}
	return "DRA driver off: " + apifeatures.DRA.Reason(), true, nil
}

// checkDRAServed turns --dra off for this run where the cluster does not
// serve DRA, instead of a driver that would fail to publish its
// ResourceSlices again and again: one log line and a Warning event on the
// Node say so, and the node's GPUs are served through the device plugin
// (chooseGPUAPI falls back to it even when the node is to be served
// through DRA only). An API server that cannot be asked leaves --dra on:
// the driver then says what fails.
func checkDRAServed(ctx context.Context, f *runFlags, api *rest.Config, node string, log *slog.Logger) error {
	if !f.dra.enabled || api == nil {
		return nil
	}
	d, err := discovery.NewDiscoveryClientForConfig(api)
	if err != nil {
		return fmt.Errorf("creating the discovery client: %w", err)
	}
	why, off, err := draNotServed(d)
	if err != nil {
		log.Warn("could not find out whether the cluster serves DRA; the DRA driver stays on", "err", err)
		return nil
	}
	if !off {
		return nil
	}
	f.dra.enabled = false
	log.Warn(why, "feature", apifeatures.DRA.Name)
	rec, err := newEventRecorder(ctx, api, node)
	if err != nil {
		return err
	}
	recordAPINotServed(rec, node, why)
	return nil
}

// recordAPINotServed records why on the Node as an APINotServed warning,
// ending with its troubleshooting entry as every event of the agent does.
func recordAPINotServed(rec record.EventRecorder, node, why string) {
	ref := &corev1.ObjectReference{Kind: "Node", APIVersion: "v1", Name: node, UID: types.UID(node)}
	rec.Event(ref, corev1.EventTypeWarning, gpunode.EventReasonAPINotServed, reasons.WithDocs(gpunode.EventReasonAPINotServed, why))
}
