package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"

	"github.com/gpuplane/gpuplane/api/gpunode"
	"github.com/gpuplane/gpuplane/api/reasons"
	"github.com/gpuplane/gpuplane/internal/deviceplugin"
	"github.com/gpuplane/gpuplane/internal/health"
	"github.com/gpuplane/gpuplane/internal/metrics"
	"github.com/gpuplane/gpuplane/internal/mig"
	"github.com/gpuplane/gpuplane/internal/nodecond"
	"github.com/gpuplane/gpuplane/internal/sharing"
)

// migFieldManager owns the nvidia.com/mig.config.state label and the
// MIGConfigApplied condition on the Node.
const migFieldManager = "gpuplane-agent-mig"

// DefaultMIGConfigKey is the key of the MIG ConfigMap holding the
// mig-parted config, as the GPU Operator's default-mig-parted-config has it.
const DefaultMIGConfigKey = "config.yaml"

// Back-off of the MIG part between passes that did not reach the config.
const (
	migMinBackoff = 2 * time.Second
	migMaxBackoff = 2 * time.Minute
	// migRefreshTimeout bounds the wait for the device plugin to
	// advertise the new devices.
	migRefreshTimeout = 30 * time.Second
)

// migCluster is mig.Cluster over the API server and the kubelet's
// PodResources API: the node's label and the ConfigMap come from two
// watches, pods on GPUs from PodResources and the resources the device
// plugin serves.
type migCluster struct {
	node       string
	namespace  string
	configMap  string
	key        string
	client     *nodeClient
	podRes     metrics.PodResourcesLister
	pods       *nodePods
	served     func() *sharing.Served
	triggerOut chan struct{}
	// events, when set, records why a pod is evicted and the Node's
	// state changes.
	events record.EventRecorder
	// dra, when the DRA driver runs, adds the pods holding prepared
	// claims on a GPU to its pods.
	dra *draLink

	mu        sync.Mutex
	label     string
	labelSeen bool
	data      []byte
	cmErr     error

	// cond writes the MIGConfig condition under migFieldManager.
	cond *nodecond.Writer
	// condStatus and condReason are what the last event told
	// (SetStatus runs on the reconciler's goroutine only).
	condStatus corev1.ConditionStatus
	condReason string
}

var _ mig.Cluster = (*migCluster)(nil)

// Desired implements mig.Cluster.
func (c *migCluster) Desired(context.Context) (string, []byte, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.label == "" {
		return "", nil, nil
	}
	return c.label, c.data, c.cmErr
}

func (c *migCluster) trigger() {
	select {
	case c.triggerOut <- struct{}{}:
	default:
	}
}

// watch keeps the node's label and the ConfigMap's content until ctx ends;
// synced reports when both were read once.
func (c *migCluster) watch(ctx context.Context) (synced func() bool) {
	onNode := func(n *corev1.Node) {
		c.mu.Lock()
		changed := !c.labelSeen || c.label != n.Labels[gpunode.LabelMIGConfig]
		c.label, c.labelSeen = n.Labels[gpunode.LabelMIGConfig], true
		c.mu.Unlock()
		if changed {
			c.trigger()
		}
	}
	nodeSynced := watchNodeKeys(ctx, c.client, c.node, []string{gpunode.LabelMIGConfig}, nil, onNode)
	c.setConfigMap(nil)
	cms := cache.NewListWatchFromClient(c.client.rest, "configmaps", c.namespace, fields.OneTermEqualSelector("metadata.name", c.configMap))
	onCM := func(obj any) {
		cm, _ := obj.(*corev1.ConfigMap)
		c.setConfigMap(cm)
		c.trigger()
	}
	_, cctrl := cache.NewInformerWithOptions(cache.InformerOptions{
		ListerWatcher: cms, ObjectType: &corev1.ConfigMap{},
		Handler: cache.ResourceEventHandlerFuncs{
			AddFunc: onCM, UpdateFunc: func(_, obj any) { onCM(obj) },
			DeleteFunc: func(any) { c.setConfigMap(nil); c.trigger() },
		},
	})
	go cctrl.RunWithContext(ctx)
	return func() bool { return nodeSynced() && cctrl.HasSynced() }
}

// setConfigMap records the ConfigMap's config, or why there is none.
func (c *migCluster) setConfigMap(cm *corev1.ConfigMap) {
	c.mu.Lock()
	defer c.mu.Unlock()
	ref := c.namespace + "/" + c.configMap
	switch {
	case cm == nil:
		c.data, c.cmErr = nil, fmt.Errorf("the MIG ConfigMap %s does not exist (or RBAC forbids get/list/watch configmaps there): create it, or point --mig-config-map at yours", ref)
	case cm.Data[c.key] == "":
		keys := make([]string, 0, len(cm.Data))
		for k := range cm.Data {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		c.data, c.cmErr = nil, fmt.Errorf("the MIG ConfigMap %s has no key %q (it has %s): put the mig-parted config there, or set --mig-config-key", ref, c.key, orNone(keys))
	case len(cm.Data[c.key]) > mig.MaxBytes:
		c.data, c.cmErr = nil, fmt.Errorf("the MIG ConfigMap %s: key %q is larger than %d bytes", ref, c.key, mig.MaxBytes)
	default:
		c.data, c.cmErr = []byte(cm.Data[c.key]), nil
	}
}

func orNone(s []string) string {
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, ", ")
}

// PodsOn implements mig.Cluster: the pods PodResources lists with devices
// of the given GPUs, by the device IDs the device plugin serves, and, with
// the DRA driver on, the pods using claims prepared on them (and claims
// still prepared that no pod uses).
func (c *migCluster) PodsOn(ctx context.Context, gpus map[int]bool) ([]mig.Pod, error) {
	type key struct{ resource, id string }
	gpuOf := map[key]int{}
	for _, r := range c.served().Resources() {
		for _, d := range r.Devices {
			gpuOf[key{r.Name, d.ID}] = d.GPUIndex
		}
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	resp, err := c.podRes.List(ctx)
	if err != nil {
		return nil, err
	}
	var out []mig.Pod
	for _, p := range resp.GetPodResources() {
		held := map[int]bool{}
		for _, ctr := range p.GetContainers() {
			for _, d := range ctr.GetDevices() {
				for _, id := range d.GetDeviceIds() {
					if g, ok := gpuOf[key{d.GetResourceName(), id}]; ok && gpus[g] {
						held[g] = true
					}
				}
			}
		}
		if len(held) == 0 {
			continue
		}
		pod := mig.Pod{Namespace: p.GetNamespace(), Name: p.GetName()}
		if c.pods != nil {
			if uid, ok := c.pods.uidOf(pod.Namespace, pod.Name); ok {
				pod.UID = uid
			}
		}
		for g := range held {
			pod.GPUs = append(pod.GPUs, g)
		}
		sort.Ints(pod.GPUs)
		out = append(out, pod)
	}
	return c.dra.migPodsOn(ctx, gpus, out)
}

// Evict implements mig.Cluster through the Eviction API, so that
// PodDisruptionBudgets hold. A pod already gone counts as evicted.
func (c *migCluster) Evict(ctx context.Context, p mig.Pod) error {
	ev := &policyv1.Eviction{
		TypeMeta:   metav1.TypeMeta{APIVersion: policyv1.SchemeGroupVersion.String(), Kind: "Eviction"},
		ObjectMeta: metav1.ObjectMeta{Namespace: p.Namespace, Name: p.Name},
	}
	if p.UID != "" {
		uid := types.UID(p.UID)
		ev.DeleteOptions = &metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}}
	}
	body, err := json.Marshal(ev)
	if err != nil {
		return err
	}
	err = c.client.rest.Post().MaxRetries(0).Namespace(p.Namespace).Resource("pods").Name(p.Name).SubResource("eviction").Body(body).Do(ctx).Error()
	switch {
	case err == nil:
		if c.events != nil {
			ref := &corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: p.Namespace, Name: p.Name, UID: types.UID(p.UID)}
			c.events.Event(ref, corev1.EventTypeWarning, gpunode.EventReasonMIGEviction, reasons.WithDocs(gpunode.EventReasonMIGEviction,
				fmt.Sprintf("evicted by gpuplane-agent: GPUs %v of node %s are being re-partitioned (the node's %s label changed)", p.GPUs, c.node, gpunode.LabelMIGConfig)))
		}
		return nil
	case apierrors.IsNotFound(err):
		return nil
	case apierrors.IsTooManyRequests(err):
		return fmt.Errorf("%s: %w", apiMessage(err), mig.ErrEvictionBlocked)
	}
	return fmt.Errorf("evicting pod %s: %w", p, err)
}

func apiMessage(err error) string {
	var se apierrors.APIStatus
	if errors.As(err, &se) && se.Status().Message != "" {
		return se.Status().Message
	}
	return err.Error()
}

// SetStatus implements mig.Cluster: the state label and the
// gpuplane.io/mig-layout annotation by server-side apply of the Node's
// metadata, the condition by server-side apply of its status, both under
// migFieldManager. An empty State (no config chosen) publishes the layout
// alone, which drops the state label and leaves the condition as it was.
func (c *migCluster) SetStatus(ctx context.Context, s mig.Status) error {
	force := true
	opts := metav1.PatchOptions{FieldManager: migFieldManager, Force: &force}
	meta := map[string]any{"name": c.node}
	if s.State != "" {
		meta["labels"] = map[string]string{gpunode.LabelMIGConfigState: s.State}
	}
	if s.GPUs != nil {
		layout, err := json.Marshal(mig.LayoutAnnotation(s.GPUs))
		if err != nil {
			return err
		}
		meta["annotations"] = map[string]string{gpunode.MIGLayoutAnnotation: string(layout)}
	}
	body, err := json.Marshal(map[string]any{"apiVersion": "v1", "kind": "Node", "metadata": meta})
	if err != nil {
		return err
	}
	if _, err := c.client.Patch(ctx, c.node, types.ApplyPatchType, body, opts); err != nil {
		return fmt.Errorf("writing the %s label and %s annotation of node %s: %w", gpunode.LabelMIGConfigState, gpunode.MIGLayoutAnnotation, c.node, err)
	}
	if s.State == "" {
		return nil
	}
	status := corev1.ConditionFalse
	if s.State == gpunode.MIGConfigStateSuccess {
		status = corev1.ConditionTrue
	}
	msg := s.Message
	if s.Config != "" {
		msg = "config " + s.Config + ": " + msg
	}
	if status != c.condStatus || s.Reason != c.condReason {
		if c.events != nil {
			kind := corev1.EventTypeNormal
			if s.State == gpunode.MIGConfigStateFailed {
				kind = corev1.EventTypeWarning
			}
			ref := &corev1.ObjectReference{Kind: "Node", APIVersion: "v1", Name: c.node, UID: types.UID(c.node)}
			c.events.Event(ref, kind, reasons.MIGEventPrefix+s.Reason, reasons.WithDocs(reasons.MIGEventPrefix+s.Reason, msg))
		}
		c.condStatus, c.condReason = status, s.Reason
	}
	// Written every time, which refreshes its heartbeat.
	return c.cond.Write(ctx, nodecond.Condition{Status: status, Reason: s.Reason, Message: msg})
}

// migGate is the device plugin's health source with the MIG part's say:
// the devices of GPUs being re-partitioned are reported unhealthy, so the
// kubelet admits no new pod to them, and MIG devices created after the
// health monitor started are as healthy as their GPU.
type migGate struct {
	inner deviceplugin.HealthSource

	mu        sync.Mutex
	withdrawn map[int]bool
	gpuOf     map[string]int    // device UUID -> GPU index
	parentOf  map[string]string // MIG device UUID -> GPU UUID
	// prevGPUOf and prevParentOf are the same of the resources served
	// before the last: the kubelet may ask about those devices until it is
	// sent the new ones, and a device of a GPU being re-partitioned must
	// not look healthy meanwhile. Older ones go: MIG devices take new
	// UUIDs at every re-partition, and would pile up.
	prevGPUOf    map[string]int
	prevParentOf map[string]string
	listeners    map[chan struct{}]struct{}
	// refreshed receives after the plugin serves a new resource set.
	refreshed chan struct{}
	reload    chan<- struct{}
}

var (
	_ deviceplugin.HealthSource = (*migGate)(nil)
	_ mig.Devices               = (*migGate)(nil)
)

func newMIGGate(reload chan<- struct{}) *migGate {
	return &migGate{withdrawn: map[int]bool{}, gpuOf: map[string]int{}, parentOf: map[string]string{},
		listeners: map[chan struct{}]struct{}{}, refreshed: make(chan struct{}, 1), reload: reload, inner: deviceplugin.AllHealthy{}}
}

// wrap is PluginOptions.WrapHealth.
func (g *migGate) wrap(h deviceplugin.HealthSource) deviceplugin.HealthSource {
	g.mu.Lock()
	g.inner = h
	g.mu.Unlock()
	return g
}

// setResources is given the resources the plugin serves (OnResources).
// Devices it learns of are healthy from now on where they were unknown,
// and so unhealthy, before: the plugin's streams are told.
func (g *migGate) setResources(rs []*sharing.Resource) {
	g.mu.Lock()
	learned := false
	gpuOf, parentOf := map[string]int{}, map[string]string{}
	for _, r := range rs {
		for _, d := range r.Devices {
			if _, ok := g.gpuOf[d.UUID]; !ok {
				learned = true
			}
			gpuOf[d.UUID] = d.GPUIndex
			gpuOf[d.GPUUUID] = d.GPUIndex
			if d.MIG != nil {
				parentOf[d.UUID] = d.GPUUUID
			}
		}
	}
	g.prevGPUOf, g.prevParentOf = g.gpuOf, g.parentOf
	g.gpuOf, g.parentOf = gpuOf, parentOf
	if learned {
		g.notifyLocked()
	}
	g.mu.Unlock()
	select {
	case g.refreshed <- struct{}{}:
	default:
	}
}

// Healthy implements deviceplugin.HealthSource.
func (g *migGate) Healthy(uuid string) bool {
	g.mu.Lock()
	idx, known := g.gpuOf[uuid]
	if !known {
		idx, known = g.prevGPUOf[uuid]
	}
	withdrawn := known && g.withdrawn[idx]
	parent, ok := g.parentOf[uuid]
	if !ok {
		parent = g.prevParentOf[uuid]
	}
	inner := g.inner
	g.mu.Unlock()
	if withdrawn {
		return false
	}
	if m := monitorOf(inner); m != nil && parent != "" {
		if _, tracked := m.Device(uuid); !tracked {
			// A MIG device made after the monitor started: its GPU's
			// health is its own, unless a DRA claim holds the device.
			if c, ok := inner.(claimChecker); ok && c.Claimed(uuid) {
				return false
			}
			return m.Healthy(parent)
		}
	}
	return inner.Healthy(uuid)
}

// healthUnwrapper is a health source that wraps another (ledgerHealth
// wraps the monitor when the DRA driver runs).
type healthUnwrapper interface {
	Unwrap() deviceplugin.HealthSource
}

// claimChecker is a health source that also knows which devices DRA
// claims hold (ledgerHealth).
type claimChecker interface {
	Claimed(uuid string) bool
}

// monitorOf finds the health monitor behind h, through any wrappers.
func monitorOf(h deviceplugin.HealthSource) *health.Monitor {
	for h != nil {
		if m, ok := h.(*health.Monitor); ok {
			return m
		}
		u, ok := h.(healthUnwrapper)
		if !ok {
			return nil
		}
		h = u.Unwrap()
	}
	return nil
}

// Changes implements deviceplugin.HealthSource: the inner source's changes
// and the gate's own.
func (g *migGate) Changes() (<-chan struct{}, func()) {
	out := make(chan struct{}, 1)
	g.mu.Lock()
	g.listeners[out] = struct{}{}
	inner := g.inner
	g.mu.Unlock()
	in, stopInner := inner.Changes()
	done := make(chan struct{})
	if in != nil {
		go func() {
			for {
				select {
				case <-done:
					return
				case _, ok := <-in:
					if !ok {
						return
					}
					select {
					case out <- struct{}{}:
					default:
					}
				}
			}
		}()
	}
	var once sync.Once
	return out, func() {
		once.Do(func() {
			close(done)
			stopInner()
			g.mu.Lock()
			delete(g.listeners, out)
			g.mu.Unlock()
		})
	}
}

// Withdraw implements mig.Devices.
func (g *migGate) Withdraw(gpus []int) {
	next := make(map[int]bool, len(gpus))
	for _, i := range gpus {
		next[i] = true
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if fmt.Sprint(sortedKeys(next)) == fmt.Sprint(sortedKeys(g.withdrawn)) {
		return
	}
	g.withdrawn = next
	g.notifyLocked()
}

// notifyLocked tells every listener that health answers changed; g.mu is
// held.
func (g *migGate) notifyLocked() {
	for ch := range g.listeners {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

func sortedKeys(m map[int]bool) []int {
	out := make([]int, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Ints(out)
	return out
}

// Refresh implements mig.Devices: the plugin re-reads the GPUs and serves
// the devices they now have.
func (g *migGate) Refresh(ctx context.Context) error {
	select {
	case <-g.refreshed:
	default:
	}
	select {
	case g.reload <- struct{}{}:
	default:
	}
	t := time.NewTimer(migRefreshTimeout)
	defer t.Stop()
	select {
	case <-g.refreshed:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return fmt.Errorf("the device plugin did not serve the new devices within %s (its log says why)", migRefreshTimeout)
	}
}

// newMIGPart builds the MIG part: the reconciler over the node's GPUs,
// its label and ConfigMap, PodResources and the device plugin's gate (and
// the DRA driver's devices, through migDevices), with gpuplane-scheduler's
// proposals as per-GPU overrides.
func newMIGPart(hw mig.Hardware, c *migCluster, devices mig.Devices, strategy func() string, timeout time.Duration, log *slog.Logger) part {
	r := &mig.Reconciler{HW: hw, Cluster: c, Devices: devices, Strategy: strategy, EvictionTimeout: timeout, Log: log}
	proposals := &migProposals{node: c.node, client: c.client, trigger: c.trigger, log: log}
	r.Overrides = proposals.overrides
	return part{name: "mig", run: func(ctx context.Context) error {
		labelSynced, proposalsSynced := c.watch(ctx), proposals.watch(ctx)
		synced := func() bool { return labelSynced() && proposalsSynced() }
		// The first pass waits for the label and the ConfigMap to be read,
		// so that a ConfigMap not seen yet is not reported missing.
		wait, cancel := context.WithTimeout(ctx, time.Minute)
		if !cache.WaitForCacheSync(wait.Done(), synced) && ctx.Err() == nil {
			log.Warn("the node or the MIG ConfigMap is not read yet (RBAC: get/list/watch nodes and configmaps); reconciling anyway")
		}
		cancel()
		return r.Run(ctx, c.triggerOut, migMinBackoff, migMaxBackoff)
	}}
}
