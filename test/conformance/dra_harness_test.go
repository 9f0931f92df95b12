package conformance

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
	kubeletdra "k8s.io/kubernetes/pkg/kubelet/cm/dra"
	draplugin "k8s.io/kubernetes/pkg/kubelet/cm/dra/plugin"
	plugincache "k8s.io/kubernetes/pkg/kubelet/pluginmanager/cache"
	"k8s.io/kubernetes/pkg/kubelet/pluginmanager/operationexecutor"
	"k8s.io/kubernetes/pkg/kubelet/pluginmanager/pluginwatcher"
	"k8s.io/kubernetes/pkg/kubelet/pluginmanager/reconciler"

	configv1 "github.com/gpuplane/gpuplane/api/config/v1"
	apidra "github.com/gpuplane/gpuplane/api/dra"
	"github.com/gpuplane/gpuplane/internal/cdi"
	"github.com/gpuplane/gpuplane/internal/dra"
	"github.com/gpuplane/gpuplane/internal/gpu/sim"
	"github.com/gpuplane/gpuplane/internal/ledger"
	"github.com/gpuplane/gpuplane/internal/localcluster"
	"github.com/gpuplane/gpuplane/internal/testutil/build"
)

// The DRA tests share one etcd and kube-apiserver (from
// $GPUPLANE_CONTROLPLANE_BIN or bin/), started by the first test that needs
// them and stopped when the package's tests end.
var (
	controlPlaneOnce sync.Once
	controlPlane     *localcluster.ControlPlane
	controlPlaneErr  error
)

// apiServer is an admin client of the package's kube-apiserver.
func apiServer(t testing.TB) kubernetes.Interface {
	t.Helper()
	controlPlaneOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		controlPlane, controlPlaneErr = localcluster.Start(ctx, localcluster.Config{})
	})
	if errors.Is(controlPlaneErr, localcluster.ErrBinaryMissing) && os.Getenv(envRequire) != "1" {
		t.Skipf("the DRA conformance tests need etcd and kube-apiserver: %v", controlPlaneErr)
	}
	if controlPlaneErr != nil {
		t.Fatalf("starting etcd and kube-apiserver: %v", controlPlaneErr)
	}
	client, err := kubernetes.NewForConfig(controlPlane.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	return client
}

// stopControlPlane stops the control plane if a test started it.
func stopControlPlane() error {
	if controlPlane == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := controlPlane.Check(); err != nil {
		_ = controlPlane.Stop(ctx)
		return fmt.Errorf("a control-plane component died during the tests: %w", err)
	}
	return controlPlane.Stop(ctx)
}

// draNode is one simulated node: its Node object, its GPUs, and the
// kubelet directories the DRA driver and the kubelet share. Paths are
// short: unix socket names are limited to 108 bytes.
type draNode struct {
	t      testing.TB
	client kubernetes.Interface
	name   string
	sim    *sim.Backend
	// registryDir is the kubelet's plugins_registry, pluginDir the
	// driver's directory in the kubelet's plugins, kubeletState the DRA
	// manager's checkpoint directory.
	registryDir, pluginDir, cdiDir, stateFile, kubeletState string

	driver *runningDriver
}

// runningDriver is one run of the DRA driver.
type runningDriver struct {
	d      *dra.Driver
	cancel context.CancelFunc
	done   chan error
}

var nodeSeq struct {
	sync.Mutex
	n int
}

// newDRANode creates the Node object and a simulated node of a built-in
// profile.
func newDRANode(t testing.TB, client kubernetes.Interface, profile string) *draNode {
	t.Helper()
	nodeSeq.Lock()
	nodeSeq.n++
	name := fmt.Sprintf("dra-node-%d", nodeSeq.n)
	nodeSeq.Unlock()
	p, err := sim.Builtin(profile)
	if err != nil {
		t.Fatal(err)
	}
	b, err := sim.New(p, sim.Options{NodeName: name})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	dir, err := os.MkdirTemp("", "dra-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{corev1.LabelHostname: name}}}
	if _, err := client.CoreV1().Nodes().Create(t.Context(), node, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = client.CoreV1().Nodes().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	return &draNode{
		t: t, client: client, name: name, sim: b,
		registryDir:  filepath.Join(dir, "plugins_registry"),
		pluginDir:    filepath.Join(dir, "plugins", apidra.DriverName),
		cdiDir:       filepath.Join(dir, "cdi"),
		stateFile:    filepath.Join(dir, "plugins", apidra.DriverName, "checkpoint.json"),
		kubeletState: filepath.Join(dir, "kubelet"),
	}
}

// startDriver runs gpuplane's DRA driver as gpuplane-agent's --dra part
// builds it (internal/agent's draPart): a CDI writer over the node's /dev,
// the driver over the GPU backend with its checkpoint and a ledger, served
// to the kubelet's plugin directories and the API server. It returns once
// the sockets are served.
func (n *draNode) startDriver() *dra.Driver {
	t := n.t
	t.Helper()
	if n.driver != nil {
		t.Fatal("the driver is running already")
	}
	w, err := cdi.NewWriter(cdi.Options{Dir: n.cdiDir, DevRoot: "/"})
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	d, err := dra.New(t.Context(), dra.Options{Backend: n.sim, NodeName: n.name, CDI: w, StateFile: n.stateFile, Ledger: ledger.New(), Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &runningDriver{d: d, cancel: cancel, done: make(chan error, 1)}
	started := make(chan struct{})
	go func() {
		r.done <- d.Serve(ctx, dra.ServeOptions{Client: n.client, RegistrarDir: n.registryDir, PluginDir: n.pluginDir, Started: func() { close(started) }})
	}()
	select {
	case <-started:
	case err := <-r.done:
		cancel()
		t.Fatalf("the DRA driver stopped at start: %v", err)
	case <-time.After(30 * time.Second):
		cancel()
		t.Fatal("the DRA driver did not serve its sockets within 30s")
	}
	n.driver = r
	t.Cleanup(n.stopDriver)
	return d
}

// stopDriver stops the driver, as the agent's process ends: its sockets
// go away, its checkpoint and CDI specs stay.
func (n *draNode) stopDriver() {
	if n.driver == nil {
		return
	}
	n.driver.cancel()
	// Stopped before its first ResourceSlices are published, Serve says
	// so (internal/dra returns the cancelled publish as an error); any
	// other error is a failure.
	if err := <-n.driver.done; err != nil && !errors.Is(err, context.Canceled) {
		n.t.Errorf("the DRA driver ended with %v", err)
	}
	n.driver = nil
}

// slices are the node's ResourceSlices of gpuplane's driver.
func (n *draNode) slices(ctx context.Context) ([]resourceapi.ResourceSlice, error) {
	l, err := n.client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{
		FieldSelector: resourceapi.ResourceSliceSelectorNodeName + "=" + n.name + "," + resourceapi.ResourceSliceSelectorDriver + "=" + apidra.DriverName,
	})
	if err != nil {
		return nil, err
	}
	return l.Items, nil
}

// publishedDevice waits until the driver's ResourceSlices offer a device
// that passes keep, and returns its pool and name, the way kube-scheduler
// reads them to allocate.
func (n *draNode) publishedDevice(keep func(resourceapi.Device) bool) (pool, device string) {
	t := n.t
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		items, err := n.slices(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range items {
			for _, d := range s.Spec.Devices {
				if keep(d) && len(d.Taints) == 0 {
					return s.Spec.Pool.Name, d.Name
				}
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no device of node %s in its %d ResourceSlices after 30s", n.name, len(items))
		}
		time.Sleep(20 * time.Millisecond) // polling interval
	}
}

// draKubelet is the kubelet's DRA part: its DRA manager
// (pkg/kubelet/cm/dra) with its checkpoint, and its plugin manager
// (pkg/kubelet/pluginmanager) watching the registry directory, wired as
// the kubelet wires them. Pods it treats as active are kept here.
type draKubelet struct {
	t       testing.TB
	mgr     *kubeletdra.Manager
	plugins *draplugin.DRAPluginManager
	// desired and actual are the plugin manager's two records: the
	// sockets its watcher saw, and the registrations its reconciler made.
	desired plugincache.DesiredStateOfWorld
	actual  plugincache.ActualStateOfWorld
	cancel  context.CancelFunc
	stop    chan struct{}
	once    sync.Once

	mu   sync.Mutex
	pods []*corev1.Pod
}

// startDRAKubelet starts the kubelet's DRA manager for node from its
// checkpoint directory, with pods active, and its plugin manager.
func startDRAKubelet(n *draNode, pods ...*corev1.Pod) *draKubelet {
	t := n.t
	t.Helper()
	logger := klog.Background()
	mgr, err := kubeletdra.NewManager(logger, n.client, n.kubeletState)
	if err != nil {
		t.Fatalf("the kubelet's DRA manager: %v", err)
	}
	ctx, cancel := context.WithCancel(klog.NewContext(context.Background(), logger))
	k := &draKubelet{t: t, mgr: mgr, cancel: cancel, stop: make(chan struct{}), pods: pods}
	getNode := func(ctx context.Context) (*corev1.Node, error) {
		return n.client.CoreV1().Nodes().Get(ctx, n.name, metav1.GetOptions{})
	}
	if err := mgr.Start(ctx, k.activePods, getNode, readySources{}); err != nil {
		cancel()
		t.Fatalf("starting the kubelet's DRA manager: %v", err)
	}
	plugins, ok := mgr.GetWatcherHandler().(*draplugin.DRAPluginManager)
	if !ok {
		cancel()
		t.Fatalf("the DRA manager's watcher handler is a %T", mgr.GetWatcherHandler())
	}
	k.plugins = plugins
	// The plugin manager's parts, put together as its constructor does
	// (pluginmanager.NewPluginManager), so that the watcher has its
	// directory watched before the test starts a driver and so that
	// waitRegistered can see both of its records.
	k.desired, k.actual = plugincache.NewDesiredStateOfWorld(), plugincache.NewActualStateOfWorld()
	watcher := pluginwatcher.NewWatcher(n.registryDir, k.desired)
	if err := watcher.Start(ctx, k.stop); err != nil {
		cancel()
		t.Fatalf("the kubelet's plugin watcher: %v", err)
	}
	rc := reconciler.NewReconciler(
		operationexecutor.NewOperationExecutor(operationexecutor.NewOperationGenerator(&record.FakeRecorder{})),
		pluginManagerLoop, k.desired, k.actual)
	rc.AddHandler(registerapi.DRAPlugin, plugins)
	go rc.Run(k.stop)
	t.Cleanup(k.shutdown)
	return k
}

// shutdown stops the kubelet; its checkpoint stays.
func (k *draKubelet) shutdown() {
	k.once.Do(func() {
		close(k.stop)
		k.cancel()
		k.plugins.Stop()
	})
}

func (k *draKubelet) activePods() []*corev1.Pod {
	k.mu.Lock()
	defer k.mu.Unlock()
	return slices.Clone(k.pods)
}

// pluginManagerLoop is the kubelet plugin manager's reconcile period.
const pluginManagerLoop = time.Second

// waitRegistered waits until the kubelet knows the driver and its plugin
// manager has nothing left to do: every socket its watcher saw is
// registered as last seen. A socket the watcher saw twice (created while
// the watch was being set up) is registered, then unregistered and
// registered again on the next pass; until then the driver is not
// registered for a moment, and a prepare in that moment fails as it would
// on a kubelet, whose pod worker retries.
func (k *draKubelet) waitRegistered(within time.Duration) time.Duration {
	k.t.Helper()
	start := time.Now()
	for {
		_, err := k.plugins.GetPlugin(apidra.DriverName)
		if err == nil && k.settled() {
			return time.Since(start)
		}
		if err == nil {
			err = errors.New("the plugin manager has a registration to redo")
		}
		if time.Since(start) > within {
			k.t.Fatalf("the kubelet did not register %s within %v: %v", apidra.DriverName, within, err)
		}
		time.Sleep(10 * time.Millisecond) // polling interval
	}
}

// settled: every socket the watcher saw is registered with the identity
// it was last seen with.
func (k *draKubelet) settled() bool {
	for _, p := range k.desired.GetPluginsToRegister() {
		if !k.actual.PluginExistsWithCorrectUUID(p) {
			return false
		}
	}
	return true
}

// admit prepares a pod's claims as the kubelet does before its containers
// start, keeping the pod active; on success it returns the CDI devices the
// kubelet would hand the runtime for each container.
func (k *draKubelet) admit(pod *corev1.Pod) ([][]string, error) {
	k.mu.Lock()
	if !slices.ContainsFunc(k.pods, func(p *corev1.Pod) bool { return p.UID == pod.UID }) {
		k.pods = append(k.pods, pod)
	}
	k.mu.Unlock()
	if err := k.mgr.PrepareResources(k.t.Context(), pod); err != nil {
		return nil, err
	}
	return k.containerDevices(pod)
}

// containerDevices are the CDI devices the kubelet hands the runtime for
// each of pod's containers.
func (k *draKubelet) containerDevices(pod *corev1.Pod) ([][]string, error) {
	var out [][]string
	for i := range pod.Spec.Containers {
		info, err := k.mgr.GetResources(pod, &pod.Spec.Containers[i])
		if err != nil {
			return nil, err
		}
		var ids []string
		for _, d := range info.CDIDevices {
			ids = append(ids, d.Name)
		}
		slices.Sort(ids)
		out = append(out, ids)
	}
	return out, nil
}

// remove ends a pod as the kubelet does once its containers are gone: it
// is no longer active, and its claims are unprepared.
func (k *draKubelet) remove(pod *corev1.Pod) error {
	k.mu.Lock()
	k.pods = slices.DeleteFunc(k.pods, func(p *corev1.Pod) bool { return p.UID == pod.UID })
	k.mu.Unlock()
	return k.mgr.UnprepareResources(k.t.Context(), pod)
}

// namespace creates a namespace of the test's own.
func namespace(t testing.TB, client kubernetes.Interface) string {
	t.Helper()
	ns, err := client.CoreV1().Namespaces().Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "dra-"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = client.CoreV1().Namespaces().Delete(context.Background(), ns.Name, metav1.DeleteOptions{})
	})
	return ns.Name
}

// claimPod is a pod bound to node whose one container uses the named
// ResourceClaims, as a user writes it; the kubelet gets it with its UID.
func claimPod(ns, name, node string, claims ...string) *corev1.Pod {
	pb := build.Pod(ns, name).UID(fmt.Sprintf("%s-%d", name, time.Now().UnixNano())).NodeName(node).Image("none")
	for _, c := range claims {
		pb.Claim(c, c)
	}
	return pb.Obj()
}

// allocatedClaim creates a ResourceClaim for one device of gpuplane's
// whole-GPU class, with opaque config when raw is set, then writes its
// status as kube-scheduler does when it allocates it: the device from the
// node's pool, the claim's config, a node selector for the node, and the
// pods it is reserved for.
func allocatedClaim(t testing.TB, client kubernetes.Interface, ns, name, pool, device, node, rawConfig string, reservedFor ...*corev1.Pod) *resourceapi.ResourceClaim {
	t.Helper()
	c := &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{
			Name:    "gpu",
			Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: dra.ClassGPU, AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 1},
		}}}},
	}
	var allocConfig []resourceapi.DeviceAllocationConfiguration
	if rawConfig != "" {
		dc := resourceapi.DeviceConfiguration{Opaque: &resourceapi.OpaqueDeviceConfiguration{Driver: apidra.DriverName, Parameters: runtime.RawExtension{Raw: []byte(rawConfig)}}}
		c.Spec.Devices.Config = []resourceapi.DeviceClaimConfiguration{{Requests: []string{"gpu"}, DeviceConfiguration: dc}}
		allocConfig = []resourceapi.DeviceAllocationConfiguration{{Source: resourceapi.AllocationConfigSourceClaim, Requests: []string{"gpu"}, DeviceConfiguration: dc}}
	}
	c, err := client.ResourceV1().ResourceClaims(ns).Create(t.Context(), c, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	c.Status.Allocation = &resourceapi.AllocationResult{
		Devices: resourceapi.DeviceAllocationResult{
			Results: []resourceapi.DeviceRequestAllocationResult{{Request: "gpu", Driver: apidra.DriverName, Pool: pool, Device: device}},
			Config:  allocConfig,
		},
		NodeSelector: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchFields: []corev1.NodeSelectorRequirement{{
			Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{node},
		}}}}},
	}
	for _, p := range reservedFor {
		c.Status.ReservedFor = append(c.Status.ReservedFor, resourceapi.ResourceClaimConsumerReference{Resource: "pods", Name: p.Name, UID: p.UID})
	}
	c, err = client.ResourceV1().ResourceClaims(ns).UpdateStatus(t.Context(), c, metav1.UpdateOptions{})
	if err != nil {
		t.Fatalf("writing the allocation of %s/%s: %v", ns, name, err)
	}
	return c
}

// installClasses creates gpuplane's DeviceClasses from the default config,
// as `gpuplane dev up` and the chart do.
func installClasses(t testing.TB, client kubernetes.Interface) {
	t.Helper()
	cfg, err := configv1.Load(strings.NewReader(""), configv1.Options{})
	if err != nil {
		t.Fatal(err)
	}
	classes, err := dra.DeviceClasses(cfg, dra.CommonMIGProfiles)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range classes {
		if _, err := client.ResourceV1().DeviceClasses().Create(t.Context(), c, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
}
