package dra

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
)

// ClaimWrite is one claim update a bind carries out before the pod is
// bound: the allocation to write (nil when the claim is allocated already
// and the pod only joins its consumers) and the pod to reserve it for.
type ClaimWrite struct {
	Claim *resourceapi.ResourceClaim
	Alloc *resourceapi.AllocationResult
	Pod   *corev1.Pod
	// ERClaim, when not nil, says the claim serves the pod's extended
	// resources: it is made first if need be, and the pod's status names
	// it.
	ERClaim *ERClaim
}

// ERClaim is what a pod's extended-resource claim adds to its claims: the
// resource, the mappings the pod's status is to name, and the claim as
// made in the API server (nil until it is; an existing one found for the
// pod on start-up). Created is written by the writer's worker and read by
// the worker that undoes a failed bind after it, never concurrently.
type ERClaim struct {
	Resource corev1.ResourceName
	Mappings []corev1.ContainerExtendedResourceRequest
	Created  *resourceapi.ResourceClaim
}

// Writer writes claim allocations and reservations to the API server.
type Writer struct {
	Client kubernetes.Interface
	Log    logr.Logger
}

// claimKey names a claim in messages.
func claimKey(c *resourceapi.ResourceClaim) string { return c.Namespace + "/" + c.Name }

// maxClaimWriteAttempts bounds the retries of one claim update that lost
// a race with another writer (409 Conflict).
const maxClaimWriteAttempts = 4

// Reserve writes a pod's claim allocations and reservations: for a
// claim it allocates, the delete-protection finalizer (as kube-scheduler
// adds it, so the claim is not removed while allocated) and then
// status.allocation with the pod in status.reservedFor; for a claim
// already allocated, the pod added to status.reservedFor. Each update
// names the resourceVersion it read, so a claim changed meanwhile is read
// again, and one allocated by someone else meanwhile fails the write. On
// failure the writes already made are undone and the error returned.
func (w Writer) Reserve(ctx context.Context, writes []ClaimWrite) error {
	for i, cw := range writes {
		if err := w.reserveClaim(ctx, cw); err != nil {
			w.Release(ctx, writes[:i])
			return fmt.Errorf("reserving ResourceClaim %s for pod %s: %w", claimKey(cw.Claim), cw.Pod.Name, err)
		}
	}
	return nil
}

func (w Writer) reserveClaim(ctx context.Context, cw ClaimWrite) error {
	if cw.ERClaim != nil {
		return w.reserveExtended(ctx, cw)
	}
	claims := w.Client.ResourceV1().ResourceClaims(cw.Claim.Namespace)
	cl := cw.Claim
	for attempt := 0; ; attempt++ {
		err := reserveOnce(ctx, w, cl, cw)
		if err == nil || !apierrors.IsConflict(err) || attempt+1 >= maxClaimWriteAttempts {
			return err
		}
		fresh, gerr := claims.Get(ctx, cl.Name, metav1.GetOptions{})
		if gerr != nil {
			return fmt.Errorf("reading the claim again after a conflict: %w", gerr)
		}
		if fresh.UID != cw.Claim.UID {
			return fmt.Errorf("the claim was deleted and made again")
		}
		cl = fresh
	}
}

// reserveOnce is one attempt of reserveClaim on the claim as last read.
func reserveOnce(ctx context.Context, w Writer, cl *resourceapi.ResourceClaim, cw ClaimWrite) error {
	claims := w.Client.ResourceV1().ResourceClaims(cl.Namespace)
	ref := resourceapi.ResourceClaimConsumerReference{Resource: "pods", Name: cw.Pod.Name, UID: cw.Pod.UID}
	if slices.ContainsFunc(cl.Status.ReservedFor, func(r resourceapi.ResourceClaimConsumerReference) bool { return r.UID == ref.UID }) &&
		(cw.Alloc == nil || cl.Status.Allocation != nil) {
		return nil
	}
	status := map[string]any{"reservedFor": append(slices.Clone(cl.Status.ReservedFor), ref)}
	if cw.Alloc != nil {
		if cl.Status.Allocation != nil {
			return fmt.Errorf("the claim was allocated meanwhile by another scheduler")
		}
		if !slices.Contains(cl.Finalizers, resourceapi.Finalizer) {
			patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"resourceVersion": cl.ResourceVersion, "uid": cl.UID,
				"finalizers": append(slices.Clone(cl.Finalizers), resourceapi.Finalizer)}})
			if err != nil {
				return fmt.Errorf("encoding the finalizer: %w", err)
			}
			next, err := claims.Patch(ctx, cl.Name, types.MergePatchType, patch, metav1.PatchOptions{})
			if err != nil {
				return fmt.Errorf("adding the %s finalizer: %w", resourceapi.Finalizer, err)
			}
			cl = next
		}
		status["allocation"] = cw.Alloc
	} else if cl.Status.Allocation == nil {
		return fmt.Errorf("the claim's allocation was removed meanwhile")
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"resourceVersion": cl.ResourceVersion, "uid": cl.UID}, "status": status})
	if err != nil {
		return fmt.Errorf("encoding the allocation: %w", err)
	}
	if _, err := claims.Patch(ctx, cl.Name, types.MergePatchType, patch, metav1.PatchOptions{}, "status"); err != nil {
		return fmt.Errorf("writing status.allocation and status.reservedFor: %w", err)
	}
	return nil
}

// Release undoes Reserve's writes: the pod leaves
// status.reservedFor, and a claim this scheduler allocated for it that no
// other consumer now holds loses the allocation and then the finalizer.
// A failure is logged: the resourceclaim controller deallocates a claim
// that nothing reserves.
func (w Writer) Release(ctx context.Context, writes []ClaimWrite) {
	for _, cw := range writes {
		if err := w.releaseClaim(ctx, cw); err != nil {
			w.Log.Error(err, "releasing a ResourceClaim", "claim", klog.KObj(cw.Claim), "pod", klog.KObj(cw.Pod))
		}
	}
}

func (w Writer) releaseClaim(ctx context.Context, cw ClaimWrite) error {
	if cw.ERClaim != nil {
		// A pod not bound loses its extended-resource claim, as
		// kube-scheduler deletes it.
		return w.deleteERClaim(ctx, cw.ERClaim)
	}
	claims := w.Client.ResourceV1().ResourceClaims(cw.Claim.Namespace)
	for attempt := 0; ; attempt++ {
		cl, err := claims.Get(ctx, cw.Claim.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("reading the claim: %w", err)
		}
		if cl.UID != cw.Claim.UID {
			return nil
		}
		err = releaseOnce(ctx, w, cl, cw)
		if err == nil || !apierrors.IsConflict(err) || attempt+1 >= maxClaimWriteAttempts {
			return err
		}
	}
}

func releaseOnce(ctx context.Context, w Writer, cl *resourceapi.ResourceClaim, cw ClaimWrite) error {
	claims := w.Client.ResourceV1().ResourceClaims(cl.Namespace)
	rest := slices.DeleteFunc(slices.Clone(cl.Status.ReservedFor), func(r resourceapi.ResourceClaimConsumerReference) bool { return r.UID == cw.Pod.UID })
	ours := cw.Alloc != nil && cl.Status.Allocation != nil && apiequality.Semantic.DeepEqual(cl.Status.Allocation.Devices, cw.Alloc.Devices)
	dealloc := ours && len(rest) == 0
	next := cl
	if len(rest) != len(cl.Status.ReservedFor) || dealloc {
		status := map[string]any{"reservedFor": rest}
		if dealloc {
			status["allocation"] = nil
			status["reservedFor"] = nil
		}
		patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"resourceVersion": cl.ResourceVersion}, "status": status})
		if err != nil {
			return fmt.Errorf("encoding the release: %w", err)
		}
		if next, err = claims.Patch(ctx, cl.Name, types.MergePatchType, patch, metav1.PatchOptions{}, "status"); err != nil {
			return fmt.Errorf("clearing status.reservedFor/allocation: %w", err)
		}
	}
	// The finalizer this scheduler added goes once the claim is neither
	// allocated nor reserved (also when the allocation was never written).
	if cw.Alloc == nil || next.Status.Allocation != nil || len(next.Status.ReservedFor) > 0 || !slices.Contains(next.Finalizers, resourceapi.Finalizer) {
		return nil
	}
	fin := slices.DeleteFunc(slices.Clone(next.Finalizers), func(f string) bool { return f == resourceapi.Finalizer })
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"resourceVersion": next.ResourceVersion, "finalizers": fin}})
	if err != nil {
		return fmt.Errorf("encoding the finalizer removal: %w", err)
	}
	if _, err := claims.Patch(ctx, cl.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("removing the %s finalizer: %w", resourceapi.Finalizer, err)
	}
	return nil
}

// reserveExtended makes a pod's extended-resource claim (unless it exists
// already), writes its finalizer, allocation and reservation, and names it
// in the pod's status.extendedResourceClaimStatus; on failure a claim made
// here is deleted again.
func (w Writer) reserveExtended(ctx context.Context, cw ClaimWrite) error {
	erClaim := cw.ERClaim
	if erClaim.Created == nil {
		cl := cw.Claim.DeepCopy()
		cl.Name, cl.UID, cl.Status = "", "", resourceapi.ResourceClaimStatus{}
		made, err := w.Client.ResourceV1().ResourceClaims(cl.Namespace).Create(ctx, cl, metav1.CreateOptions{})
		if err != nil {
			return fmt.Errorf("creating the claim for the pod's extended resources: %w", err)
		}
		erClaim.Created = made
	}
	made := cw
	made.Claim, made.ERClaim = erClaim.Created, nil
	err := w.reserveClaim(ctx, made)
	if err == nil {
		err = w.patchERStatus(ctx, cw.Pod, erClaim)
	}
	if err != nil {
		if derr := w.deleteERClaim(ctx, erClaim); derr != nil {
			w.Log.Error(derr, "deleting a pod's extended-resource claim", "pod", klog.KObj(cw.Pod))
		}
		return err
	}
	return nil
}

// patchERStatus names the claim and the request mappings in the pod's
// status.extendedResourceClaimStatus, for the kubelet.
func (w Writer) patchERStatus(ctx context.Context, pod *corev1.Pod, erClaim *ERClaim) error {
	patch, err := json.Marshal(map[string]any{
		"metadata": map[string]any{"uid": pod.UID},
		"status": map[string]any{"extendedResourceClaimStatus": corev1.PodExtendedResourceClaimStatus{
			RequestMappings: erClaim.Mappings, ResourceClaimName: erClaim.Created.Name}},
	})
	if err != nil {
		return fmt.Errorf("encoding status.extendedResourceClaimStatus: %w", err)
	}
	if _, err := w.Client.CoreV1().Pods(pod.Namespace).Patch(ctx, pod.Name, types.MergePatchType, patch, metav1.PatchOptions{}, "status"); err != nil {
		return fmt.Errorf("writing status.extendedResourceClaimStatus: %w", err)
	}
	return nil
}

// deleteERClaim deletes a pod's extended-resource claim, as
// kube-scheduler does when the pod is not bound: the finalizer first, then
// the claim, by its UID.
func (w Writer) deleteERClaim(ctx context.Context, erClaim *ERClaim) error {
	cl := erClaim.Created
	if cl == nil {
		return nil
	}
	claims := w.Client.ResourceV1().ResourceClaims(cl.Namespace)
	for attempt := 0; ; attempt++ {
		fresh, err := claims.Get(ctx, cl.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) || err == nil && fresh.UID != cl.UID {
			erClaim.Created = nil
			return nil
		}
		if err != nil {
			return fmt.Errorf("reading ResourceClaim %s: %w", claimKey(cl), err)
		}
		if !slices.Contains(fresh.Finalizers, resourceapi.Finalizer) {
			break
		}
		fin := slices.DeleteFunc(slices.Clone(fresh.Finalizers), func(f string) bool { return f == resourceapi.Finalizer })
		patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"resourceVersion": fresh.ResourceVersion, "finalizers": fin}})
		if err != nil {
			return fmt.Errorf("encoding the finalizer removal: %w", err)
		}
		_, err = claims.Patch(ctx, cl.Name, types.MergePatchType, patch, metav1.PatchOptions{})
		if err == nil {
			break
		}
		if !apierrors.IsConflict(err) || attempt+1 >= maxClaimWriteAttempts {
			return fmt.Errorf("removing the %s finalizer from ResourceClaim %s: %w", resourceapi.Finalizer, claimKey(cl), err)
		}
	}
	err := claims.Delete(ctx, cl.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &cl.UID}})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting ResourceClaim %s: %w", claimKey(cl), err)
	}
	erClaim.Created = nil
	return nil
}
