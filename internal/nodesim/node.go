package nodesim

import (
	"context"
	"fmt"
	"runtime"
	"sort"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"

	"github.com/gpuplane/gpuplane/internal/localcluster"
)

// kubeletVersion is what the simulated node reports as its kubelet.
const kubeletVersion = "v1.36.3-gpuplane-sim"

// statusResync is how often the Node's status is rewritten even when
// nothing changed, refreshing the Ready condition's heartbeat.
const statusResync = time.Minute

// ensureNode creates the Node, or adopts one of the same name left by an
// earlier run, refusing a Node kwok manages.
func (s *Simulator) ensureNode(ctx context.Context) error {
	nodes := s.client.CoreV1().Nodes()
	existing, err := nodes.Get(ctx, s.cfg.NodeName, metav1.GetOptions{})
	switch {
	case err == nil:
		if _, kwok := existing.Annotations[localcluster.KwokNodeAnnotation]; kwok {
			return fmt.Errorf("node %s exists and is managed by kwok; pick another node name", s.cfg.NodeName)
		}
		existing.Labels = s.labels(existing.Labels)
		if _, err := nodes.Update(ctx, existing, metav1.UpdateOptions{}); err != nil {
			return fmt.Errorf("adopting node %s: %w", s.cfg.NodeName, err)
		}
	case apierrors.IsNotFound(err):
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: s.cfg.NodeName, Labels: s.labels(nil)}}
		if _, err := nodes.Create(ctx, node, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("creating node %s: %w", s.cfg.NodeName, err)
		}
	default:
		return fmt.Errorf("reading node %s: %w", s.cfg.NodeName, err)
	}
	if err := s.writeNodeStatus(ctx); err != nil {
		return err
	}
	return s.renewLease(ctx)
}

func (s *Simulator) labels(base map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range base {
		out[k] = v
	}
	out[corev1.LabelHostname] = s.cfg.NodeName
	out[corev1.LabelOSStable] = "linux"
	out[corev1.LabelArchStable] = runtime.GOARCH
	out[SimulatedNodeLabel] = "true"
	for k, v := range s.cfg.Labels {
		out[k] = v
	}
	return out
}

// nodeChanged asks the status loop to rewrite the Node's status soon.
func (s *Simulator) nodeChanged() {
	select {
	case s.nodeDirty <- struct{}{}:
	default:
	}
}

// runNodeStatus rewrites the Node's status whenever devices change, and
// every statusResync.
func (s *Simulator) runNodeStatus() {
	ticker := time.NewTicker(statusResync)
	defer ticker.Stop()
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-s.nodeDirty:
		case <-ticker.C:
		}
		if err := s.writeNodeStatus(s.ctx); err != nil && s.ctx.Err() == nil {
			s.log.Warn("updating the node status; retrying", "err", err)
			// Try again on the next tick or change; keep the signal.
			time.AfterFunc(time.Second, s.nodeChanged)
		}
	}
}

// deviceCounts returns, per resource, all devices and healthy devices.
func (s *Simulator) deviceCounts() (capacity, allocatable corev1.ResourceList) {
	s.mu.Lock()
	defer s.mu.Unlock()
	capacity, allocatable = corev1.ResourceList{}, corev1.ResourceList{}
	for name, p := range s.plugins {
		capacity[corev1.ResourceName(name)] = *resource.NewQuantity(int64(len(p.devices)), resource.DecimalSI)
		allocatable[corev1.ResourceName(name)] = *resource.NewQuantity(int64(len(p.healthy())), resource.DecimalSI)
	}
	return capacity, allocatable
}

// writeNodeStatus writes capacity, allocatable, conditions, addresses and
// node info.
func (s *Simulator) writeNodeStatus(ctx context.Context) error {
	devCap, devAlloc := s.deviceCounts()
	err := retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		node, err := s.client.CoreV1().Nodes().Get(ctx, s.cfg.NodeName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		base := corev1.ResourceList{
			corev1.ResourceCPU:              resource.MustParse(s.cfg.CPU),
			corev1.ResourceMemory:           resource.MustParse(s.cfg.Memory),
			corev1.ResourcePods:             resource.MustParse(s.cfg.Pods),
			corev1.ResourceEphemeralStorage: resource.MustParse("1Ti"),
		}
		capacity, allocatable := base.DeepCopy(), base.DeepCopy()
		// Resources the node had but no plugin serves now stay at zero,
		// as the kubelet keeps them until a restart.
		for name := range node.Status.Capacity {
			if _, builtin := base[name]; !builtin {
				capacity[name] = *resource.NewQuantity(0, resource.DecimalSI)
				allocatable[name] = *resource.NewQuantity(0, resource.DecimalSI)
			}
		}
		for name, q := range devCap {
			capacity[name] = q
		}
		for name, q := range devAlloc {
			allocatable[name] = q
		}
		node.Status.Capacity = capacity
		node.Status.Allocatable = allocatable
		node.Status.Conditions = s.conditions(node.Status.Conditions)
		node.Status.Addresses = []corev1.NodeAddress{
			{Type: corev1.NodeInternalIP, Address: s.nodeIP},
			{Type: corev1.NodeHostName, Address: s.cfg.NodeName},
		}
		node.Status.NodeInfo = corev1.NodeSystemInfo{
			MachineID: string(node.UID), SystemUUID: string(node.UID), BootID: string(node.UID),
			KernelVersion: "6.1.0-gpuplane-sim", OSImage: "gpuplane simulated node",
			ContainerRuntimeVersion: "gpuplane-sim://1.0", KubeletVersion: kubeletVersion,
			OperatingSystem: "linux", Architecture: runtime.GOARCH,
		}
		_, err = s.client.CoreV1().Nodes().UpdateStatus(ctx, node, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		return fmt.Errorf("updating the status of node %s: %w", s.cfg.NodeName, err)
	}
	return nil
}

// conditions returns the node's conditions with a fresh heartbeat: Ready,
// and no memory, disk or PID pressure.
func (s *Simulator) conditions(old []corev1.NodeCondition) []corev1.NodeCondition {
	now := metav1.Now()
	want := []struct {
		t       corev1.NodeConditionType
		status  corev1.ConditionStatus
		reason  string
		message string
	}{
		{corev1.NodeMemoryPressure, corev1.ConditionFalse, "KubeletHasSufficientMemory", "kubelet has sufficient memory available"},
		{corev1.NodeDiskPressure, corev1.ConditionFalse, "KubeletHasNoDiskPressure", "kubelet has no disk pressure"},
		{corev1.NodePIDPressure, corev1.ConditionFalse, "KubeletHasSufficientPID", "kubelet has sufficient PID available"},
		{corev1.NodeReady, corev1.ConditionTrue, "KubeletReady", "gpuplane simulated kubelet is posting ready status"},
	}
	prev := map[corev1.NodeConditionType]corev1.NodeCondition{}
	for _, c := range old {
		prev[c.Type] = c
	}
	var out []corev1.NodeCondition
	for _, w := range want {
		c := corev1.NodeCondition{Type: w.t, Status: w.status, Reason: w.reason, Message: w.message, LastHeartbeatTime: now, LastTransitionTime: now}
		if p, ok := prev[w.t]; ok && p.Status == w.status {
			c.LastTransitionTime = p.LastTransitionTime
		}
		out = append(out, c)
	}
	// Conditions others set (an agent's GPU health condition) are kept.
	var others []corev1.NodeCondition
	for _, c := range old {
		known := false
		for _, w := range want {
			known = known || c.Type == w.t
		}
		if !known {
			others = append(others, c)
		}
	}
	sort.Slice(others, func(i, j int) bool { return others[i].Type < others[j].Type })
	return append(out, others...)
}

// runLease renews the node's Lease every quarter of its duration, which is
// what keeps the node-lifecycle controller from marking the node NotReady.
func (s *Simulator) runLease() {
	ticker := time.NewTicker(s.cfg.LeaseDuration / 4)
	defer ticker.Stop()
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-ticker.C:
		}
		if err := s.renewLease(s.ctx); err != nil && s.ctx.Err() == nil {
			s.log.Warn("renewing the node lease", "err", err)
		}
	}
}

func (s *Simulator) renewLease(ctx context.Context) error {
	leases := s.client.CoordinationV1().Leases(corev1.NamespaceNodeLease)
	now := metav1.NewMicroTime(time.Now())
	lease, err := leases.Get(ctx, s.cfg.NodeName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		node, err := s.client.CoreV1().Nodes().Get(ctx, s.cfg.NodeName, metav1.GetOptions{})
		if err != nil {
			return fmt.Errorf("reading node %s for its lease: %w", s.cfg.NodeName, err)
		}
		lease = &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{
				Name: s.cfg.NodeName, Namespace: corev1.NamespaceNodeLease,
				OwnerReferences: []metav1.OwnerReference{{
					APIVersion: "v1", Kind: "Node", Name: node.Name, UID: types.UID(node.UID),
				}},
			},
			Spec: coordinationv1.LeaseSpec{
				HolderIdentity:       ptr.To(s.cfg.NodeName),
				LeaseDurationSeconds: ptr.To(int32(s.cfg.LeaseDuration / time.Second)),
				RenewTime:            &now,
			},
		}
		if _, err := leases.Create(ctx, lease, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating the lease of node %s: %w", s.cfg.NodeName, err)
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("reading the lease of node %s: %w", s.cfg.NodeName, err)
	}
	lease.Spec.RenewTime = &now
	lease.Spec.HolderIdentity = ptr.To(s.cfg.NodeName)
	if _, err := leases.Update(ctx, lease, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("renewing the lease of node %s: %w", s.cfg.NodeName, err)
	}
	return nil
}

// deleteNode removes the Node and its Lease.
func (s *Simulator) deleteNode(ctx context.Context) error {
	err := s.client.CoreV1().Nodes().Delete(ctx, s.cfg.NodeName, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting node %s: %w", s.cfg.NodeName, err)
	}
	err = s.client.CoordinationV1().Leases(corev1.NamespaceNodeLease).Delete(ctx, s.cfg.NodeName, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting the lease of node %s: %w", s.cfg.NodeName, err)
	}
	return nil
}
