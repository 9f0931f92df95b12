package scheduler_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/gpuplane/gpuplane/internal/adapter"
	"github.com/gpuplane/gpuplane/test/integration/framework"
)

// Volumes, with kube-controller-manager's PV controller binding the
// claims: the cases kube-scheduler's VolumeBinding, VolumeZone and
// NodeVolumeLimits decide.

// storageClass creates a StorageClass named for the test and deletes it
// when the test ends; it returns the name.
func (c *cluster) storageClass(name, provisioner string, mode storagev1.VolumeBindingMode) string {
	c.t.Helper()
	name = name + "-" + c.ns
	sc := &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Provisioner: provisioner, VolumeBindingMode: &mode}
	if _, err := env.Client.StorageV1().StorageClasses().Create(c.t.Context(), sc, metav1.CreateOptions{}); err != nil {
		c.t.Fatalf("creating storage class %s: %v", name, err)
	}
	c.t.Cleanup(func() {
		_ = env.Client.StorageV1().StorageClasses().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	return name
}

func (c *cluster) persistentVolume(pv *corev1.PersistentVolume) {
	c.t.Helper()
	pv.Name = pv.Name + "-" + c.ns
	if pv.Spec.Capacity == nil {
		pv.Spec.Capacity = corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}
	}
	if pv.Spec.AccessModes == nil {
		pv.Spec.AccessModes = []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}
	}
	if _, err := env.Client.CoreV1().PersistentVolumes().Create(c.t.Context(), pv, metav1.CreateOptions{}); err != nil {
		c.t.Fatalf("creating persistent volume %s: %v", pv.Name, err)
	}
	name := pv.Name
	c.t.Cleanup(func() {
		_ = env.Client.CoreV1().PersistentVolumes().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
}

func (c *cluster) claim(name, class, volume string) {
	c.t.Helper()
	pvc := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: c.ns, Name: name},
		Spec: corev1.PersistentVolumeClaimSpec{StorageClassName: &class, VolumeName: volume,
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}}}
	if _, err := env.Client.CoreV1().PersistentVolumeClaims(c.ns).Create(c.t.Context(), pvc, metav1.CreateOptions{}); err != nil {
		c.t.Fatalf("creating claim %s: %v", name, err)
	}
}

// volumePod is a pod of the test's nodes mounting the claims.
func (c *cluster) volumePod(name string, claims ...string) *corev1.Pod {
	p := c.pod(name).NodeSelector("test-ns", c.ns).Obj()
	for _, cl := range claims {
		p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: cl, VolumeSource: corev1.VolumeSource{
			PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: cl}}})
	}
	return p
}

func (c *cluster) waitPodOn(name, node string) {
	c.t.Helper()
	framework.Eventually(c.t, 60*time.Second, "pod "+name+" bound to "+node, func(ctx context.Context) (bool, error) {
		p, err := env.Client.CoreV1().Pods(c.ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		if p.Spec.NodeName != "" && p.Spec.NodeName != node {
			c.t.Fatalf("pod %s bound to %s, want %s", name, p.Spec.NodeName, node)
		}
		return p.Spec.NodeName == node, fmt.Errorf("node %q", p.Spec.NodeName)
	})
}

func (c *cluster) waitClaimBound(name, volume string) {
	c.t.Helper()
	framework.Eventually(c.t, 60*time.Second, "claim "+name+" bound to "+volume, func(ctx context.Context) (bool, error) {
		pvc, err := env.Client.CoreV1().PersistentVolumeClaims(c.ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		return pvc.Status.Phase == corev1.ClaimBound && pvc.Spec.VolumeName == volume, fmt.Errorf("phase %s, volume %q", pvc.Status.Phase, pvc.Spec.VolumeName)
	})
}

// TestVolumeWaitForFirstConsumerLocalPV: a claim of a WaitForFirstConsumer
// class whose one PV is a local volume of node B takes its pod to B, and
// the PV controller binds the claim to that PV; a second pod whose claim
// could only use the same PV waits, saying so.
func TestVolumeWaitForFirstConsumerLocalPV(t *testing.T) {
	nodes := gpuNodes(2, "wffc")
	nodeB := nodes[1].Obj().Name
	c := newCluster(t, nodes...)
	class := c.storageClass("local", "kubernetes.io/no-provisioner", storagev1.VolumeBindingWaitForFirstConsumer)
	c.persistentVolume(&corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: "local-b"}, Spec: corev1.PersistentVolumeSpec{
		StorageClassName:       class,
		PersistentVolumeSource: corev1.PersistentVolumeSource{Local: &corev1.LocalVolumeSource{Path: "/mnt/disks/ssd1"}},
		NodeAffinity: &corev1.VolumeNodeAffinity{Required: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
			MatchExpressions: []corev1.NodeSelectorRequirement{{Key: corev1.LabelHostname, Operator: corev1.NodeSelectorOpIn, Values: []string{nodeB}}}}}}},
	}})
	c.claim("data", class, "")
	c.claim("data2", class, "")
	c.run(adapter.Config{})
	c.createPod(c.volumePod("reader", "data"))
	c.createPod(c.volumePod("second", "data2"))

	// One of the two gets the PV; which one is the core's choice.
	var winner, loser string
	framework.Eventually(t, 60*time.Second, "one pod bound", func(ctx context.Context) (bool, error) {
		pods, err := c.pods(ctx, "")
		if err != nil {
			return false, err
		}
		for name, p := range pods {
			if p.Spec.NodeName != "" {
				winner = name
			}
		}
		return winner != "", nil
	})
	loser = map[string]string{"reader": "second", "second": "reader"}[winner]
	claims := map[string]string{"reader": "data", "second": "data2"}
	c.waitPodOn(winner, nodeB)
	// As kube-scheduler does, the pod is bound once its claim is.
	pvc, err := env.Client.CoreV1().PersistentVolumeClaims(c.ns).Get(t.Context(), claims[winner], metav1.GetOptions{})
	if err != nil || pvc.Status.Phase != corev1.ClaimBound || pvc.Spec.VolumeName != "local-b-"+c.ns {
		t.Fatalf("claim %s when its pod was bound: %v, %v, volume %q; want Bound to local-b", claims[winner], err, pvc.Status.Phase, pvc.Spec.VolumeName)
	}
	c.waitCondition(loser, corev1.PodReasonUnschedulable, "no available persistent volume to bind", 30*time.Second)
	if p, err := env.Client.CoreV1().Pods(c.ns).Get(t.Context(), loser, metav1.GetOptions{}); err != nil || p.Spec.NodeName != "" {
		t.Fatalf("pod %s = %v, %v: bound without a volume", loser, p.Spec.NodeName, err)
	}
}

// TestVolumeZone: a pod whose claim is bound to a PV of one zone lands in
// that zone; a claim of an Immediate class nothing binds keeps its pod
// waiting with kube-scheduler's reason.
func TestVolumeZone(t *testing.T) {
	nodes := gpuNodes(2, "zone")
	nodes[0].Label(corev1.LabelTopologyZone, "zone-a")
	nodes[1].Label(corev1.LabelTopologyZone, "zone-b")
	nodeB := nodes[1].Obj().Name
	c := newCluster(t, nodes...)
	c.persistentVolume(&corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: "zonal", Labels: map[string]string{corev1.LabelTopologyZone: "zone-b"}},
		Spec: corev1.PersistentVolumeSpec{PersistentVolumeSource: corev1.PersistentVolumeSource{
			CSI: &corev1.CSIPersistentVolumeSource{Driver: "disk.csi.example.com", VolumeHandle: "zonal-" + c.ns}}}})
	c.claim("zonal", "", "zonal-"+c.ns)
	c.waitClaimBound("zonal", "zonal-"+c.ns)
	now := c.storageClass("now", "example.com/nothing-provisions", storagev1.VolumeBindingImmediate)
	c.claim("later", now, "")
	c.run(adapter.Config{})
	c.createPod(c.volumePod("zoned", "zonal"))
	c.createPod(c.volumePod("immediate", "later"))
	c.waitPodOn("zoned", nodeB)
	c.waitCondition("immediate", corev1.PodReasonUnschedulable, "pod has unbound immediate PersistentVolumeClaims", 30*time.Second)
}

// TestVolumeAttachLimit: with a CSINode limit of one volume of a driver on
// each of two nodes, two pods with distinct volumes of that driver go to
// different nodes, and a third waits for the limit.
func TestVolumeAttachLimit(t *testing.T) {
	nodes := gpuNodes(2, "attach")
	c := newCluster(t, nodes...)
	const driver = "disk.csi.example.com"
	for _, n := range nodes {
		name := n.Obj().Name
		cn := &storagev1.CSINode{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: storagev1.CSINodeSpec{Drivers: []storagev1.CSINodeDriver{
			{Name: driver, NodeID: name, Allocatable: &storagev1.VolumeNodeResources{Count: ptr.To[int32](1)}}}}}
		if _, err := env.Client.StorageV1().CSINodes().Create(t.Context(), cn, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = env.Client.StorageV1().CSINodes().Delete(context.Background(), name, metav1.DeleteOptions{})
		})
	}
	for i := range 3 {
		pv := fmt.Sprintf("disk%d", i)
		c.persistentVolume(&corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: pv}, Spec: corev1.PersistentVolumeSpec{
			PersistentVolumeSource: corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{Driver: driver, VolumeHandle: pv + "-" + c.ns}}}})
		c.claim(pv, "", pv+"-"+c.ns)
		c.waitClaimBound(pv, pv+"-"+c.ns)
	}
	c.run(adapter.Config{})
	c.createPod(c.volumePod("first", "disk0"))
	c.createPod(c.volumePod("second", "disk1"))
	c.waitBound("", 2, 60*time.Second)
	pods, err := c.pods(t.Context(), "")
	if err != nil {
		t.Fatal(err)
	}
	if a, b := pods["first"].Spec.NodeName, pods["second"].Spec.NodeName; a == b {
		t.Fatalf("both pods went to %s, whose CSINode allows one volume of %s", a, driver)
	}
	c.createPod(c.volumePod("third", "disk2"))
	c.waitCondition("third", corev1.PodReasonUnschedulable, "node's volume attach limit reached", 30*time.Second)
}
