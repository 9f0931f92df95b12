package metrics

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"k8s.io/utils/clock"

	"github.com/gpuplane/gpuplane/internal/gpu"
)

// GPUs is what the exporter reads of the hardware.
type GPUs interface {
	gpu.Inventory
	gpu.Telemetry
}

// Options configure an Exporter.
type Options struct {
	// GPUs is the node's hardware. Required.
	GPUs GPUs
	// Hostname is the Hostname label; the backend's host name, else the
	// machine's, when empty.
	Hostname string
	// PodResources lists which containers hold which devices. Nil turns
	// pod attribution off (gpuplane_podresources_up says "disabled").
	PodResources PodResourcesLister
	// CheckpointPath is the kubelet's device checkpoint
	// (DefaultCheckpointPath when empty), needed to split shared GPUs
	// between pods.
	CheckpointPath string
	// ProcRoot is where the host's /proc is mounted; "/proc" when empty.
	ProcRoot string
	// Health reports device health and the health monitor's state;
	// optional.
	Health HealthSource
	// InventoryTTL is how long the list of GPUs is reused between scrapes;
	// 30s when zero. A GPU that fails to answer forces a re-read.
	InventoryTTL time.Duration
	// Timeout bounds the calls of one scrape; 5s when zero.
	Timeout time.Duration
	// ShareOf is the part of its physical GPU a device of a resource is
	// (1 for a whole GPU, 1/replicas for a replica, the slices of a MIG
	// device over its GPU's); ok is false for a device it does not know.
	// Nil: no container_gpu_allocation or gpuplane_gpu_idle_share series.
	// The pod is named because a pod that asked for part of a GPU holds
	// one replica but the part it was given (the share gpuplane-scheduler
	// charged it, gpupod.GPUsAnnotation).
	ShareOf func(namespace, pod, resource, deviceID string) (share float64, ok bool)
	// MemoryLimitOf is the GPU memory a pod asked for when it asked for
	// part of a GPU (gpupod.ReadFraction), in MiB; ok is false otherwise.
	// Nil: no gpuplane_pod_gpu_memory_limit_bytes series.
	MemoryLimitOf func(namespace, pod string) (memoryMiB int64, ok bool)
	// PodUID is the UID of a pod bound to the node, from the API server;
	// ok is false for one it does not know. With it, a process whose
	// cgroup names another pod than the container holding its GPU counts
	// as that pod's process on a GPU it was not given
	// (gpuplane_gpu_unallocated_pod_processes) rather than the holder's.
	// Nil: a GPU's processes are its holder's when one container holds it.
	PodUID func(namespace, pod string) (uid string, ok bool)
	// QueueOf is the Queue a pod's usage counts against, as
	// gpuplane-scheduler recorded it when it bound the pod
	// (gpupod.QueueAnnotation); ok is false for a pod without one. Nil: no
	// gpuplane_pod_queue_info series.
	QueueOf func(namespace, pod string) (queue string, ok bool)
	// Clock is the time source; the real clock when nil.
	Clock clock.PassiveClock
	// Logger receives failures; slog.Default() when nil.
	Logger *slog.Logger
}

// collector is one part of a scrape. Collectors run in order on one
// goroutine and share the Exporter's per-scrape state.
type collector interface {
	Name() string
	collect(ctx context.Context, emit func(prometheus.Metric)) error
}

// Exporter is a prometheus.Collector for a GPU node. Scrapes are
// serialized: the Exporter reuses its buffers from one scrape to the next.
type Exporter struct {
	opts       Options
	log        *slog.Logger
	collectors []collector
	descs      *descs

	mu       sync.Mutex
	hostname string
	// driver is the driver version, the DCGM_FI_DRIVER_VERSION label.
	driver string
	// unsupported remembers, by GPU UUID, the readings the GPU said it
	// does not offer, so that each is logged once.
	unsupported map[string]gpu.Readings
	// Inventory, refreshed every InventoryTTL.
	devices   []gpu.Device
	byUUID    map[string]int // UUID of a GPU or MIG device -> GPU index
	invAt     time.Time
	invStale  bool
	baseVals  [][]string // per GPU: gpu, UUID, pci_bus_id, device, modelName, Hostname
	scratch   []string
	samples   []gpu.Sample
	sampleErr []error
	procs     [][]gpu.Process
	procErr   []error
	// Pod attribution of the current scrape.
	att *attribution
	// Label pairs of the busiest series, and the metrics of the current
	// scrape, allocated once per scrape.
	lc        *labelCache
	batch     []cachedMetric
	lastBatch int
}

var _ prometheus.Collector = (*Exporter)(nil)

// NewExporter validates opts and returns an Exporter. Register it with a
// prometheus.Registry, or serve it with Handler.
func NewExporter(opts Options) (*Exporter, error) {
	if opts.GPUs == nil {
		return nil, errors.New("metrics: the GPU backend is nil")
	}
	if opts.InventoryTTL < 0 || opts.Timeout < 0 {
		return nil, fmt.Errorf("metrics: inventoryTTL and timeout must not be negative (got %v, %v)", opts.InventoryTTL, opts.Timeout)
	}
	if opts.InventoryTTL == 0 {
		opts.InventoryTTL = 30 * time.Second
	}
	if opts.Timeout == 0 {
		opts.Timeout = 5 * time.Second
	}
	if opts.ProcRoot == "" {
		opts.ProcRoot = "/proc"
	}
	if opts.CheckpointPath == "" {
		opts.CheckpointPath = DefaultCheckpointPath
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	e := &Exporter{opts: opts, log: opts.Logger, descs: newDescs(), byUUID: map[string]int{}, unsupported: map[string]gpu.Readings{}}
	e.att = newAttribution(opts.ProcRoot, opts.CheckpointPath)
	e.lc = newLabelCache()
	e.collectors = []collector{
		&inventoryCollector{e: e},
		&podCollector{e: e},
		&deviceCollector{e: e},
		&healthCollector{e: e},
	}
	return e, nil
}

// Describe implements prometheus.Collector. It describes nothing: the
// Exporter is an unchecked collector whose series depend on the node.
func (e *Exporter) Describe(chan<- *prometheus.Desc) {}

// Collect implements prometheus.Collector.
func (e *Exporter) Collect(ch chan<- prometheus.Metric) {
	e.mu.Lock()
	defer e.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), e.opts.Timeout)
	defer cancel()
	emit := func(m prometheus.Metric) { ch <- m }
	start := e.opts.Clock.Now()
	// A new batch every scrape: the registry still reads the previous one
	// while encoding its response.
	e.batch = make([]cachedMetric, 0, e.lastBatch)
	e.lc.begin()
	defer func() { e.lc.end(); e.lastBatch = len(e.batch) }()
	for _, c := range e.collectors {
		t0 := e.opts.Clock.Now()
		err := c.collect(ctx, emit)
		success := 1.0
		if err != nil {
			success = 0
			e.log.Error("metrics collector failed", "collector", c.Name(), "err", err)
		}
		ch <- prometheus.MustNewConstMetric(e.descs.collectorDuration, prometheus.GaugeValue, e.opts.Clock.Since(t0).Seconds(), c.Name())
		ch <- prometheus.MustNewConstMetric(e.descs.collectorSuccess, prometheus.GaugeValue, success, c.Name())
		if errors.Is(err, errNoInventory) {
			break
		}
	}
	ch <- prometheus.MustNewConstMetric(e.descs.scrapeDuration, prometheus.GaugeValue, e.opts.Clock.Since(start).Seconds())
}

var errNoInventory = errors.New("no GPU inventory")

// inventoryCollector refreshes the list of GPUs when it is stale. It emits
// nothing itself; when it fails and no earlier list exists, the scrape ends.
type inventoryCollector struct{ e *Exporter }

var _ collector = (*inventoryCollector)(nil)

func (*inventoryCollector) Name() string { return "inventory" }

func (c *inventoryCollector) collect(ctx context.Context, _ func(prometheus.Metric)) error {
	e := c.e
	now := e.opts.Clock.Now()
	if e.devices != nil && !e.invStale && now.Sub(e.invAt) < e.opts.InventoryTTL {
		return nil
	}
	sys, sysErr := e.opts.GPUs.System(ctx)
	if sysErr != nil {
		e.log.Debug("reading the driver version", "err", sysErr)
	} else if sys.DriverVersion != e.driver {
		// Every DCGM_FI_* label set carries the version.
		e.driver = sys.DriverVersion
		e.lc.reset()
	}
	if e.hostname == "" {
		e.hostname = e.opts.Hostname
		if e.hostname == "" && sysErr == nil {
			e.hostname = sys.Hostname
		}
		if e.hostname == "" {
			e.hostname, _ = os.Hostname()
		}
	}
	devs, err := e.opts.GPUs.Devices(ctx)
	switch {
	case err != nil && len(devs) == 0 && e.devices == nil:
		return fmt.Errorf("listing GPUs: %w: %w", errNoInventory, err)
	case err != nil && len(devs) == 0:
		return fmt.Errorf("listing GPUs (serving the previous list): %w", err)
	case err != nil:
		// Some GPUs did not answer (one fell off the bus): keep them in the
		// list so that gpuplane_device_telemetry_up keeps saying why their
		// series are missing.
		e.log.Debug("some GPUs did not answer the inventory", "err", err)
		devs = keepMissing(devs, e.devices)
	}
	e.setDevices(devs)
	e.invAt, e.invStale = now, false
	return nil
}

// keepMissing returns devs plus the devices of prev that devs lacks, by
// index.
func keepMissing(devs, prev []gpu.Device) []gpu.Device {
	for _, p := range prev {
		if !slices.ContainsFunc(devs, func(d gpu.Device) bool { return d.UUID == p.UUID }) {
			devs = append(devs, p)
		}
	}
	slices.SortFunc(devs, func(a, b gpu.Device) int { return a.Index - b.Index })
	return devs
}

// setDevices installs a new inventory and sizes the per-GPU buffers.
func (e *Exporter) setDevices(devs []gpu.Device) {
	if devs == nil {
		devs = []gpu.Device{}
	}
	e.devices = devs
	clear(e.byUUID)
	n := len(devs)
	e.baseVals = resize(e.baseVals, n)
	e.samples = resize(e.samples, n)
	e.sampleErr = resize(e.sampleErr, n)
	e.procs = resize(e.procs, n)
	e.procErr = resize(e.procErr, n)
	for i := range devs {
		d := &devs[i]
		e.byUUID[d.UUID] = i
		for j := range d.MIGDevices {
			e.byUUID[d.MIGDevices[j].UUID] = i
		}
		e.baseVals[i] = []string{strconv.Itoa(d.Index), d.UUID, d.PCIBusID, "nvidia" + strconv.Itoa(d.Minor), d.Name, e.hostname}
	}
}

func resize[T any](s []T, n int) []T {
	if cap(s) >= n {
		return s[:n]
	}
	return make([]T, n)
}

// metric returns a const metric of desc with cached label pairs. It lives
// in the scrape's batch.
func (e *Exporter) metric(desc *prometheus.Desc, labels []*dto.LabelPair, typ prometheus.ValueType, v float64) prometheus.Metric {
	e.batch = append(e.batch, cachedMetric{desc: desc, labels: labels, typ: typ, value: v})
	return &e.batch[len(e.batch)-1]
}

// devicePairs returns the cached label pairs of GPU i's device series.
func (e *Exporter) devicePairs(i int, ctr, ns, pod string) []*dto.LabelPair {
	return e.lc.pairs(labelKey{gpu: i, kind: kindDevice, a: ctr, b: ns, c: pod}, e.descs.devPod, e.labelValues(i, ctr, ns, pod))
}

// dcgmPairs returns the cached label pairs of GPU i's DCGM_FI_* series.
func (e *Exporter) dcgmPairs(i int, ctr, ns, pod string) []*dto.LabelPair {
	return e.lc.pairs(labelKey{gpu: i, kind: kindDCGM, a: ctr, b: ns, c: pod}, e.descs.dcgm, e.labelValues(i, e.driver, ctr, ns, pod))
}

// dcgmMIGPairs returns the cached label pairs of a MIG device's DCGM_FI_*
// series.
func (e *Exporter) dcgmMIGPairs(i int, profile, gi, ctr, ns, pod string) []*dto.LabelPair {
	return e.lc.pairs(labelKey{gpu: i, kind: kindDCGMMIG, a: ctr, b: ns, c: pod, d: profile, e: gi}, e.descs.dcgmMIG, e.labelValues(i, profile, gi, e.driver, ctr, ns, pod))
}

// migPairs returns the cached label pairs of a MIG device's series.
func (e *Exporter) migPairs(i int, profile, gi, ctr, ns, pod string) []*dto.LabelPair {
	return e.lc.pairs(labelKey{gpu: i, kind: kindMIG, a: ctr, b: ns, c: pod, d: profile, e: gi}, e.descs.mig, e.labelValues(i, profile, gi, ctr, ns, pod))
}

// labelValues returns the label values of GPU i followed by extra, in a
// scratch slice valid until the next call.
func (e *Exporter) labelValues(i int, extra ...string) []string {
	e.scratch = append(append(e.scratch[:0], e.baseVals[i]...), extra...)
	return e.scratch
}
