package quarantine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/gpuplane/gpuplane/api/gpunode"
	"github.com/gpuplane/gpuplane/internal/gpu"
	"github.com/gpuplane/gpuplane/internal/nodecond"
	"github.com/gpuplane/gpuplane/internal/sharing"
)

// ConditionFieldManager owns the GPUQuarantine condition in the Node's
// status (server-side apply), apart from every other condition.
const ConditionFieldManager = "gpuplane-agent-quarantine"

// KubeNode is NodeWriter over a core/v1 REST client.
type KubeNode struct {
	client rest.Interface
	node   string
	cond   *nodecond.Writer

	// spec is the taint value and record last written, so that a write
	// that changes only the condition costs one request.
	spec        string
	specWritten bool
}

var _ NodeWriter = (*KubeNode)(nil)

// NewKubeNode writes to the Node named node through client, a REST client
// of the core/v1 API.
func NewKubeNode(client rest.Interface, node string) *KubeNode {
	return &KubeNode{client: client, node: node, cond: nodecond.New(nodecond.REST(client), node, gpunode.ConditionGPUQuarantine, ConditionFieldManager)}
}

func (k *KubeNode) get(ctx context.Context) (*corev1.Node, error) {
	n := &corev1.Node{}
	if err := k.client.Get().Resource("nodes").Name(k.node).Do(ctx).Into(n); err != nil {
		return nil, fmt.Errorf("reading node %s: %w", k.node, err)
	}
	return n, nil
}

// Record implements NodeWriter. A record that does not parse is reported
// and treated as empty: the agent rewrites it.
func (k *KubeNode) Record(ctx context.Context) (gpunode.QuarantineRecord, error) {
	n, err := k.get(ctx)
	if err != nil {
		return gpunode.QuarantineRecord{}, err
	}
	v, ok := n.Annotations[gpunode.QuarantineAnnotation]
	if !ok {
		return gpunode.QuarantineRecord{}, nil
	}
	r, err := gpunode.ParseQuarantine(v)
	if err != nil {
		return gpunode.QuarantineRecord{}, nil //nolint:nilerr // a bad record is dropped and rewritten; the GPUs' own health decides
	}
	return r, nil
}

// Write implements NodeWriter: the taint and the record by a merge patch
// guarded by the Node's resourceVersion (the taint list is replaced whole,
// so other writers' taints are read and kept), then the condition by
// server-side apply to the status.
func (k *KubeNode) Write(ctx context.Context, s NodeStatus) error {
	spec, err := gpunode.FormatQuarantine(s.Record)
	if err != nil {
		return err
	}
	spec = s.TaintValue + "\n" + spec
	if !k.specWritten || spec != k.spec {
		for range 5 {
			if err = k.writeSpec(ctx, s); !apierrors.IsConflict(err) {
				break
			}
		}
		if err != nil {
			return err
		}
		k.spec, k.specWritten = spec, true
	}
	return k.writeCondition(ctx, s.Condition)
}

func (k *KubeNode) writeSpec(ctx context.Context, s NodeStatus) error {
	n, err := k.get(ctx)
	if err != nil {
		return err
	}
	taints := slices.DeleteFunc(slices.Clone(n.Spec.Taints), func(t corev1.Taint) bool { return t.Key == gpunode.TaintGPUFault })
	if s.TaintValue != "" {
		taints = append(taints, corev1.Taint{Key: gpunode.TaintGPUFault, Value: s.TaintValue, Effect: corev1.TaintEffectNoSchedule})
	}
	var record any
	if len(s.Record.GPUs) > 0 {
		if record, err = gpunode.FormatQuarantine(s.Record); err != nil {
			return err
		}
	}
	if slices.Equal(taints, n.Spec.Taints) && n.Annotations[gpunode.QuarantineAnnotation] == orEmpty(record) {
		return nil
	}
	if taints == nil {
		taints = []corev1.Taint{}
	}
	body, err := json.Marshal(map[string]any{
		"metadata": map[string]any{
			"resourceVersion": n.ResourceVersion,
			"annotations":     map[string]any{gpunode.QuarantineAnnotation: record},
		},
		"spec": map[string]any{"taints": taints},
	})
	if err != nil {
		return err
	}
	err = k.client.Patch(types.MergePatchType).Resource("nodes").Name(k.node).Body(body).Do(ctx).Error()
	if err != nil {
		return fmt.Errorf("tainting node %s and recording its GPU quarantine: %w", k.node, err)
	}
	return nil
}

func orEmpty(v any) string {
	s, _ := v.(string)
	return s
}

func (k *KubeNode) writeCondition(ctx context.Context, c Condition) error {
	_, err := k.cond.Set(ctx, c)
	return err
}

// PodResourcesLister lists the devices the kubelet gave the node's pods.
type PodResourcesLister interface {
	List(ctx context.Context) (*podresourcesv1.ListPodResourcesResponse, error)
}

// KubePods is Pods over the kubelet's PodResources API and an eviction
// function.
type KubePods struct {
	list   PodResourcesLister
	served func() *sharing.Served
	evict  func(ctx context.Context, p PodRef) error
	uid    func(namespace, name string) (types.UID, bool)

	mu     sync.Mutex
	claims func(ctx context.Context, index int) ([]PodRef, error)
}

var _ Pods = (*KubePods)(nil)

// NewKubePods finds pods through list, maps their device IDs to GPUs
// through served, the resources the device plugin serves (nil until it
// serves), and evicts through evict; uid, when set, gives the UID of a pod bound to the
// node, for the eviction's precondition.
func NewKubePods(list PodResourcesLister, served func() *sharing.Served, evict func(ctx context.Context, p PodRef) error, uid func(namespace, name string) (types.UID, bool)) *KubePods {
	return &KubePods{list: list, served: served, evict: evict, uid: uid}
}

// SetClaimPods gives the pods that hold a GPU through prepared DRA
// ResourceClaims (the node's DRA driver knows them, not the device
// plugin's resources): OnGPU lists them too.
func (k *KubePods) SetClaimPods(f func(ctx context.Context, index int) ([]PodRef, error)) {
	k.mu.Lock()
	k.claims = f
	k.mu.Unlock()
}

// OnGPU implements Pods.
func (k *KubePods) OnGPU(ctx context.Context, index int) ([]PodRef, error) {
	k.mu.Lock()
	claims := k.claims
	k.mu.Unlock()
	resources := k.served()
	if resources == nil {
		return nil, errors.New("the device plugin has not served its resources yet")
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	resp, err := k.list.List(ctx)
	if err != nil {
		return nil, fmt.Errorf("asking the kubelet's PodResources API: %w", err)
	}
	var out []PodRef
	for _, p := range resp.GetPodResources() {
		if holds(p, resources, index) {
			ref := PodRef{Namespace: p.GetNamespace(), Name: p.GetName()}
			if k.uid != nil {
				ref.UID, _ = k.uid(ref.Namespace, ref.Name)
			}
			out = append(out, ref)
		}
	}
	if claims == nil {
		return out, nil
	}
	byClaim, err := claims(ctx, index)
	if err != nil {
		return nil, fmt.Errorf("finding the pods using DRA claims on GPU %d: %w", index, err)
	}
	for _, ref := range byClaim {
		if !slices.ContainsFunc(out, func(p PodRef) bool { return p.Namespace == ref.Namespace && p.Name == ref.Name }) {
			out = append(out, ref)
		}
	}
	return out, nil
}

// holds reports whether a pod's containers hold a device of GPU index.
func holds(p *podresourcesv1.PodResources, resources *sharing.Served, index int) bool {
	for _, c := range p.GetContainers() {
		for _, d := range c.GetDevices() {
			for _, id := range d.GetDeviceIds() {
				if dev, ok := resources.Device(d.GetResourceName(), id); ok && dev.GPUIndex == index {
					return true
				}
			}
		}
	}
	return false
}

// Evict implements Pods.
func (k *KubePods) Evict(ctx context.Context, p PodRef) error { return k.evict(ctx, p) }

// BackendGPUs is GPUs over the hardware seam.
type BackendGPUs struct {
	Backend gpu.Backend
	// Devices are the GPUs as the device plugin offers them (the
	// inventory at start): Check fails while a GPU lacks a MIG device it
	// had, as a reset destroys MIG instances.
	Devices []gpu.Device
}

var _ GPUs = BackendGPUs{}

// Reset implements GPUs through gpu.Resetter.
func (b BackendGPUs) Reset(ctx context.Context, index int) error {
	r, ok := b.Backend.(gpu.Resetter)
	if !ok {
		return fmt.Errorf("resetting GPU %d: the %s backend has no reset: %w", index, b.Backend.Name(), gpu.ErrNotSupported)
	}
	return r.ResetGPU(ctx, index)
}

// Check implements GPUs: the GPU answers a telemetry read, and still has
// the MIG devices the device plugin offers of it.
func (b BackendGPUs) Check(ctx context.Context, index int) error {
	var s gpu.Sample
	if err := b.Backend.Sample(ctx, index, &s); err != nil {
		return err
	}
	var want []gpu.MIGDevice
	for _, d := range b.Devices {
		if d.Index == index {
			want = d.MIGDevices
		}
	}
	if len(want) == 0 {
		return nil
	}
	devs, err := b.Backend.Devices(ctx)
	if err != nil && len(devs) == 0 {
		return fmt.Errorf("listing the GPU's MIG devices: %w", err)
	}
	have := map[string]bool{}
	for _, d := range devs {
		if d.Index == index {
			for _, m := range d.MIGDevices {
				have[m.UUID] = true
			}
		}
	}
	var missing []string
	for _, m := range want {
		if !have[m.UUID] {
			missing = append(missing, m.UUID)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("%d of its %d MIG devices are gone (first %s), as a reset destroys MIG instances: apply the GPU's MIG layout again (nvidia.com/mig.config) and it returns",
			len(missing), len(want), missing[0])
	}
	return nil
}
