package agent

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"sync"

	"github.com/spf13/pflag"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	apidra "github.com/gpuplane/gpuplane/api/dra"
	"github.com/gpuplane/gpuplane/internal/cdi"
	"github.com/gpuplane/gpuplane/internal/deviceplugin"
	"github.com/gpuplane/gpuplane/internal/dra"
	"github.com/gpuplane/gpuplane/internal/gpu"
	"github.com/gpuplane/gpuplane/internal/ledger"
	"github.com/gpuplane/gpuplane/internal/metrics"
	"github.com/gpuplane/gpuplane/internal/mps"
)

// draFlags switch the DRA driver part on and place its sockets and state.
type draFlags struct {
	enabled      bool
	registrarDir string
	pluginDir    string
	stateFile    string
	sharedGPUs   bool
}

func (f *draFlags) add(fs *pflag.FlagSet) {
	fs.BoolVar(&f.enabled, "dra", false, "also serve GPUs as the DRA driver "+apidra.DriverName+" (resource.k8s.io/v1): publish ResourceSlices, prepare ResourceClaims with CDI devices, create MIG devices for claims; shares one ledger with the device plugin so no GPU is given twice; needs the API server")
	fs.StringVar(&f.registrarDir, "dra-registrar-dir", dra.DefaultRegistrarDir, "with --dra: the kubelet's plugin registration directory")
	fs.StringVar(&f.pluginDir, "dra-plugin-dir", filepath.Join(dra.DefaultPluginsDir, apidra.DriverName), "with --dra: directory of the driver's DRA socket and, unless --dra-state-file, its checkpoint")
	fs.BoolVar(&f.sharedGPUs, "dra-shared-gpus", false, "with --dra: publish whole GPUs for consumable capacity (allowMultipleAllocations, with memory and compute request policies), so several claims each get part of one GPU (capacity.requests in the claim); a claim that asks for no capacity still gets a GPU alone")
	fs.StringVar(&f.stateFile, "dra-state-file", "", "with --dra: the checkpoint of prepared claims (default <dra-plugin-dir>/checkpoint.json); keep it on the host so prepared claims survive a restart")
}

// checkpointPath is the driver's checkpoint of prepared claims.
func (f *draFlags) checkpointPath() string {
	if f.stateFile != "" {
		return f.stateFile
	}
	return filepath.Join(f.pluginDir, "checkpoint.json")
}

// ledgerHealth is the device plugin's health source when the DRA driver
// runs: a device a claim holds is withdrawn (reported unhealthy), and
// Allocate's devices are recorded in the ledger.
type ledgerHealth struct {
	health deviceplugin.HealthSource
	ledger *ledger.Ledger
}

var (
	_ deviceplugin.HealthSource       = (*ledgerHealth)(nil)
	_ deviceplugin.AllocationRecorder = (*ledgerHealth)(nil)
)

func newLedgerHealth(h deviceplugin.HealthSource, l *ledger.Ledger) *ledgerHealth {
	return &ledgerHealth{health: h, ledger: l}
}

// Healthy implements deviceplugin.HealthSource.
func (h *ledgerHealth) Healthy(uuid string) bool {
	if _, claimed := h.ledger.ClaimHolder(uuid); claimed {
		return false
	}
	return h.health.Healthy(uuid)
}

// Unwrap returns the health source the ledger's holds are added to, so
// that the MIG gate finds the monitor behind it.
func (h *ledgerHealth) Unwrap() deviceplugin.HealthSource { return h.health }

// Claimed reports whether a DRA claim holds the device.
func (h *ledgerHealth) Claimed(uuid string) bool {
	_, claimed := h.ledger.ClaimHolder(uuid)
	return claimed
}

// Changes implements deviceplugin.HealthSource: health changes and ledger
// changes, coalesced.
func (h *ledgerHealth) Changes() (<-chan struct{}, func()) {
	hc, hstop := h.health.Changes()
	lc, lstop := h.ledger.Changes()
	out := make(chan struct{}, 1)
	done := make(chan struct{})
	var once sync.Once
	go func() {
		for {
			select {
			case <-done:
				return
			case <-hc:
			case <-lc:
			}
			select {
			case out <- struct{}{}:
			default:
			}
		}
	}()
	return out, func() { once.Do(func() { close(done); hstop(); lstop() }) }
}

// Allocated implements deviceplugin.AllocationRecorder.
func (h *ledgerHealth) Allocated(uuids []string) error { return h.ledger.Allocated(uuids) }

// Unhealthy implements dra.HealthSource over the health monitor, once the
// device plugin part has started it.
func (h *monitorHealth) Unhealthy(uuid string) (string, bool) {
	m := h.monitor.Load()
	if m == nil {
		return "", false
	}
	d, ok := m.Device(uuid)
	if !ok || d.Healthy {
		return "", false
	}
	return d.Reason, true
}

// draPart builds the DRA driver part, and returns the driver for the
// parts that must see its claims (draLink). The driver checks its
// checkpoint and the GPUs before the agent serves anything, so a bad state
// file stops the agent at start with one message.
func draPart(ctx context.Context, f *runFlags, backend gpu.Backend, node string, api *rest.Config, health dra.HealthSource,
	l *ledger.Ledger, served *servedResources, mpsRunner mps.Runner, log *slog.Logger) (part, *dra.Driver, error) {
	if api == nil {
		return part{}, nil, fmt.Errorf("--dra needs the API server (--kubeconfig, $KUBECONFIG or an in-cluster config) to publish ResourceSlices and read ResourceClaims")
	}
	cdiDir := f.cdiDir
	if cdiDir == "" {
		cdiDir = filepath.Join(f.dra.pluginDir, "cdi")
		log.Info("--cdi-dir is empty: claims' CDI specs go to the plugin directory, where no container runtime reads them", "dir", cdiDir)
	}
	w, err := cdi.NewWriter(cdi.Options{Dir: cdiDir, DevRoot: "/"})
	if err != nil {
		return part{}, nil, err
	}
	state := f.dra.checkpointPath()
	var root dra.PCIeRootFunc
	if backend.Name() == "nvml" {
		root = dra.SysfsPCIeRoot("/")
	}
	// Claims' MPS control daemons keep their pipe and log directories
	// beside the device plugin's (--mps-root), else under the plugin
	// directory, which is on the host.
	mpsRoot := f.mpsRoot
	if mpsRoot == "" {
		mpsRoot = filepath.Join(f.dra.pluginDir, "mps")
	}
	driver, err := dra.New(ctx, dra.Options{Backend: backend, NodeName: node, CDI: w, StateFile: state, Ledger: l, Health: health, PCIeRoot: root,
		MPSRoot: mpsRoot, MPSRunner: mpsRunner, SharedGPUs: f.dra.sharedGPUs, Logger: log})
	if err != nil {
		return part{}, nil, fmt.Errorf("starting the DRA driver: %w", err)
	}
	client, err := kubernetes.NewForConfig(api)
	if err != nil {
		return part{}, nil, fmt.Errorf("building the API client of the DRA driver: %w", err)
	}
	serve := dra.ServeOptions{Client: client, RegistrarDir: f.dra.registrarDir, PluginDir: f.dra.pluginDir, DeviceUUID: served.uuid}
	if f.podResourcesSocket != "" {
		serve.PodResources = metrics.NewSocketPodResources(f.podResourcesSocket)
	}
	return part{name: "dra", run: func(ctx context.Context) error { return driver.Serve(ctx, serve) }}, driver, nil
}
