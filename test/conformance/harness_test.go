package conformance

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/klog/v2"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	"k8s.io/kubernetes/pkg/kubelet/cm/containermap"
	"k8s.io/kubernetes/pkg/kubelet/cm/devicemanager"
	"k8s.io/kubernetes/pkg/kubelet/cm/topologymanager"
	"sigs.k8s.io/yaml"

	"github.com/gpuplane/gpuplane/internal/agent"
	"github.com/gpuplane/gpuplane/internal/deviceplugin"
	"github.com/gpuplane/gpuplane/internal/gpu/sim"
)

// envInNamespace marks the re-run of the test binary inside the private
// mount namespace.
const envInNamespace = "GPUPLANE_CONFORMANCE_NAMESPACE"

// envRequire turns a missing prerequisite (a private mount namespace, the
// control-plane binaries) from a skipped test into a failed one; `make
// test-conformance` sets it, as `make test-integration` does for its tier.
const envRequire = "GPUPLANE_INTEGRATION"

// noNamespace says why the kubelet's manager cannot run, when it cannot.
var noNamespace string

// TestMain re-runs the tests in a private mount namespace with a tmpfs over
// /var/lib, so the kubelet's manager can own
// /var/lib/kubelet/device-plugins without touching the host's.
func TestMain(m *testing.M) {
	if os.Getenv(envInNamespace) != "" {
		quietKlog()
		if err := os.MkdirAll(pluginapi.DevicePluginPath, 0o755); err != nil {
			fmt.Fprintln(os.Stderr, "conformance: creating the kubelet directory in the namespace:", err)
			os.Exit(1)
		}
		os.Exit(runTests(m))
	}
	args := []string{"--mount", "--propagation", "private"}
	if os.Geteuid() != 0 {
		args = append([]string{"--user", "--map-root-user"}, args...)
	}
	probe := exec.Command("unshare", append(args, "--", "sh", "-c", "mount -t tmpfs tmpfs /var/lib")...)
	if out, err := probe.CombinedOutput(); err != nil {
		noNamespace = fmt.Sprintf("no private mount namespace (unshare %s: %v: %s)", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
		os.Exit(runTests(m))
	}
	self, err := os.Executable()
	if err != nil {
		fmt.Fprintln(os.Stderr, "conformance:", err)
		os.Exit(1)
	}
	script := `mount -t tmpfs tmpfs /var/lib && exec "$0" "$@"`
	cmd := exec.Command("unshare", append(append(args, "--", "sh", "-c", script, self), os.Args[1:]...)...)
	cmd.Env = append(os.Environ(), envInNamespace+"=1")
	cmd.Stdout, cmd.Stderr, cmd.Stdin = os.Stdout, os.Stderr, os.Stdin
	if err := cmd.Run(); err != nil {
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			os.Exit(exit.ExitCode())
		}
		fmt.Fprintln(os.Stderr, "conformance: running in a private mount namespace:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

// runTests runs the tests, then stops the control plane the DRA tests
// started.
func runTests(m *testing.M) int {
	code := m.Run()
	if err := stopControlPlane(); err != nil {
		fmt.Fprintln(os.Stderr, "conformance:", err)
		if code == 0 {
			code = 1
		}
	}
	return code
}

// quietKlog keeps the kubelet code's logs out of the test output unless
// GPUPLANE_CONFORMANCE_KLOG is set.
func quietKlog() {
	if os.Getenv("GPUPLANE_CONFORMANCE_KLOG") != "" {
		return
	}
	fs := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(fs)
	_ = fs.Set("logtostderr", "false")
	_ = fs.Set("stderrthreshold", "FATAL")
	klog.SetOutput(io.Discard)
}

// needNamespace skips a test of the kubelet's device manager when no
// private mount namespace could be made, or fails it under
// GPUPLANE_INTEGRATION=1, saying what is missing and how to provide it.
func needNamespace(t testing.TB) {
	t.Helper()
	if noNamespace == "" {
		return
	}
	const how = "run as root, or where unprivileged user namespaces are allowed " +
		"(sysctl user.max_user_namespaces > 0; on Ubuntu also kernel.apparmor_restrict_unprivileged_userns=0), " +
		"with util-linux's unshare on PATH"
	msg := "the kubelet's device manager needs a private /var/lib/kubelet: " + noNamespace
	if os.Getenv(envRequire) == "1" {
		t.Fatalf("%s; %s (%s=1 requires this tier to run)", msg, how, envRequire)
	}
	t.Skipf("%s; %s", msg, how)
}

type readySources struct{}

func (readySources) AddSource(string) {}
func (readySources) AllReady() bool   { return true }

// kubelet is the kubelet's device manager, started the way the kubelet
// starts it, with the pods it treats as active.
type kubelet struct {
	t    testing.TB
	mgr  *devicemanager.ManagerImpl
	mu   sync.Mutex
	pods []*corev1.Pod
	stop chan struct{}
}

// startKubelet starts a device manager; like a kubelet start, it wipes the
// device-plugin directory and serves kubelet.sock.
func startKubelet(t testing.TB) *kubelet {
	t.Helper()
	needNamespace(t)
	mgr, err := devicemanager.NewManagerImpl(nil, topologymanager.NewFakeManager())
	if err != nil {
		t.Fatal(err)
	}
	k := &kubelet{t: t, mgr: mgr, stop: make(chan struct{})}
	if err := mgr.Start(klog.Background(), k.activePods, readySources{}, containermap.NewContainerMap(), sets.New[string]()); err != nil {
		t.Fatal(err)
	}
	go func() {
		for {
			select {
			case <-k.stop:
				return
			case <-mgr.Updates():
			}
		}
	}()
	t.Cleanup(k.shutdown)
	return k
}

func (k *kubelet) shutdown() {
	select {
	case <-k.stop:
		return
	default:
	}
	close(k.stop)
	_ = k.mgr.Stop(klog.Background())
}

func (k *kubelet) activePods() []*corev1.Pod {
	k.mu.Lock()
	defer k.mu.Unlock()
	return append([]*corev1.Pod(nil), k.pods...)
}

// counts returns capacity and allocatable of a resource as the kubelet
// would put them into the Node's status.
func (k *kubelet) counts(name string) (capacity, allocatable int64) {
	c, a, _ := k.mgr.GetCapacity()
	capQ, allocQ := c[corev1.ResourceName(name)], a[corev1.ResourceName(name)]
	return capQ.Value(), allocQ.Value()
}

// waitCounts waits until a resource has the given capacity and allocatable.
func (k *kubelet) waitCounts(within time.Duration, name string, capacity, allocatable int64) time.Duration {
	k.t.Helper()
	start := time.Now()
	deadline := start.Add(within)
	for {
		c, a := k.counts(name)
		if c == capacity && a == allocatable {
			return time.Since(start)
		}
		if time.Now().After(deadline) {
			capAll, allocAll, _ := k.mgr.GetCapacity()
			k.t.Fatalf("%s: capacity %d allocatable %d after %v, want %d and %d (all: %v / %v)", name, c, a, within, capacity, allocatable, capAll, allocAll)
		}
		time.Sleep(2 * time.Millisecond) // polling interval
	}
}

// allocation is what a container got.
type allocation struct {
	devices []string
	opts    *devicemanager.DeviceRunContainerOptions
}

// admit allocates a one-container pod asking for n of a resource, as the
// kubelet does at pod admission, and keeps the pod active.
func (k *kubelet) admit(name string, n int64) (*allocation, error) {
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("p-%d", time.Now().UnixNano()), Namespace: "default", UID: types.UID(fmt.Sprintf("uid-%d", time.Now().UnixNano()))},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name:      "c",
			Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceName(name): *resource.NewQuantity(n, resource.DecimalSI)}},
		}}},
	}
	k.mu.Lock()
	k.pods = append(k.pods, pod)
	k.mu.Unlock()
	if err := k.mgr.Allocate(pod, &pod.Spec.Containers[0]); err != nil {
		k.release(pod.UID)
		return nil, err
	}
	opts, err := k.mgr.GetDeviceRunContainerOptions(context.Background(), pod, &pod.Spec.Containers[0])
	if err != nil {
		return nil, err
	}
	got := k.mgr.GetDevices(string(pod.UID), "c")
	var ids []string
	for id := range got[name] {
		ids = append(ids, id)
	}
	return &allocation{devices: ids, opts: opts}, nil
}

// admitPod allocates pod's containers in order, as the kubelet does at
// admission, keeping it active; it returns each container's devices of
// the named resource.
func (k *kubelet) admitPod(pod *corev1.Pod, name string) ([][]string, error) {
	k.mu.Lock()
	k.pods = append(k.pods, pod)
	k.mu.Unlock()
	var out [][]string
	for i := range pod.Spec.Containers {
		c := &pod.Spec.Containers[i]
		if err := k.mgr.Allocate(pod, c); err != nil {
			k.release(pod.UID)
			return nil, err
		}
		var ids []string
		for id := range k.mgr.GetDevices(string(pod.UID), c.Name)[name] {
			ids = append(ids, id)
		}
		out = append(out, ids)
	}
	return out, nil
}

// releaseAll ends every pod so their devices are free again.
func (k *kubelet) releaseAll() {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.pods = nil
}

func (k *kubelet) release(uid types.UID) {
	k.mu.Lock()
	defer k.mu.Unlock()
	for i, p := range k.pods {
		if p.UID == uid {
			k.pods = append(k.pods[:i], k.pods[i+1:]...)
			return
		}
	}
}

func (a *allocation) env(name string) string {
	for _, e := range a.opts.Envs {
		if e.Name == name {
			return e.Value
		}
	}
	return ""
}

// node is a running agent over a simulated node.
type node struct {
	sim    *sim.Backend
	cdiDir string
	// config is the agent's config file; reload asks it to read it again,
	// as SIGHUP does.
	config string
	reload chan struct{}
	cancel context.CancelFunc
	done   chan error
}

// startAgent runs gpuplane's device plugin, as gpuplane-agent does, on a
// simulated node; prepare may partition MIG before it starts.
func startAgent(t testing.TB, profile, config string, prepare func(*sim.Backend)) *node {
	t.Helper()
	n, err := tryAgent(t, profile, config, prepare, 0)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// tryAgent starts the agent and waits up to refuseWithin for it to refuse
// the config; an agent still running then is returned.
func tryAgent(t testing.TB, profile, config string, prepare func(*sim.Backend), refuseWithin time.Duration) (*node, error) {
	t.Helper()
	return runAgent(t, profile, config, prepare, nil, refuseWithin)
}

// runAgent is tryAgent with the steerer the agent gives its device plugin
// (none when nil).
func runAgent(t testing.TB, profile, config string, prepare func(*sim.Backend), steer deviceplugin.Steerer, refuseWithin time.Duration) (*node, error) {
	t.Helper()
	// A profile is a built-in name or, when it has several lines, a
	// profile file's content.
	var p *sim.Profile
	var err error
	if strings.Contains(profile, "\n") {
		p, err = sim.Parse(strings.NewReader(profile), "inline profile")
	} else {
		p, err = sim.Builtin(profile)
	}
	if err != nil {
		t.Fatal(err)
	}
	b, err := sim.New(p, sim.Options{NodeName: "conformance-" + p.Name})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	if prepare != nil {
		prepare(b)
	}
	dir := t.TempDir()
	cfg := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(cfg, []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	n := &node{sim: b, cdiDir: filepath.Join(dir, "cdi"), config: cfg, reload: make(chan struct{}), cancel: cancel, done: make(chan error, 1)}
	go func() {
		n.done <- agent.RunPlugin(ctx, agent.PluginOptions{
			ConfigFile: cfg, KubeletDir: pluginapi.DevicePluginPath, CDIDir: n.cdiDir,
			Backend: b, HealthCheckInterval: 50 * time.Millisecond, Reload: n.reload, Steer: steer,
			Logger: slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn})),
		})
	}()
	// A config or layout the agent refuses ends RunPlugin at once.
	select {
	case err := <-n.done:
		cancel()
		return nil, err
	case <-time.After(refuseWithin):
	}
	t.Cleanup(func() { cancel(); <-n.done })
	return n, nil
}

type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// seedConfig returns the config document a seed ConfigMap in testdata
// carries, unchanged.
func seedConfig(t testing.TB, file string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", file))
	if err != nil {
		t.Fatal(err)
	}
	var cm struct {
		Data map[string]string `json:"data"`
	}
	if err := yaml.Unmarshal(b, &cm); err != nil {
		t.Fatal(err)
	}
	for _, v := range cm.Data {
		return v
	}
	t.Fatalf("%s has no data", file)
	return ""
}

// partition turns MIG on for a GPU and creates count GPU instances (each
// with one compute instance spanning it) of the profile with the given
// slice count; it returns the profile's name.
func partition(t testing.TB, b *sim.Backend, index, slices, count int) string {
	t.Helper()
	ctx := context.Background()
	if err := b.SetMIGMode(ctx, index, true); err != nil {
		t.Fatal(err)
	}
	profiles, err := b.MIGProfiles(ctx, index)
	if err != nil {
		t.Fatal(err)
	}
	name := ""
	for _, p := range profiles {
		if p.SliceCount == slices && !strings.ContainsAny(p.Name, "+-") {
			name = p.Name
			break
		}
	}
	if name == "" {
		t.Fatalf("gpu %d has no plain %d-slice MIG profile", index, slices)
	}
	for range count {
		gi, err := b.CreateGPUInstance(ctx, index, name, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := b.CreateComputeInstance(ctx, index, gi.ID, ""); err != nil {
			t.Fatal(err)
		}
	}
	return name
}
