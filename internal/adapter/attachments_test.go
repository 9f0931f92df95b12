package adapter

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/gpuplane/gpuplane/api/scheduling/v1alpha1"
	"github.com/gpuplane/gpuplane/internal/scheduler/placement"
	"github.com/gpuplane/gpuplane/internal/testutil/build"
)

// Volumes attached to a node take its attach slots as kube-scheduler's
// NodeVolumeLimits counts them: a VolumeAttachment whose volume no pod
// there uses takes one (even against a pod that would use that volume); one
// whose volume a pod there uses is that pod's slot, counted once; a limit
// of 0 is a limit; what runs over the limit is held all the same, and the
// holding takes no slot of the node's pod limit.
func TestVolumeAttachmentsTakeSlots(t *testing.T) {
	const driver = "ebs.csi.example.com"
	csiPV := func(name, claim string) *corev1.PersistentVolume {
		pv := persistentVolume(name, "csi", "10Gi", nil)
		pv.Spec.CSI = &corev1.CSIPersistentVolumeSource{Driver: driver, VolumeHandle: "vol-" + name}
		if claim != "" {
			pv.Spec.ClaimRef = &corev1.ObjectReference{Namespace: "ml", Name: claim, UID: types.UID("uid-" + claim)}
			pv.Status.Phase = corev1.VolumeBound
		}
		return pv
	}
	bound := func(name, pv string) *corev1.PersistentVolumeClaim {
		c := claim("ml", name, "csi")
		c.Spec.VolumeName = pv
		return c
	}
	attachment := func(pv, node string) *storagev1.VolumeAttachment {
		return &storagev1.VolumeAttachment{ObjectMeta: metav1.ObjectMeta{Name: "va-" + pv + "-" + node},
			Spec: storagev1.VolumeAttachmentSpec{Attacher: driver, NodeName: node, Source: storagev1.VolumeAttachmentSource{PersistentVolumeName: ptr.To(pv)}}}
	}
	limit := func(node string, n int32) *storagev1.CSINode {
		return &storagev1.CSINode{ObjectMeta: metav1.ObjectMeta{Name: node}, Spec: storagev1.CSINodeSpec{Drivers: []storagev1.CSINodeDriver{
			{Name: driver, NodeID: node, Allocatable: &storagev1.VolumeNodeResources{Count: ptr.To(n)}}}}}
	}
	node := func(name, pods string) *corev1.Node {
		return build.Node(name).Resources(rl("cpu", "32", "memory", "64Gi", "pods", pods)).Label(corev1.LabelHostname, name).Obj()
	}
	objs := []runtime.Object{
		storageClass("csi", driver, storagev1.VolumeBindingWaitForFirstConsumer),
		node("a", "2"), node("b", "1"), node("c", "1"),
		limit("a", 2), limit("b", 1), limit("c", 0),
		// a: "left" is attached with no pod using it; "used" is attached
		// and used by the pod running there (its one pod slot).
		csiPV("left", "left"), bound("left", "left"), attachment("left", "a"),
		csiPV("used", "used"), bound("used", "used"), attachment("used", "a"),
		withClaims(newPod("ml", "runs").NodeName("a").Obj(), "used"),
		// b: two volumes attached, one over its limit of 1.
		csiPV("b1", ""), attachment("b1", "b"), csiPV("b2", ""), attachment("b2", "b"),
		csiPV("mine", "mine"), bound("mine", "mine"),
		withClaims(newPod("ml", "wants-left").Obj(), "left"),
		withClaims(newPod("ml", "wants-used").Obj(), "used"),
		withClaims(newPod("ml", "wants-new").Obj(), "mine"),
		newPod("ml", "no-volumes").Obj(),
	}
	v, err := ViewOf(v1alpha1.SchedulerName, objs, time.Unix(200, 0))
	if err != nil {
		t.Fatal(err)
	}
	snap := &v.Snapshot
	st := placement.NewState(snap.Nodes)
	for i := range snap.RunningByNode {
		for k := range snap.RunningByNode[i] {
			a := &snap.RunningByNode[i][k]
			if err := st.Hold(i, &a.Request, a.GPUs); err != nil {
				t.Fatalf("holding %s: %v", a.Pod, err)
			}
		}
	}
	var holdings []string
	for i := range snap.RunningByNode {
		for _, a := range snap.RunningByNode[i] {
			holdings = append(holdings, a.Pod)
			if a.Pod == attachmentPrefix+"a" && (len(a.Request.Volumes.Attach) != 1 || a.Request.Volumes.Attach[0].ID != attachedMark+"vol-left" || !a.Request.NotPod) {
				t.Errorf("a's attachments: %+v, want vol-left alone (vol-used is the running pod's), not a pod", a.Request)
			}
		}
	}
	want := map[string]map[string]bool{
		// a: both slots taken, by left and used; a pod using used
		// attaches nothing new, one using left does (its
		// VolumeAttachment alone counts apart). b: over its limit, and
		// its one pod slot free. c: a limit of 0.
		"ml/wants-left": {"a": false, "b": false, "c": false},
		"ml/wants-used": {"a": true, "b": false, "c": false},
		"ml/wants-new":  {"a": false, "b": false, "c": false},
		"ml/no-volumes": {"a": true, "b": true, "c": true},
	}
	for _, g := range snap.Pending {
		for k := range g.Pods {
			p := &g.Pods[k]
			for i := range st.Nodes {
				name := st.Nodes[i].Node.Name
				if got := st.Why(i, &p.Request) == ""; got != want[p.Name][name] {
					t.Errorf("%s on %s: takes it %v (%q), want %v", p.Name, name, got, st.Why(i, &p.Request), want[p.Name][name])
				}
			}
			delete(want, p.Name)
		}
	}
	if len(want) > 0 {
		t.Errorf("pods not offered to the core: %v (holdings %v, held %v)", want, holdings, v.Held)
	}
}
