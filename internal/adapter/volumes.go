package adapter

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/component-helpers/storage/ephemeral"
	volumehelpers "k8s.io/component-helpers/storage/volume"

	"github.com/gpuplane/gpuplane/internal/scheduler/model"
)

// Volumes: what kube-scheduler's VolumeBinding, VolumeZone,
// VolumeRestrictions and NodeVolumeLimits keep, split as the rest of the
// scheduler splits its work. What depends only on a pod and the objects
// around it (a bound PV's node affinity and zone, the nodes where an
// unbound WaitForFirstConsumer claim could get a PV or be provisioned) is
// worked out here into the pod's class (volumeClass), like node affinity.
// What the pods of one cycle take from each other (a PV, a
// ReadWriteOncePod claim, a node's CSI attach slots) goes to the core in
// model.Request.Volumes and model.Node.Volumes, and the core's choice of
// PV comes back in model.Bind.Volumes for the binder to write
// (volumeWrite) before it binds the pod. A pod whose claim is missing, or
// unbound with an Immediate class, waits with its reason.

// noProvisioner is the provisioner of classes that never provision (local
// volumes made by hand).
const noProvisioner = "kubernetes.io/no-provisioner"

// volumeZoneLabels are the PV labels VolumeZone compares with the node's:
// a value may list several zones joined by "__".
var volumeZoneLabels = []string{corev1.LabelTopologyZone, corev1.LabelTopologyRegion, corev1.LabelFailureDomainBetaZone, corev1.LabelFailureDomainBetaRegion}

// volumeCache holds the PVs, claims, storage classes and CSI attach
// limits, under the cluster cache's lock.
type volumeCache struct {
	pvs     map[string]*corev1.PersistentVolume
	claims  map[string]*corev1.PersistentVolumeClaim // namespace/name
	classes map[string]*storagev1.StorageClass
	// limits is each node's CSI attach limits (its CSINode).
	limits map[string]*model.NodeVolumes
	// users indexes the pods that name each claim, by claim key.
	users map[string]map[string]*podInfo
	// inFlight are the PVs the binder is binding to a claim (PV name to
	// claim key), until the informer shows the PV's claimRef.
	inFlight map[string]string
	// drivers counts, per CSI driver, the nodes that limit its
	// attachments: a volume of another driver is not counted.
	drivers map[string]int
	// attached is, by node, the volumes its VolumeAttachments attach
	// (attachments.go), by VolumeAttachment name; attachedOn the node of
	// each.
	attached   map[string]map[string]attachedVolume
	attachedOn map[string]string
}

func newVolumeCache() *volumeCache {
	return &volumeCache{pvs: map[string]*corev1.PersistentVolume{}, claims: map[string]*corev1.PersistentVolumeClaim{},
		classes: map[string]*storagev1.StorageClass{}, limits: map[string]*model.NodeVolumes{}, users: map[string]map[string]*podInfo{},
		inFlight: map[string]string{}, drivers: map[string]int{}}
}

// volumeClaimNames returns the claims a pod's volumes name: its
// PersistentVolumeClaim volumes and the claims of its generic ephemeral
// volumes, with whether each is ephemeral.
func volumeClaimNames(p *corev1.Pod) (names []string, eph []bool) {
	for i := range p.Spec.Volumes {
		v := &p.Spec.Volumes[i]
		switch {
		case v.PersistentVolumeClaim != nil:
			names, eph = append(names, v.PersistentVolumeClaim.ClaimName), append(eph, false)
		case v.Ephemeral != nil:
			names, eph = append(names, ephemeral.VolumeClaimName(p, v)), append(eph, true)
		}
	}
	return names, eph
}

// slimVolumes keeps of a pod's volumes what the scheduler reads: the
// claims they name (volumeClaimNames); an ephemeral volume's template stays
// with the server. The pods of a workload name the same claims (or
// ephemeral volumes, whose claims follow the pod's name): they share one
// slice (volumeLists).
func slimVolumes(vs []corev1.Volume) []corev1.Volume {
	var out []corev1.Volume
	var key strings.Builder
	for i := range vs {
		v := &vs[i]
		switch {
		case v.PersistentVolumeClaim != nil:
			out = append(out, corev1.Volume{Name: v.Name, VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{
				ClaimName: v.PersistentVolumeClaim.ClaimName, ReadOnly: v.PersistentVolumeClaim.ReadOnly}}})
			writeKey(&key, "c", v.Name, v.PersistentVolumeClaim.ClaimName, strconv.FormatBool(v.PersistentVolumeClaim.ReadOnly))
		case v.Ephemeral != nil:
			out = append(out, corev1.Volume{Name: v.Name, VolumeSource: corev1.VolumeSource{Ephemeral: &corev1.EphemeralVolumeSource{}}})
			writeKey(&key, "e", v.Name)
		case inTreeDisk(v) != "":
			out = append(out, inTreeDiskMarker(v))
			writeKey(&key, "d", v.Name, inTreeDisk(v))
		}
	}
	if out == nil || len(out) > 16 {
		return out
	}
	volumeLists.mu.Lock()
	defer volumeLists.mu.Unlock()
	return volumeLists.share(key.String(), out)
}

// volumeLists shares the slim volumes of cached pods (slimVolumes).
var volumeLists = newSharedTable[string, []corev1.Volume](maxInterned)

// indexClaims adds pi to the users of its claims, unindexClaims takes it
// out. Caller holds mu.
func (c *clusterCache) indexClaims(pi *podInfo) {
	names, _ := volumeClaimNames(pi.pod)
	for _, n := range names {
		key := pi.pod.Namespace + "/" + n
		m := c.vol.users[key]
		if m == nil {
			m = map[string]*podInfo{}
			c.vol.users[key] = m
		}
		m[pi.key] = pi
	}
}

func (c *clusterCache) unindexClaims(pi *podInfo) {
	names, _ := volumeClaimNames(pi.pod)
	for _, n := range names {
		key := pi.pod.Namespace + "/" + n
		if m := c.vol.users[key]; m != nil && m[pi.key] == pi {
			delete(m, pi.key)
			if len(m) == 0 {
				delete(c.vol.users, key)
			}
		}
	}
}

// volumesChanged notes that a claim's volumes changed: the nodes of the
// claim's placed users recount what they attach, and the next cycle
// looks at the pending pods again. Caller holds mu.
func (c *clusterCache) volumesChanged(claim string) {
	for _, pi := range c.vol.users[claim] {
		if n := c.nodeOf(pi); n != "" {
			c.dirty[n] = true
		}
	}
	c.poke()
}

func (c *clusterCache) upsertPV(pv *corev1.PersistentVolume) {
	c.mu.Lock()
	defer c.mu.Unlock()
	old := c.vol.pvs[pv.Name]
	c.vol.pvs[pv.Name] = pv
	if pv.Spec.ClaimRef != nil {
		delete(c.vol.inFlight, pv.Name)
	}
	c.volumesChanged(claimRefKey(pv))
	if old != nil && claimRefKey(old) != claimRefKey(pv) {
		c.volumesChanged(claimRefKey(old))
	}
	c.attachedPVChanged(pv.Name)
}

func (c *clusterCache) deletePV(pv *corev1.PersistentVolume) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.vol.pvs, pv.Name)
	delete(c.vol.inFlight, pv.Name)
	c.volumesChanged(claimRefKey(pv))
	c.attachedPVChanged(pv.Name)
}

func claimRefKey(pv *corev1.PersistentVolume) string {
	if r := pv.Spec.ClaimRef; r != nil {
		return r.Namespace + "/" + r.Name
	}
	return ""
}

func (c *clusterCache) upsertPVC(pvc *corev1.PersistentVolumeClaim) {
	c.mu.Lock()
	defer c.mu.Unlock()
	key := pvc.Namespace + "/" + pvc.Name
	c.vol.claims[key] = pvc
	c.volumesChanged(key)
}

func (c *clusterCache) deletePVC(pvc *corev1.PersistentVolumeClaim) {
	c.mu.Lock()
	defer c.mu.Unlock()
	key := pvc.Namespace + "/" + pvc.Name
	delete(c.vol.claims, key)
	c.volumesChanged(key)
}

func (c *clusterCache) upsertStorageClass(sc *storagev1.StorageClass) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.vol.classes[sc.Name] = sc
	c.volumesChanged("")
}

func (c *clusterCache) deleteStorageClass(sc *storagev1.StorageClass) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.vol.classes, sc.Name)
	c.volumesChanged("")
}

// upsertCSINode takes a node's CSI attach limits: each driver's
// allocatable count, when it has one. A count of 0 is a limit (the
// driver attaches nothing more there), as kube-scheduler reads it; a
// negative one, which the API server refuses, is read as 0.
func (c *clusterCache) upsertCSINode(cn *storagev1.CSINode) {
	var nv *model.NodeVolumes
	for _, d := range cn.Spec.Drivers {
		if d.Allocatable == nil || d.Allocatable.Count == nil {
			continue
		}
		if nv == nil {
			nv = &model.NodeVolumes{}
		}
		nv.Limits = append(nv.Limits, model.AttachLimit{Driver: d.Name, Max: max(0, int(*d.Allocatable.Count))})
	}
	if nv != nil {
		slices.SortFunc(nv.Limits, func(a, b model.AttachLimit) int { return strings.Compare(a.Driver, b.Driver) })
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.setAttachLimits(cn.Name, nv)
}

func (c *clusterCache) deleteCSINode(cn *storagev1.CSINode) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.setAttachLimits(cn.Name, nil)
}

// setAttachLimits gives a node new attach limits. Caller holds mu.
func (c *clusterCache) setAttachLimits(node string, nv *model.NodeVolumes) {
	old := c.vol.limits[node]
	if old == nv || old != nil && nv != nil && slices.Equal(old.Limits, nv.Limits) {
		return
	}
	if old != nil {
		for _, l := range old.Limits {
			if c.vol.drivers[l.Driver]--; c.vol.drivers[l.Driver] <= 0 {
				delete(c.vol.drivers, l.Driver)
			}
		}
	}
	if nv != nil {
		for _, l := range nv.Limits {
			c.vol.drivers[l.Driver]++
		}
	}
	if nv == nil {
		delete(c.vol.limits, node)
	} else {
		c.vol.limits[node] = nv
	}
	if ni := c.nodes[node]; ni != nil {
		next := *ni
		next.m.Volumes, next.base.Volumes = nv, nv
		c.nodes[node] = &next
		c.nodesVersion++
		c.dirty[node] = true
	}
	c.poke()
}

// podVolumes is what a pending pod's volumes ask, worked out once per
// cycle.
type podVolumes struct {
	// key names the pod's static volume constraints for its class; ""
	// when it has none.
	key string
	// bound are the PVs its bound claims use; wffc its unbound claims
	// that bind once it is placed.
	bound []*corev1.PersistentVolume
	wffc  []wffcClaim
	// need is what the core counts (model.Request.Volumes).
	need *model.PodVolumes
}

// wffcClaim is an unbound claim of a WaitForFirstConsumer class.
type wffcClaim struct {
	claim *corev1.PersistentVolumeClaim
	class *storagev1.StorageClass
	pvs   []*corev1.PersistentVolume // candidates, best first
	// selectedNode is where provisioning was asked for already.
	selectedNode string
}

func (w *wffcClaim) provisions() bool { return w.class.Provisioner != noProvisioner }

// volumeWait is a pod's reason to wait for its volumes.
func volumeWait(format string, args ...any) *BadInputError {
	return badInput(corev1.PodReasonUnschedulable, format, args...)
}

// podVolumes works out what a pending pod's volumes ask of its node, or
// why it waits: a claim missing or being deleted, an ephemeral claim
// that is not the pod's, a ReadWriteOncePod claim another pod uses, a
// bound claim whose PV is missing, an unbound claim whose class binds at
// once (or is missing). Nil when the pod names no claim. Caller holds
// mu.
func (c *clusterCache) podVolumes(pi *podInfo, nodes []*nodeInfo) (*podVolumes, *BadInputError) {
	names, eph := volumeClaimNames(pi.pod)
	if len(names) == 0 {
		return nil, nil
	}
	pv := &podVolumes{}
	need := &model.PodVolumes{}
	var key strings.Builder
	for k, name := range names {
		ckey := pi.pod.Namespace + "/" + name
		claim := c.vol.claims[ckey]
		switch {
		case claim == nil:
			return nil, volumeWait("persistentvolumeclaim %q not found", name)
		case claim.DeletionTimestamp != nil:
			return nil, volumeWait("persistentvolumeclaim %q is being deleted", name)
		}
		if eph[k] {
			if err := ephemeral.VolumeIsForPod(pi.pod, claim); err != nil {
				return nil, volumeWait("%v", err)
			}
		}
		if slices.Contains(claim.Spec.AccessModes, corev1.ReadWriteOncePod) {
			for _, u := range c.vol.users[ckey] {
				if u.key != pi.key && !u.terminal() && c.nodeOf(u) != "" {
					return nil, volumeWait("persistentvolumeclaim %q has the ReadWriteOncePod access mode and pod %s uses it", name, u.key)
				}
			}
			need.Exclusive = append(need.Exclusive, ckey)
		}
		if claim.Spec.VolumeName != "" {
			vol := c.vol.pvs[claim.Spec.VolumeName]
			if vol == nil {
				return nil, volumeWait("persistentvolumeclaim %q is bound to persistentvolume %q, which is not found", name, claim.Spec.VolumeName)
			}
			pv.bound = append(pv.bound, vol)
			if vol.Spec.NodeAffinity != nil || slices.ContainsFunc(volumeZoneLabels, func(k string) bool { _, ok := vol.Labels[k]; return ok }) {
				fmt.Fprintf(&key, "pv:%s@%s;", vol.Name, vol.ResourceVersion)
			}
			if vol.Spec.CSI != nil && c.vol.drivers[vol.Spec.CSI.Driver] > 0 {
				need.Attach = append(need.Attach, model.Attachment{Driver: vol.Spec.CSI.Driver, ID: vol.Spec.CSI.VolumeHandle})
			}
			continue
		}
		className := volumehelpers.GetPersistentVolumeClaimClass(claim)
		class := c.vol.classes[className]
		if className == "" || class == nil || class.VolumeBindingMode == nil || *class.VolumeBindingMode != storagev1.VolumeBindingWaitForFirstConsumer {
			return nil, volumeWait("pod has unbound immediate PersistentVolumeClaims: %q waits to be bound (its storage class %q binds at once)", name, className)
		}
		w := wffcClaim{claim: claim, class: class, selectedNode: claim.Annotations[volumehelpers.AnnSelectedNode]}
		w.pvs = c.candidatePVs(claim)
		cn := model.ClaimNeed{Claim: ckey, Provision: w.provisions()}
		if cn.Provision && len(class.AllowedTopologies) > 0 {
			cn.ProvisionNodes = []string{}
			for _, n := range nodes {
				if provisionsOn(class, n.node) {
					cn.ProvisionNodes = append(cn.ProvisionNodes, n.node.Name)
				}
			}
		}
		for _, vol := range w.pvs {
			cn.PVs = append(cn.PVs, model.PV{Name: vol.Name, Nodes: pvNodes(vol, nodes)})
		}
		need.Claims = append(need.Claims, cn)
		pv.wffc = append(pv.wffc, w)
		// What decides the nodes: where provisioning was asked for, the
		// class, and the candidates.
		fmt.Fprintf(&key, "wffc:%s:%s@%s", w.selectedNode, class.Name, class.ResourceVersion)
		for _, vol := range w.pvs {
			fmt.Fprintf(&key, ",%s@%s", vol.Name, vol.ResourceVersion)
		}
		key.WriteByte(';')
		if class.Provisioner != noProvisioner && c.vol.drivers[class.Provisioner] > 0 {
			// Counted against the provisioner's attach limit before the
			// volume exists, as kube-scheduler counts it.
			need.Attach = append(need.Attach, model.Attachment{Driver: class.Provisioner, ID: "claim:" + string(claim.UID)})
		}
	}
	pv.key = key.String()
	if need.Dynamic() {
		pv.need = need
	}
	return pv, nil
}

// candidatePVs lists the PVs a claim may bind, best first: one bound to it
// already (pre-bound) alone; otherwise the available PVs of its class,
// selector, size, access modes and volume mode, not being bound by the
// binder, smallest first (then by name), as kube-scheduler prefers them.
// Caller holds mu.
func (c *clusterCache) candidatePVs(claim *corev1.PersistentVolumeClaim) []*corev1.PersistentVolume {
	want := claim.Spec.Resources.Requests[corev1.ResourceStorage]
	class := volumehelpers.GetPersistentVolumeClaimClass(claim)
	var sel labels.Selector
	if claim.Spec.Selector != nil {
		s, err := metav1.LabelSelectorAsSelector(claim.Spec.Selector)
		if err != nil {
			return nil
		}
		sel = s
	}
	var out []*corev1.PersistentVolume
	for _, vol := range c.vol.pvs {
		if vol.DeletionTimestamp != nil || volumehelpers.CheckVolumeModeMismatches(&claim.Spec, &vol.Spec) {
			continue
		}
		size := vol.Spec.Capacity[corev1.ResourceStorage]
		if size.Cmp(want) < 0 {
			continue
		}
		if volumehelpers.IsVolumeBoundToClaim(vol, claim) {
			return []*corev1.PersistentVolume{vol}
		}
		if vol.Spec.ClaimRef != nil || c.vol.inFlight[vol.Name] != "" || vol.Status.Phase != corev1.VolumeAvailable ||
			sel != nil && !sel.Matches(labels.Set(vol.Labels)) || volumehelpers.GetPersistentVolumeClass(vol) != class ||
			!volumehelpers.CheckAccessModes(claim, vol) {
			continue
		}
		out = append(out, vol)
	}
	slices.SortFunc(out, func(a, b *corev1.PersistentVolume) int {
		qa, qb := a.Spec.Capacity[corev1.ResourceStorage], b.Spec.Capacity[corev1.ResourceStorage]
		return cmp.Or(qa.Cmp(qb), strings.Compare(a.Name, b.Name))
	})
	return out
}

// pvNodes lists, sorted, the nodes a PV's node affinity allows; nil when
// it has none (any node). nodes are sorted by name.
func pvNodes(vol *corev1.PersistentVolume, nodes []*nodeInfo) []string {
	if vol.Spec.NodeAffinity == nil || vol.Spec.NodeAffinity.Required == nil {
		return nil
	}
	out := []string{}
	for _, n := range nodes {
		if volumehelpers.CheckNodeAffinity(vol, n.node.Labels) == nil {
			out = append(out, n.node.Name)
		}
	}
	return out
}

// Reasons a node refuses a pod's volumes, as kube-scheduler words them.
const (
	reasonVolumeNodeAffinity = "volume node affinity conflict"
	reasonVolumeZone         = "no matching volume zone"
	reasonNoPVToBind         = "no available persistent volume to bind"
)

// volumeFit checks the static part of a pod's volumes against a node:
// each bound PV's node affinity and zone labels, and for each unbound
// WaitForFirstConsumer claim, a PV that may be used there or a class that
// provisions there. It returns "" or why not.
func volumeFit(pv *podVolumes, n *corev1.Node) string {
	for _, vol := range pv.bound {
		if volumehelpers.CheckNodeAffinity(vol, n.Labels) != nil {
			return reasonVolumeNodeAffinity
		}
		for _, k := range volumeZoneLabels {
			want, ok := vol.Labels[k]
			if !ok {
				continue
			}
			if !slices.Contains(strings.Split(want, "__"), n.Labels[k]) {
				return reasonVolumeZone
			}
		}
	}
	for i := range pv.wffc {
		w := &pv.wffc[i]
		if w.selectedNode != "" {
			if n.Name != w.selectedNode {
				return reasonNoPVToBind
			}
			continue
		}
		if w.class.Provisioner != noProvisioner && provisionsOn(w.class, n) {
			continue
		}
		if !slices.ContainsFunc(w.pvs, func(vol *corev1.PersistentVolume) bool { return volumehelpers.CheckNodeAffinity(vol, n.Labels) == nil }) {
			return reasonNoPVToBind
		}
	}
	return ""
}

// provisionsOn reports whether a class's allowed topologies admit node n.
func provisionsOn(sc *storagev1.StorageClass, n *corev1.Node) bool {
	if len(sc.AllowedTopologies) == 0 {
		return true
	}
	for _, term := range sc.AllowedTopologies {
		ok := true
		for _, e := range term.MatchLabelExpressions {
			if v, has := n.Labels[e.Key]; !has || !slices.Contains(e.Values, v) {
				ok = false
				break
			}
		}
		if ok {
			return true
		}
	}
	return false
}

// volumeClass is a pod's class narrowed to the nodes its volumes allow
// (volumeFit), with the reasons of the nodes they refuse.
func (b *builder) volumeClass(pi *podInfo, base *podClass, pv *podVolumes, used map[string]bool) *podClass {
	key := cmp.Or(pi.class, classKey(pi.pod)) + volumeClassMark + pv.key
	cl := b.classes[key]
	if cl == nil {
		if b.volClasses >= maxVolumeClasses {
			for k := range b.classes {
				if strings.Contains(k, volumeClassMark) {
					delete(b.classes, k)
				}
			}
			b.volClasses = 0
		}
		b.volClasses++
		cl = &podClass{pod: pi.pod, id: -1, match: make([]bool, len(b.nodes))}
		why := map[string]int{}
		for i, n := range b.nodes {
			if !base.match[i] {
				continue
			}
			r := volumeFit(pv, n.node)
			cl.match[i] = r == ""
			if r != "" && !n.m.Unschedulable {
				why[r]++
			}
		}
		cl.why = slices.Clone(base.why)
		for r, n := range why {
			cl.why = append(cl.why, classReason{reason: r, nodes: n})
		}
		slices.SortStableFunc(cl.why, func(a, b classReason) int { return cmp.Compare(b.nodes, a.nodes) })
		if slices.Equal(cl.match, base.match) {
			// The volumes refuse no node the pod's class allows: the
			// class serves as it is, with no label of its own.
			cl = base
		} else {
			cl.id = b.classID(key)
		}
		b.classes[key] = cl
	}
	if cl != base {
		used[key] = true
	}
	return cl
}

// volumeClassMark separates a volume class's key from its pod's class key.
const volumeClassMark = "\x00volumes="

// maxVolumeClasses bounds the volume classes kept between node changes
// (which start the classes over): past it they start over too.
const maxVolumeClasses = 4096

// placedVolumes is what a placed pod's volumes hold on a node with attach
// limits: the CSI volumes its bound claims attach. Caller holds mu.
func (c *clusterCache) placedVolumes(pi *podInfo, n *model.Node) *model.PodVolumes {
	if n.Volumes == nil {
		return nil
	}
	names, _ := volumeClaimNames(pi.pod)
	var out *model.PodVolumes
	for _, name := range names {
		claim := c.vol.claims[pi.pod.Namespace+"/"+name]
		if claim == nil {
			continue
		}
		var a model.Attachment
		if claim.Spec.VolumeName != "" {
			vol := c.vol.pvs[claim.Spec.VolumeName]
			if vol == nil || vol.Spec.CSI == nil {
				continue
			}
			a = model.Attachment{Driver: vol.Spec.CSI.Driver, ID: vol.Spec.CSI.VolumeHandle}
		} else {
			sc := c.vol.classes[volumehelpers.GetPersistentVolumeClaimClass(claim)]
			if sc == nil || sc.Provisioner == noProvisioner {
				continue
			}
			a = model.Attachment{Driver: sc.Provisioner, ID: "claim:" + string(claim.UID)}
		}
		if out == nil {
			out = &model.PodVolumes{}
		}
		out.Attach = append(out.Attach, a)
	}
	return out
}
