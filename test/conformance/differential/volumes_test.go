package differential

import (
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	volumehelpers "k8s.io/component-helpers/storage/volume"
	"k8s.io/utils/ptr"
)

// Storage the generator draws (Volumes): three classes and one CSI driver
// with attach limits. In-tree disks (gcePersistentDisk and the like) are
// not drawn: gpuplane-scheduler refuses them by name
// (internal/adapter/unsupported.go), where kube-scheduler keeps pods
// sharing one apart.
const (
	classLocal     = "local"         // kubernetes.io/no-provisioner, WaitForFirstConsumer
	classCSI       = "csi-wffc"      // the CSI driver, WaitForFirstConsumer, sometimes zoned
	classImmediate = "csi-immediate" // the CSI driver, Immediate
	csiDriver      = "csi.example.com"
	noProvisioner  = "kubernetes.io/no-provisioner"
)

var (
	classNames = []string{classLocal, classCSI, classImmediate, "absent-class", ""}
	sizesGi    = []int64{1, 5, 10, 50}
	modes      = []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce, corev1.ReadWriteOnce, corev1.ReadWriteOncePod, corev1.ReadOnlyMany, corev1.ReadWriteMany}
)

// volumeGen draws the storage of one case: classes, CSINodes, PVs and the
// claims pods name, as the API server and its controllers would leave
// them (a bound claim and its PV name each other; a running pod's PV
// admits its node).
type volumeGen struct {
	g      *gen
	c      *cluster
	pvs    []*corev1.PersistentVolume
	claims []*corev1.PersistentVolumeClaim
	// classes are the storage classes this case has.
	classes map[string]*storagev1.StorageClass
}

// volumes adds storage to c: the objects, and volumes in its pods.
func (g *gen) volumes(c *cluster) {
	v := &volumeGen{g: g, c: c, classes: map[string]*storagev1.StorageClass{}}
	wffc, immediate := storagev1.VolumeBindingWaitForFirstConsumer, storagev1.VolumeBindingImmediate
	for _, sc := range []*storagev1.StorageClass{
		{ObjectMeta: metav1.ObjectMeta{Name: classLocal}, Provisioner: noProvisioner, VolumeBindingMode: &wffc},
		{ObjectMeta: metav1.ObjectMeta{Name: classCSI}, Provisioner: csiDriver, VolumeBindingMode: &wffc},
		{ObjectMeta: metav1.ObjectMeta{Name: classImmediate}, Provisioner: csiDriver, VolumeBindingMode: &immediate},
	} {
		if !g.chance(0.85) {
			continue
		}
		if sc.Name == classCSI && g.chance(0.4) {
			// Provisioned only in some zones.
			var in []string
			for _, z := range zones {
				if g.chance(0.5) {
					in = append(in, z)
				}
			}
			if len(in) > 0 {
				sc.AllowedTopologies = []corev1.TopologySelectorTerm{{MatchLabelExpressions: []corev1.TopologySelectorLabelRequirement{{Key: labelZone, Values: in}}}}
			}
		}
		sc.TypeMeta = metav1.TypeMeta{APIVersion: "storage.k8s.io/v1", Kind: "StorageClass"}
		sc.UID = types.UID("uid-sc-" + sc.Name)
		v.classes[sc.Name] = sc
		c.objects = append(c.objects, sc)
	}
	for _, n := range c.nodes {
		if !g.chance(0.5) {
			continue
		}
		d := storagev1.CSINodeDriver{Name: csiDriver, NodeID: n.Name}
		if g.chance(0.8) {
			d.Allocatable = &storagev1.VolumeNodeResources{Count: ptr.To(int32(g.pick(4)))}
		}
		c.objects = append(c.objects, &storagev1.CSINode{TypeMeta: metav1.TypeMeta{APIVersion: "storage.k8s.io/v1", Kind: "CSINode"},
			ObjectMeta: metav1.ObjectMeta{Name: n.Name, UID: types.UID("uid-csinode-" + n.Name)}, Spec: storagev1.CSINodeSpec{Drivers: []storagev1.CSINodeDriver{d}}})
	}
	for k := range g.pick(7) {
		v.pvs = append(v.pvs, v.pv(k))
	}
	for _, p := range c.running {
		if p.Status.Phase == corev1.PodRunning && g.chance(0.4) {
			v.runningVolumes(p)
		}
	}
	for _, p := range c.pending {
		if g.chance(0.6) {
			for range 1 + g.pick(2) {
				v.pendingVolume(p)
			}
		}
	}
	for _, pv := range v.pvs {
		c.objects = append(c.objects, pv)
		if pv.Spec.CSI != nil && g.chance(0.25) {
			// Attached to a node, whether or not a pod there uses it
			// (the attach-detach controller detaches it later).
			node := pickOf(g, c.nodes).Name
			c.objects = append(c.objects, &storagev1.VolumeAttachment{TypeMeta: metav1.TypeMeta{APIVersion: "storage.k8s.io/v1", Kind: "VolumeAttachment"},
				ObjectMeta: metav1.ObjectMeta{Name: "va-" + pv.Name + "-" + node, UID: types.UID("uid-va-" + pv.Name + "-" + node)},
				Spec:       storagev1.VolumeAttachmentSpec{Attacher: csiDriver, NodeName: node, Source: storagev1.VolumeAttachmentSource{PersistentVolumeName: ptr.To(pv.Name)}},
				Status:     storagev1.VolumeAttachmentStatus{Attached: true}})
		}
	}
	for _, pvc := range v.claims {
		c.objects = append(c.objects, pvc)
	}
}

// pv draws an available PV: a local one that admits one node (or a zone),
// or a CSI one, with or without zone labels or node affinity.
func (v *volumeGen) pv(k int) *corev1.PersistentVolume {
	g := v.g
	pv := &corev1.PersistentVolume{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "PersistentVolume"},
		ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("pv-%d", k), UID: types.UID(fmt.Sprintf("uid-pv-%d", k))},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:    corev1.ResourceList{corev1.ResourceStorage: *resource.NewQuantity(pickOf(g, sizesGi)<<30, resource.BinarySI)},
			AccessModes: []corev1.PersistentVolumeAccessMode{pickOf(g, modes)},
		},
		Status: corev1.PersistentVolumeStatus{Phase: corev1.VolumeAvailable},
	}
	if g.chance(0.5) {
		pv.Spec.StorageClassName = classLocal
		pv.Spec.Local = &corev1.LocalVolumeSource{Path: "/mnt/disks/" + pv.Name}
		term := corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: labelHostname, Operator: corev1.NodeSelectorOpIn, Values: []string{pickOf(g, v.c.nodes).Name}}}}
		if g.chance(0.2) {
			term = corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: labelZone, Operator: corev1.NodeSelectorOpIn, Values: []string{pickOf(g, zones)}}}}
		}
		pv.Spec.NodeAffinity = &corev1.VolumeNodeAffinity{Required: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{term}}}
		return pv
	}
	pv.Spec.StorageClassName = pickOf(g, []string{classCSI, classCSI, classImmediate})
	pv.Spec.CSI = &corev1.CSIPersistentVolumeSource{Driver: csiDriver, VolumeHandle: "vol-" + pv.Name}
	switch g.pick(4) {
	case 0:
		// Zone labels, as provisioners of zonal disks set them:
		// VolumeZone compares them with the node's; "__" joins zones.
		z := pickOf(g, zones)
		if g.chance(0.3) {
			z += "__" + pickOf(g, zones)
		}
		pv.Labels = map[string]string{labelZone: z}
	case 1:
		pv.Spec.NodeAffinity = &corev1.VolumeNodeAffinity{Required: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{
			{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: labelZone, Operator: corev1.NodeSelectorOpIn, Values: []string{pickOf(g, zones)}}}}}}}
	}
	return pv
}

// admits reports whether pv may be used on node n.
func admits(pv *corev1.PersistentVolume, n *corev1.Node) bool {
	if volumehelpers.CheckNodeAffinity(pv, n.Labels) != nil {
		return false
	}
	if z, ok := pv.Labels[labelZone]; ok {
		return slices.Contains(strings.Split(z, "__"), n.Labels[labelZone])
	}
	return true
}

// bind binds pv to a new claim in namespace ns, both as the PV controller
// leaves them, and returns the claim.
func (v *volumeGen) bind(pv *corev1.PersistentVolume, ns, name string) *corev1.PersistentVolumeClaim {
	pvc := v.claim(ns, name, pv.Spec.StorageClassName, pv.Spec.AccessModes[0])
	size := pv.Spec.Capacity[corev1.ResourceStorage]
	if v.g.chance(0.5) {
		// Less than the PV holds.
		size = *resource.NewQuantity(size.Value()/2, resource.BinarySI)
	}
	pvc.Spec.Resources.Requests[corev1.ResourceStorage] = size
	pvc.Spec.VolumeName = pv.Name
	pvc.Status = corev1.PersistentVolumeClaimStatus{Phase: corev1.ClaimBound, AccessModes: pv.Spec.AccessModes, Capacity: pv.Spec.Capacity}
	pvc.Annotations = map[string]string{volumehelpers.AnnBindCompleted: "yes"}
	pv.Spec.ClaimRef = &corev1.ObjectReference{Kind: "PersistentVolumeClaim", Namespace: ns, Name: name, UID: pvc.UID}
	pv.Status.Phase = corev1.VolumeBound
	return pvc
}

// claim makes an unbound claim.
func (v *volumeGen) claim(ns, name, class string, mode corev1.PersistentVolumeAccessMode) *corev1.PersistentVolumeClaim {
	pvc := &corev1.PersistentVolumeClaim{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "PersistentVolumeClaim"},
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID("uid-pvc-" + ns + "-" + name)},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{mode},
			Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: *resource.NewQuantity(pickOf(v.g, sizesGi)<<30, resource.BinarySI)}},
		},
		Status: corev1.PersistentVolumeClaimStatus{Phase: corev1.ClaimPending},
	}
	if class != "" || v.g.chance(0.5) {
		// An empty class is asked for explicitly, or (nil) left to
		// the default class, of which this cluster has none.
		pvc.Spec.StorageClassName = ptr.To(class)
	}
	v.claims = append(v.claims, pvc)
	return pvc
}

// runningVolumes gives a running pod a claim bound to an available PV its
// node admits.
func (v *volumeGen) runningVolumes(p *corev1.Pod) {
	g := v.g
	node := v.node(p.Spec.NodeName)
	var fit []*corev1.PersistentVolume
	for _, pv := range v.pvs {
		if pv.Spec.ClaimRef == nil && admits(pv, node) {
			fit = append(fit, pv)
		}
	}
	if len(fit) == 0 {
		return
	}
	pvc := v.bind(pickOf(g, fit), p.Namespace, "data-"+p.Name)
	p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: "data", VolumeSource: corev1.VolumeSource{
		PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: pvc.Name}}})
}

func (v *volumeGen) node(name string) *corev1.Node {
	for _, n := range v.c.nodes {
		if n.Name == name {
			return n
		}
	}
	return nil
}

// pendingVolume gives a pending pod one volume: a claim another pod holds
// already, a PV of its own to bind (pre-bound or not), a claim to
// provision, one of an Immediate class (it waits), a claim missing or
// being deleted, or a generic ephemeral volume.
func (v *volumeGen) pendingVolume(p *corev1.Pod) {
	g := v.g
	name := fmt.Sprintf("vol-%d", len(p.Spec.Volumes))
	claimName := fmt.Sprintf("%s-%s", p.Name, name)
	add := func(claim string) {
		p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{
			PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim, ReadOnly: g.chance(0.1)}}})
	}
	switch g.pick(8) {
	case 0: // a claim some pod uses, in the pod's namespace
		var mine []*corev1.PersistentVolumeClaim
		for _, c := range v.claims {
			if c.Namespace == p.Namespace {
				mine = append(mine, c)
			}
		}
		if len(mine) == 0 {
			return
		}
		add(pickOf(g, mine).Name)
	case 1: // a PV bound to a claim of its own
		var free []*corev1.PersistentVolume
		for _, pv := range v.pvs {
			if pv.Spec.ClaimRef == nil {
				free = append(free, pv)
			}
		}
		if len(free) == 0 {
			return
		}
		add(v.bind(pickOf(g, free), p.Namespace, claimName).Name)
	case 2, 3: // unbound, of a WaitForFirstConsumer class
		pvc := v.claim(p.Namespace, claimName, pickOf(g, []string{classLocal, classCSI}), pickOf(g, modes))
		if g.chance(0.15) {
			// Provisioning asked for on a node already.
			pvc.Annotations = map[string]string{volumehelpers.AnnSelectedNode: pickOf(g, v.c.nodes).Name}
		}
		if g.chance(0.15) {
			// Pre-bound: the PV names the claim, the claim not yet
			// the PV.
			for _, pv := range v.pvs {
				if pv.Spec.ClaimRef == nil && pv.Spec.StorageClassName == ptr.Deref(pvc.Spec.StorageClassName, "") {
					pv.Spec.ClaimRef = &corev1.ObjectReference{Kind: "PersistentVolumeClaim", Namespace: pvc.Namespace, Name: pvc.Name, UID: pvc.UID}
					break
				}
			}
		}
		add(pvc.Name)
	case 4: // of any class: Immediate, absent, none
		add(v.claim(p.Namespace, claimName, pickOf(g, classNames), pickOf(g, modes)).Name)
	case 5: // missing, or being deleted
		if g.chance(0.5) {
			pvc := v.claim(p.Namespace, claimName, classLocal, corev1.ReadWriteOnce)
			pvc.DeletionTimestamp = ptr.To(metav1.Unix(1_700_000_100, 0))
			pvc.Finalizers = []string{"kubernetes.io/pvc-protection"}
		}
		add(claimName)
	case 6: // a generic ephemeral volume: its claim made for the pod, not yet, or another pod's
		p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{Ephemeral: &corev1.EphemeralVolumeSource{
			VolumeClaimTemplate: &corev1.PersistentVolumeClaimTemplate{Spec: corev1.PersistentVolumeClaimSpec{
				AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}, StorageClassName: ptr.To(classCSI),
				Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}}}}}})
		if g.chance(0.8) {
			pvc := v.claim(p.Namespace, claimName, classCSI, corev1.ReadWriteOnce)
			owner := p.UID
			if g.chance(0.2) {
				owner = "uid-someone-else"
			}
			pvc.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: p.Name, UID: owner, Controller: ptr.To(true)}}
		}
	default: // a claim bound to a CSI PV, counted against attach limits
		var csi []*corev1.PersistentVolume
		for _, pv := range v.pvs {
			if pv.Spec.ClaimRef == nil && pv.Spec.CSI != nil {
				csi = append(csi, pv)
			}
		}
		if len(csi) == 0 {
			return
		}
		add(v.bind(pickOf(g, csi), p.Namespace, claimName).Name)
	}
}
