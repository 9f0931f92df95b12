package adapter

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"

	"github.com/gpuplane/gpuplane/api/scheduling/v1alpha1"
	"github.com/gpuplane/gpuplane/internal/scheduler/model"
	"github.com/gpuplane/gpuplane/internal/testutil/build"
)

func storageClass(name, provisioner string, mode storagev1.VolumeBindingMode) *storagev1.StorageClass {
	return &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Provisioner: provisioner, VolumeBindingMode: &mode}
}

func claim(ns, name, class string, modes ...corev1.PersistentVolumeAccessMode) *corev1.PersistentVolumeClaim {
	if len(modes) == 0 {
		modes = []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}
	}
	return &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID("uid-" + name), ResourceVersion: "1"},
		Spec: corev1.PersistentVolumeClaimSpec{StorageClassName: &class, AccessModes: modes,
			Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}}}
}

func persistentVolume(name, class, size string, nodeLabel map[string]string) *corev1.PersistentVolume {
	pv := &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: name, ResourceVersion: "1"},
		Spec: corev1.PersistentVolumeSpec{StorageClassName: class, AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce, corev1.ReadWriteOncePod},
			Capacity: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse(size)}},
		Status: corev1.PersistentVolumeStatus{Phase: corev1.VolumeAvailable}}
	for k, v := range nodeLabel {
		pv.Spec.NodeAffinity = &corev1.VolumeNodeAffinity{Required: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
			MatchExpressions: []corev1.NodeSelectorRequirement{{Key: k, Operator: corev1.NodeSelectorOpIn, Values: []string{v}}}}}}}
	}
	return pv
}

func withClaims(p *corev1.Pod, claims ...string) *corev1.Pod {
	for _, c := range claims {
		p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: "v-" + c, VolumeSource: corev1.VolumeSource{
			PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: c}}})
	}
	return p
}

// selected returns the names of the snapshot's nodes a request selects.
func selected(in *cycleInput, req *model.Request) []string {
	var out []string
	for _, n := range in.snap.Nodes {
		ok := true
		for k, v := range req.NodeSelector {
			if n.Labels[k] != v {
				ok = false
			}
		}
		if ok {
			out = append(out, n.Name)
		}
	}
	return out
}

// TestVolumesInSnapshot checks what pods' volumes become: the nodes their
// bound PVs and unbound WaitForFirstConsumer claims allow, what the core
// counts, and which pods wait with which reason.
func TestVolumesInSnapshot(t *testing.T) {
	c := newClusterCache(v1alpha1.SchedulerName)
	for _, n := range []struct{ name, zone string }{{"a", "z1"}, {"b", "z1"}, {"c", "z2"}} {
		c.upsertNode(build.Node(n.name).Resources(rl("cpu", "32", "memory", "64Gi")).Label(corev1.LabelHostname, n.name).Label(corev1.LabelTopologyZone, n.zone).Obj())
	}
	c.upsertStorageClass(storageClass("local", noProvisioner, storagev1.VolumeBindingWaitForFirstConsumer))
	c.upsertStorageClass(storageClass("csi", "ebs.csi.example.com", storagev1.VolumeBindingWaitForFirstConsumer))
	c.upsertStorageClass(storageClass("now", "ebs.csi.example.com", storagev1.VolumeBindingImmediate))
	c.upsertCSINode(&storagev1.CSINode{ObjectMeta: metav1.ObjectMeta{Name: "c"}, Spec: storagev1.CSINodeSpec{Drivers: []storagev1.CSINodeDriver{
		{Name: "ebs.csi.example.com", NodeID: "c", Allocatable: &storagev1.VolumeNodeResources{Count: ptr.To[int32](1)}}}}})

	// Two local PVs on b, the smaller first; a bigger one on a.
	c.upsertPV(persistentVolume("b-small", "local", "2Gi", map[string]string{corev1.LabelHostname: "b"}))
	c.upsertPV(persistentVolume("b-big", "local", "5Gi", map[string]string{corev1.LabelHostname: "b"}))
	c.upsertPV(persistentVolume("a-tiny", "local", "500Mi", map[string]string{corev1.LabelHostname: "a"}))
	c.upsertPVC(claim("ml", "data", "local"))
	// A claim bound to a PV of zone z2.
	zonal := persistentVolume("zonal", "csi", "10Gi", nil)
	zonal.Labels = map[string]string{corev1.LabelTopologyZone: "z2"}
	zonal.Spec.CSI = &corev1.CSIPersistentVolumeSource{Driver: "ebs.csi.example.com", VolumeHandle: "vol-1"}
	zonal.Spec.ClaimRef = &corev1.ObjectReference{Namespace: "ml", Name: "zonal", UID: "uid-zonal"}
	c.upsertPV(zonal)
	zc := claim("ml", "zonal", "csi")
	zc.Spec.VolumeName = "zonal"
	c.upsertPVC(zc)
	c.upsertPVC(claim("ml", "later", "now"))
	c.upsertPVC(claim("ml", "solo", "csi", corev1.ReadWriteOncePod))
	c.upsertPVC(claim("ml", "dyn", "csi"))
	zoned := storageClass("zoned", "ebs.csi.example.com", storagev1.VolumeBindingWaitForFirstConsumer)
	zoned.AllowedTopologies = []corev1.TopologySelectorTerm{{MatchLabelExpressions: []corev1.TopologySelectorLabelRequirement{{Key: corev1.LabelTopologyZone, Values: []string{"z1"}}}}}
	c.upsertStorageClass(zoned)
	c.upsertPVC(claim("ml", "in-z1", "zoned"))
	c.upsertPod(withClaims(newPod("ml", "topology").Obj(), "in-z1"))

	c.upsertPod(withClaims(newPod("ml", "wffc").Obj(), "data"))
	c.upsertPod(withClaims(newPod("ml", "zoned").Obj(), "zonal"))
	c.upsertPod(withClaims(newPod("ml", "immediate").Obj(), "later"))
	c.upsertPod(withClaims(newPod("ml", "missing").Obj(), "nothing"))
	c.upsertPod(withClaims(newPod("ml", "second-user").Obj(), "solo"))
	c.upsertPod(withClaims(newPod("ml", "provisioned").Obj(), "dyn"))
	user := withClaims(newPod("ml", "first-user").NodeName("a").Obj(), "solo")
	c.upsertPod(user)
	// A pod on c that attaches the zonal volume counts against c's limit.
	c.upsertPod(withClaims(newPod("ml", "attached").NodeName("c").Obj(), "zonal"))

	b := newBuilder(v1alpha1.SchedulerName, -1, logr.Discard())
	in := c.snapshot(b, newRefusals(), time.Unix(200, 0))
	pods := map[string]*model.Request{}
	for i := range in.snap.Pending {
		for k := range in.snap.Pending[i].Pods {
			pods[in.snap.Pending[i].Pods[k].Name] = &in.snap.Pending[i].Pods[k].Request
		}
	}

	t.Run("an unbound WaitForFirstConsumer claim goes where its PVs are, best first", func(t *testing.T) {
		req := pods["ml/wffc"]
		if req == nil {
			t.Fatal("the pod is not offered to the core")
		}
		if got := selected(in, req); !slices.Equal(got, []string{"b"}) {
			t.Fatalf("nodes = %v, want b: the PV on a is too small", got)
		}
		want := &model.PodVolumes{Claims: []model.ClaimNeed{{Claim: "ml/data", PVs: []model.PV{{Name: "b-small", Nodes: []string{"b"}}, {Name: "b-big", Nodes: []string{"b"}}}}}}
		if !equalVolumes(req.Volumes, want) {
			t.Fatalf("volumes = %+v, want %+v", req.Volumes, want)
		}
	})
	t.Run("a claim bound to a zonal PV keeps its pod in the zone", func(t *testing.T) {
		req := pods["ml/zoned"]
		if got := selected(in, req); !slices.Equal(got, []string{"c"}) {
			t.Fatalf("nodes = %v, want c, the one node of zone z2", got)
		}
		if req.Volumes == nil || !slices.Equal(req.Volumes.Attach, []model.Attachment{{Driver: "ebs.csi.example.com", ID: "vol-1"}}) {
			t.Fatalf("volumes = %+v, want the zonal volume attached", req.Volumes)
		}
	})
	t.Run("a claim of a provisioning class is provisioned anywhere", func(t *testing.T) {
		req := pods["ml/provisioned"]
		if got := selected(in, req); len(got) != 3 {
			t.Fatalf("nodes = %v, want all three", got)
		}
		if req.Volumes == nil || len(req.Volumes.Claims) != 1 || !req.Volumes.Claims[0].Provision || req.Volumes.Attach[0].ID != "claim:uid-dyn" {
			t.Fatalf("volumes = %+v, want a claim to provision counted against the driver's limit", req.Volumes)
		}
	})
	t.Run("a class's allowed topologies bound where it provisions", func(t *testing.T) {
		req := pods["ml/topology"]
		if got := selected(in, req); !slices.Equal(got, []string{"a", "b"}) {
			t.Fatalf("nodes = %v, want a and b, the nodes of zone z1", got)
		}
		if req.Volumes == nil || len(req.Volumes.Claims) != 1 || !slices.Equal(req.Volumes.Claims[0].ProvisionNodes, []string{"a", "b"}) {
			t.Fatalf("volumes = %+v, want provisioning on a and b", req.Volumes)
		}
	})
	for _, tc := range []struct{ group, want string }{
		{"pod/ml/immediate", "pod has unbound immediate PersistentVolumeClaims"},
		{"pod/ml/missing", `persistentvolumeclaim "nothing" not found`},
		{"pod/ml/second-user", "ReadWriteOncePod access mode and pod ml/first-user uses it"},
	} {
		t.Run(tc.group+" waits", func(t *testing.T) {
			g := in.groups[tc.group]
			if g == nil || g.held == nil || g.held.Reason != corev1.PodReasonUnschedulable || !strings.Contains(g.held.Msg, tc.want) {
				t.Fatalf("held = %+v, want Unschedulable saying %q", g.held, tc.want)
			}
		})
	}
	t.Run("a node's CSI attach limit and what its pods attach", func(t *testing.T) {
		n := in.snap.Nodes[2]
		if n.Name != "c" || n.Volumes == nil || !slices.Equal(n.Volumes.Limits, []model.AttachLimit{{Driver: "ebs.csi.example.com", Max: 1}}) {
			t.Fatalf("node %s volumes = %+v, want the CSINode's limit", n.Name, n.Volumes)
		}
		a := in.snap.RunningByNode[2]
		if len(a) != 1 || a[0].Request.Volumes == nil || !slices.Equal(a[0].Request.Volumes.Attach, []model.Attachment{{Driver: "ebs.csi.example.com", ID: "vol-1"}}) {
			t.Fatalf("allocations on c = %+v, want the attached zonal volume", a)
		}
	})
	t.Run("the cache keeps a pod's claims", func(t *testing.T) {
		p := withClaims(newPod("ml", "x").Obj(), "data")
		p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}})
		slim := slimPod(p)
		if len(slim.Spec.Volumes) != 1 || slim.Spec.Volumes[0].PersistentVolumeClaim.ClaimName != "data" {
			t.Fatalf("cached volumes = %+v, want the claim alone", slim.Spec.Volumes)
		}
	})
}

func equalVolumes(a, b *model.PodVolumes) bool {
	if a == nil || b == nil {
		return a == b
	}
	return slices.EqualFunc(a.Claims, b.Claims, func(x, y model.ClaimNeed) bool {
		return x.Claim == y.Claim && x.Provision == y.Provision && slices.EqualFunc(x.PVs, y.PVs, func(p, q model.PV) bool {
			return p.Name == q.Name && slices.Equal(p.Nodes, q.Nodes)
		})
	}) && slices.Equal(a.Attach, b.Attach) && slices.Equal(a.Exclusive, b.Exclusive)
}

// TestLoopBindsEachLocalPVOnce: two pods whose claims may only use the one
// local PV of node b: one is bound there with the PV written to its
// claim, the other waits saying why, and keeps waiting while the bind is
// in flight; a bind that fails gives the PV back.
func TestLoopBindsEachLocalPVOnce(t *testing.T) {
	node := func(name string) *corev1.Node {
		return build.Node(name).Resources(rl("cpu", "32", "memory", "64Gi")).Label(corev1.LabelHostname, name).Obj()
	}
	f := newLoopFixture(t, Config{}, node("a"), node("b"))
	f.cache.upsertStorageClass(storageClass("local", noProvisioner, storagev1.VolumeBindingWaitForFirstConsumer))
	f.cache.upsertPV(persistentVolume("local-b", "local", "1Gi", map[string]string{corev1.LabelHostname: "b"}))
	f.cache.upsertPVC(claim("ns", "one", "local"))
	f.cache.upsertPVC(claim("ns", "two", "local"))
	f.cache.upsertPod(withClaims(newPod("ns", "p1").Obj(), "one"))
	f.cache.upsertPod(withClaims(newPod("ns", "p2").Obj(), "two"))
	// A bind that fails gives the PV back.
	f.api.bindFail = errors.New("conflict")
	f.cycle()
	f.api.bindFail = nil
	if want := []string{"ns/p1 one local-b b"}; !slices.Equal(f.api.volumes, want) {
		t.Fatalf("volume writes = %v, want %v", f.api.volumes, want)
	}
	f.cycle()
	if len(f.api.binds) != 1 || !strings.HasPrefix(f.api.binds[0], "ns/p1 b") {
		t.Fatalf("binds = %v, want p1 on b alone", f.api.binds)
	}
	if want := []string{"ns/p1 one local-b b", "ns/p1 one local-b b"}; !slices.Equal(f.api.volumes, want) {
		t.Fatalf("volume writes = %v, want %v", f.api.volumes, want)
	}
	if got := f.status.conditions["ns/p2"]; !strings.Contains(got, "no available persistent volume to bind") {
		t.Fatalf("p2 says %q, want the volume filter's reason", got)
	}
	// p1 is bound on the server, not yet in the cache: the PV stays taken.
	f.cycle()
	if len(f.api.binds) != 1 || len(f.api.volumes) != 2 {
		t.Fatalf("binds = %v, volume writes %v: the PV in flight was offered again", f.api.binds, f.api.volumes)
	}
}

// TestWriteVolumes: the binder binds the chosen PV to the claim as the
// PV controller expects it (claimRef with the claim's UID, the
// bound-by-controller annotation), and asks for provisioning through the
// claim's selected-node annotation.
func TestWriteVolumes(t *testing.T) {
	pv := persistentVolume("local-b", "local", "1Gi", nil)
	one, two := claim("ns", "one", "local"), claim("ns", "two", "csi")
	client := fake.NewClientset(pv, one, two)
	w := &apiWriter{client: client, log: logr.Discard()}
	if err := w.writeVolumes(t.Context(), []volumeWrite{{claim: one, pv: pv, node: "b"}, {claim: two, node: "b"}}); err != nil {
		t.Fatal(err)
	}
	got, err := client.CoreV1().PersistentVolumes().Get(t.Context(), "local-b", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if r := got.Spec.ClaimRef; r == nil || r.Namespace != "ns" || r.Name != "one" || r.UID != one.UID || got.Annotations["pv.kubernetes.io/bound-by-controller"] != "yes" {
		t.Fatalf("PV = claimRef %+v, annotations %v; want bound to ns/one by a controller", got.Spec.ClaimRef, got.Annotations)
	}
	c2, err := client.CoreV1().PersistentVolumeClaims("ns").Get(t.Context(), "two", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if c2.Annotations["volume.kubernetes.io/selected-node"] != "b" {
		t.Fatalf("claim two annotations = %v, want the selected node b", c2.Annotations)
	}
}

// TestLoopReadWriteOncePodOnce: two pods of one cycle sharing a
// ReadWriteOncePod claim are never both bound: the core takes the claim
// for the first, and once that one is bound the other waits saying who
// uses it.
func TestLoopReadWriteOncePodOnce(t *testing.T) {
	f := newLoopFixture(t, Config{}, gpuNode("a", 0), gpuNode("b", 0))
	pv := persistentVolume("db", "", "1Gi", nil)
	pv.Spec.ClaimRef = &corev1.ObjectReference{Namespace: "ns", Name: "db", UID: "uid-db"}
	f.cache.upsertPV(pv)
	pvc := claim("ns", "db", "", corev1.ReadWriteOncePod)
	pvc.Spec.VolumeName = "db"
	f.cache.upsertPVC(pvc)
	f.cache.upsertPod(withClaims(newPod("ns", "p1").Obj(), "db"))
	f.cache.upsertPod(withClaims(newPod("ns", "p2").Obj(), "db"))
	f.cycle()
	if len(f.api.binds) != 1 {
		t.Fatalf("binds = %v, want one pod of the ReadWriteOncePod claim", f.api.binds)
	}
	if got := f.status.conditions["ns/p2"]; !strings.Contains(got, "ReadWriteOncePod claim in use") {
		t.Fatalf("p2 says %q, want the claim in use", got)
	}
	f.cycle()
	if len(f.api.binds) != 1 {
		t.Fatalf("binds = %v after a second cycle", f.api.binds)
	}
	if got := f.status.conditions["ns/p2"]; !strings.Contains(got, "pod ns/p1 uses it") {
		t.Fatalf("p2 says %q, want p1 named as the claim's user", got)
	}
}

// TestVolumesBound: a bind waits until the claims it wrote are bound, and
// gives up when one is bound to another PV or its provisioner gave the
// node up.
func TestVolumesBound(t *testing.T) {
	c := newClusterCache(v1alpha1.SchedulerName)
	pv := persistentVolume("local-b", "local", "1Gi", nil)
	one, two := claim("ns", "one", "local"), claim("ns", "two", "csi")
	c.upsertPVC(one)
	c.upsertPVC(two)
	ws := []volumeWrite{{claim: one, pv: pv, node: "b"}, {claim: two, node: "b"}}
	check := func(wantBound bool, wantErr string) {
		t.Helper()
		ok, err := c.volumesBound(ws)
		if ok != wantBound || (err == nil) != (wantErr == "") || err != nil && !strings.Contains(err.Error(), wantErr) {
			t.Fatalf("volumesBound = %v, %v; want %v, %q", ok, err, wantBound, wantErr)
		}
	}
	check(false, "")
	bound := func(pvc *corev1.PersistentVolumeClaim, volume, rv string) *corev1.PersistentVolumeClaim {
		out := pvc.DeepCopy()
		out.Spec.VolumeName, out.Status.Phase, out.ResourceVersion = volume, corev1.ClaimBound, rv
		return out
	}
	c.upsertPVC(bound(one, "local-b", "2"))
	check(false, "")
	// The provisioner saw the node and provisioned there.
	c.upsertPVC(bound(two, "pvc-two", "3"))
	check(true, "")
	c.upsertPVC(bound(one, "elsewhere", "4"))
	check(false, "bound to persistentvolume elsewhere, not to local-b")
	c.upsertPVC(bound(one, "local-b", "5"))
	// A provisioner that fails takes the annotation away again.
	given := two.DeepCopy()
	given.ResourceVersion = "6"
	c.upsertPVC(given)
	check(false, "the provisioner gave the node up")
	c.deletePVC(one)
	check(false, "claim ns/one is gone")
}

// TestBindWaitsForVolumes: a bind whose claims do not get bound never
// binds the pod.
func TestBindWaitsForVolumes(t *testing.T) {
	pv := persistentVolume("local-b", "local", "1Gi", nil)
	one := claim("ns", "one", "local")
	pod := withClaims(newPod("ns", "p").UID("uid-p").Obj(), "one")
	client := fake.NewClientset(pv, one, pod)
	w := &apiWriter{client: client, log: logr.Discard(), metrics: newMetrics()}
	err := w.doBind(t.Context(), bindTask{pod: pod, assumption: assumption{node: "b"}, volumes: []volumeWrite{{claim: one, pv: pv, node: "b"}},
		awaitVolumes: func(context.Context) error { return errors.New("claim not bound") }})
	if err == nil {
		t.Fatal("the bind succeeded while its claim stayed unbound")
	}
	for _, a := range client.Actions() {
		if a.GetSubresource() == "binding" {
			t.Fatalf("the pod was bound (%v) though its claim was not", a)
		}
	}
	if got, _ := client.CoreV1().PersistentVolumes().Get(t.Context(), "local-b", metav1.GetOptions{}); got.Spec.ClaimRef == nil {
		t.Fatal("the PV was not written before the wait")
	}
}
