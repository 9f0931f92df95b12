package adapter

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	volumehelpers "k8s.io/component-helpers/storage/volume"
	"k8s.io/klog/v2"

	"github.com/gpuplane/gpuplane/internal/scheduler/model"
)

// Carrying out the core's volume choices (volumes.go): the binder pairs
// each bind's PVs with the pod's claims, writes them before the bind and
// waits until the claims are bound, as kube-scheduler's volume binder
// does in its PreBind.

// volumeWrite is what the binder writes for one claim before it binds the
// pod: the PV the core chose bound to the claim, or, with no PV, the node
// chosen for provisioning.
type volumeWrite struct {
	claim *corev1.PersistentVolumeClaim
	pv    *corev1.PersistentVolume // nil: provision on node
	node  string
}

// volumeWrites pairs a bind's choices (model.Bind.Volumes) with the pod's
// unbound claims. A bind whose choices do not match the claims is an
// error: the core and the adapter disagree on the pod.
func (c *clusterCache) volumeWrites(pv *podVolumes, b *model.Bind) ([]volumeWrite, error) {
	if pv == nil || len(pv.wffc) == 0 {
		return nil, nil
	}
	if len(b.Volumes) != len(pv.wffc) {
		return nil, fmt.Errorf("the scheduling core chose %d volumes for the pod's %d unbound claims", len(b.Volumes), len(pv.wffc))
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]volumeWrite, len(pv.wffc))
	for i := range pv.wffc {
		w := &pv.wffc[i]
		out[i] = volumeWrite{claim: w.claim, node: b.Node}
		if name := b.Volumes[i]; name != "" {
			vol := c.vol.pvs[name]
			if vol == nil {
				return nil, fmt.Errorf("persistentvolume %q chosen for claim %q is gone", name, w.claim.Name)
			}
			if owner, busy := c.vol.inFlight[name]; busy && owner != w.claim.Namespace+"/"+w.claim.Name {
				return nil, fmt.Errorf("persistentvolume %q chosen for claim %q is being bound to %s", name, w.claim.Name, owner)
			}
			out[i].pv = vol
		}
	}
	for _, w := range out {
		if w.pv != nil {
			c.vol.inFlight[w.pv.Name] = w.claim.Namespace + "/" + w.claim.Name
		}
	}
	return out, nil
}

// forgetVolumeWrites gives back the PVs of a bind that failed before its
// writes landed: they may be offered again.
func (c *clusterCache) forgetVolumeWrites(ws []volumeWrite) {
	if len(ws) == 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, w := range ws {
		if w.pv != nil && c.vol.inFlight[w.pv.Name] == w.claim.Namespace+"/"+w.claim.Name {
			delete(c.vol.inFlight, w.pv.Name)
		}
	}
	c.poke()
}

// prepareVolumes pairs each bound pod's unbound claims with the core's
// choice (volumeWrites) and has its task write them before the bind; the
// PVs count as being bound from now on, so no later snapshot offers them,
// until the bind fails. A group one of whose pods cannot be paired is not
// bound this cycle: what was prepared for it is given back.
func (b *binder) prepareVolumes(in *cycleInput, binds []model.Bind, order []string, byGroup map[string][]bindTask, placed map[string]bool) []string {
	if len(in.volumes) == 0 {
		return order
	}
	byPod := make(map[string]*model.Bind, len(binds))
	for i := range binds {
		byPod[binds[i].Pod] = &binds[i]
	}
	out := order[:0]
	for _, name := range order {
		tasks := byGroup[name]
		var err error
		for i := range tasks {
			t := &tasks[i]
			key := podKey(t.pod)
			x := byPod[key]
			if x == nil {
				continue
			}
			if t.volumes, err = b.cache.volumeWrites(in.volumes[key], x); err != nil {
				b.status.event(t.pod, corev1.EventTypeWarning, "FailedBinding", fmt.Sprintf("binding its volumes: %v", err))
				for _, done := range tasks[:i] {
					b.cache.forgetVolumeWrites(done.volumes)
				}
				break
			}
		}
		if err != nil {
			for _, t := range tasks {
				b.cache.forgetClaims(podKey(t.pod), t.claims)
			}
			delete(placed, name)
			continue
		}
		for i := range tasks {
			if ws := tasks[i].volumes; len(ws) > 0 {
				tasks[i].awaitVolumes = func(ctx context.Context) error { return b.cache.awaitVolumes(ctx, ws, volumeBindTimeout) }
				done := tasks[i].done
				tasks[i].done = func(err error) {
					if err != nil {
						b.cache.forgetVolumeWrites(ws)
					}
					done(err)
				}
			}
		}
		out = append(out, name)
	}
	return out
}

// writeVolumes writes a pod's volume choices, each on the version of the
// object the choice was made on, so that a PV another scheduler or a
// person bound meanwhile is never taken: binds the PV to the claim as
// kube-scheduler's volume binder does (the claim reference, and the
// annotation that says a controller bound it), leaving the claim to the
// PV controller, or asks for provisioning on the node through the
// claim's selected-node annotation.
func (w *apiWriter) writeVolumes(ctx context.Context, ws []volumeWrite) error {
	for _, v := range ws {
		claim := v.claim
		if v.pv == nil {
			if claim.Annotations[volumehelpers.AnnSelectedNode] == v.node {
				continue // asked for already
			}
			patch, err := json.Marshal(map[string]any{"metadata": map[string]any{
				"resourceVersion": claim.ResourceVersion,
				"annotations":     map[string]string{volumehelpers.AnnSelectedNode: v.node},
			}})
			if err != nil {
				return fmt.Errorf("encoding the selected node of claim %s/%s: %w", claim.Namespace, claim.Name, err)
			}
			if _, err := w.client.CoreV1().PersistentVolumeClaims(claim.Namespace).Patch(ctx, claim.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
				return fmt.Errorf("asking for a volume for claim %s/%s on node %s: %w", claim.Namespace, claim.Name, v.node, err)
			}
			continue
		}
		if volumehelpers.IsVolumeBoundToClaim(v.pv, claim) && v.pv.Spec.ClaimRef.UID == claim.UID {
			continue // bound to it already; the PV controller finishes the claim
		}
		patch, err := json.Marshal(map[string]any{
			"metadata": map[string]any{
				"resourceVersion": v.pv.ResourceVersion,
				"annotations":     map[string]string{volumehelpers.AnnBoundByController: "yes"},
			},
			"spec": map[string]any{"claimRef": map[string]any{
				"kind": "PersistentVolumeClaim", "apiVersion": "v1", "namespace": claim.Namespace, "name": claim.Name,
				"uid": claim.UID, "resourceVersion": claim.ResourceVersion,
			}},
		})
		if err != nil {
			return fmt.Errorf("encoding the binding of persistentvolume %s: %w", v.pv.Name, err)
		}
		if _, err := w.client.CoreV1().PersistentVolumes().Patch(ctx, v.pv.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			return fmt.Errorf("binding persistentvolume %s to claim %s/%s: %w", v.pv.Name, claim.Namespace, claim.Name, err)
		}
		w.log.V(4).Info("bound a volume for a pod", "pv", v.pv.Name, "claim", klog.KObj(claim), "node", v.node)
	}
	return nil
}

// volumeBindTimeout bounds how long a bind waits for its claims to be
// bound once it wrote them: kube-scheduler's default (bindTimeoutSeconds).
const volumeBindTimeout = 10 * time.Minute

// volumePoll is how often a waiting bind looks at the cache again.
const volumePoll = 100 * time.Millisecond

// awaitVolumes waits, reading the informers' claims, until the PV
// controller (and a provisioner) bound every claim written, as
// kube-scheduler binds a pod only then: a pod is never bound to a node
// whose provisioning failed. It fails when a claim is bound to another PV
// than the one chosen, is gone, when the provisioner gave the node up
// (it takes the selected-node annotation away), or after timeout.
func (c *clusterCache) awaitVolumes(ctx context.Context, ws []volumeWrite, timeout time.Duration) error {
	err := wait.PollUntilContextTimeout(ctx, volumePoll, timeout, true, func(context.Context) (bool, error) {
		return c.volumesBound(ws)
	})
	if err != nil {
		return fmt.Errorf("waiting for the pod's claims to be bound: %w", err)
	}
	return nil
}

// volumesBound reports whether every claim of ws is bound, or why it
// never will be as written.
func (c *clusterCache) volumesBound(ws []volumeWrite) (bool, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, w := range ws {
		key := w.claim.Namespace + "/" + w.claim.Name
		cl := c.vol.claims[key]
		switch {
		case cl == nil || cl.UID != w.claim.UID:
			return false, fmt.Errorf("claim %s is gone", key)
		case cl.Spec.VolumeName != "" && w.pv != nil && cl.Spec.VolumeName != w.pv.Name:
			return false, fmt.Errorf("claim %s is bound to persistentvolume %s, not to %s as chosen", key, cl.Spec.VolumeName, w.pv.Name)
		case cl.Spec.VolumeName != "":
			if cl.Status.Phase != corev1.ClaimBound {
				return false, nil
			}
		case w.pv == nil && cl.ResourceVersion != w.claim.ResourceVersion && cl.Annotations[volumehelpers.AnnSelectedNode] != w.node:
			return false, fmt.Errorf("provisioning a volume for claim %s on node %s failed: the provisioner gave the node up", key, w.node)
		default:
			return false, nil
		}
	}
	return true, nil
}
