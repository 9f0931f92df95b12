package dra

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"

	apidra "github.com/gpuplane/gpuplane/api/dra"
)

// Default kubelet directories.
const (
	// DefaultRegistrarDir is where the kubelet looks for plugin
	// registration sockets.
	DefaultRegistrarDir = kubeletplugin.KubeletRegistryDir
	// DefaultPluginsDir holds a directory per plugin with its DRA socket.
	DefaultPluginsDir = kubeletplugin.KubeletPluginsDir
)

// PodResourcesLister lists the devices the kubelet gave the node's pods.
type PodResourcesLister interface {
	List(ctx context.Context) (*podresourcesv1.ListPodResourcesResponse, error)
}

// ServeOptions say how the driver meets the kubelet and the API server.
type ServeOptions struct {
	// Client publishes ResourceSlices and reads ResourceClaims.
	Client kubernetes.Interface
	// RegistrarDir is the kubelet's plugin registration directory,
	// DefaultRegistrarDir when empty.
	RegistrarDir string
	// PluginDir holds the DRA socket, DefaultPluginsDir/gpu.gpuplane.io
	// when empty.
	PluginDir string
	// PodResources, when set, is polled for the devices the device plugin
	// gave pods; DeviceUUID maps such a device (resource name and device
	// ID) to the GPU or MIG device UUID.
	PodResources PodResourcesLister
	DeviceUUID   func(resource, id string) (string, bool)
	// Resync is how often PodResources and health are read again; 2s when
	// zero.
	Resync time.Duration
	// Started, when set, is called once the sockets are served.
	Started func()
}

// Serve registers the driver with the kubelet, publishes the node's
// ResourceSlices and keeps their taints current until ctx ends.
func (d *Driver) Serve(ctx context.Context, o ServeOptions) error {
	if o.Client == nil {
		return errors.New("dra driver: no API client")
	}
	// The claims' MPS control daemons quit with the driver; the next
	// start brings them back from the checkpoint.
	defer d.Close()
	if o.Resync <= 0 {
		o.Resync = 2 * time.Second
	}
	for _, dir := range []string{o.RegistrarDir, o.PluginDir} {
		if dir == "" {
			continue
		}
		if err := os.MkdirAll(dir, 0o750); err != nil {
			return fmt.Errorf("creating the kubelet plugin directory: %w", err)
		}
	}
	opts := []kubeletplugin.Option{
		kubeletplugin.DriverName(apidra.DriverName),
		kubeletplugin.KubeClient(o.Client),
		kubeletplugin.NodeName(d.o.NodeName),
	}
	if o.RegistrarDir != "" {
		opts = append(opts, kubeletplugin.RegistrarDirectoryPath(o.RegistrarDir))
	}
	if o.PluginDir != "" {
		opts = append(opts, kubeletplugin.PluginDataDirectoryPath(o.PluginDir))
	}
	// failed reports err unless the agent is stopping: a start-up or
	// publish cut short by the agent's own shutdown (a signal, or its
	// parts restarting for a GPU API switch) is not a failure.
	failed := func(what string, err error) error {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("%s: %w", what, err)
	}
	helper, err := kubeletplugin.Start(ctx, d, opts...)
	if err != nil {
		return failed("starting the DRA kubelet plugin", err)
	}
	defer helper.Stop()
	if o.Started != nil {
		o.Started()
	}
	changes, stop := d.o.Ledger.Changes()
	defer stop()
	ticker := time.NewTicker(o.Resync)
	defer ticker.Stop()
	publish := func(force bool) error {
		d.mu.Lock()
		r := d.resourcesLocked()
		fp := taintFingerprint(r)
		same := fp == d.published
		d.published = fp
		d.mu.Unlock()
		if same && !force {
			return nil
		}
		d.log.Info("publishing ResourceSlices", "node", d.o.NodeName, "taints", fp)
		return helper.PublishResources(ctx, r)
	}
	d.readPodResources(ctx, o)
	if err := publish(true); err != nil {
		return failed("publishing ResourceSlices", err)
	}
	d.log.Info("DRA driver running", "driver", apidra.DriverName, "devices", len(d.inv.devices), "prepared", len(d.Prepared()))
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-changes:
		case <-ticker.C:
			d.readPodResources(ctx, o)
		case <-d.republish:
			// The inventory was rebuilt: the devices changed, not only
			// their taints.
			if err := publish(true); err != nil {
				return failed("publishing ResourceSlices", err)
			}
			continue
		}
		if err := publish(false); err != nil {
			return failed("publishing ResourceSlices", err)
		}
	}
}

// readPodResources records in the ledger the devices the device plugin
// gave the node's pods.
func (d *Driver) readPodResources(ctx context.Context, o ServeOptions) {
	if o.PodResources == nil || o.DeviceUUID == nil {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	resp, err := o.PodResources.List(ctx)
	if err != nil {
		d.log.Debug("reading PodResources", "err", err)
		return
	}
	var held []string
	for _, p := range resp.GetPodResources() {
		for _, c := range p.GetContainers() {
			for _, dev := range c.GetDevices() {
				for _, id := range dev.GetDeviceIds() {
					if u, ok := o.DeviceUUID(dev.GetResourceName(), id); ok {
						held = append(held, u)
					}
				}
			}
		}
	}
	d.o.Ledger.SetPluginHeld(held)
}
