package adapter

import (
	"slices"
	"strings"

	storagev1 "k8s.io/api/storage/v1"

	"github.com/gpuplane/gpuplane/internal/scheduler/model"
)

// Volumes attached to a node that no pod there names any more (its pod
// is gone, the attach-detach controller has not detached it yet) still
// take an attach slot, and kube-scheduler's NodeVolumeLimits counts them:
// from the VolumeAttachments of the node whose PV is a CSI volume. The
// adapter counts them the same way, as a holding of the node with no
// resources (attachmentsAllocation) whose attachments the core counts
// once per volume with the pods' own (placement: an attachment is counted
// once per node, however many hold it).

// attachmentPrefix names the holding that stands for a node's
// VolumeAttachments in the core's books.
const attachmentPrefix = "volumeattachments/"

// attachedVolume is what one VolumeAttachment says: the driver that
// attached a volume, and its PV.
type attachedVolume struct {
	attacher, pv string
}

func (c *clusterCache) upsertVolumeAttachment(va *storagev1.VolumeAttachment) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.dropAttachment(va.Name)
	if va.Spec.NodeName == "" || va.Spec.Attacher == "" || va.Spec.Source.PersistentVolumeName == nil {
		// kube-scheduler counts only attachments of a PV by a named
		// attacher.
		return
	}
	if c.vol.attached == nil {
		c.vol.attached = map[string]map[string]attachedVolume{}
		c.vol.attachedOn = map[string]string{}
	}
	on := c.vol.attached[va.Spec.NodeName]
	if on == nil {
		on = map[string]attachedVolume{}
		c.vol.attached[va.Spec.NodeName] = on
	}
	on[va.Name] = attachedVolume{attacher: va.Spec.Attacher, pv: *va.Spec.Source.PersistentVolumeName}
	c.vol.attachedOn[va.Name] = va.Spec.NodeName
	c.dirty[va.Spec.NodeName] = true
	c.poke()
}

func (c *clusterCache) deleteVolumeAttachment(va *storagev1.VolumeAttachment) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.dropAttachment(va.Name)
}

// dropAttachment forgets a VolumeAttachment. Caller holds mu.
func (c *clusterCache) dropAttachment(name string) {
	node, ok := c.vol.attachedOn[name]
	if !ok {
		return
	}
	delete(c.vol.attachedOn, name)
	delete(c.vol.attached[node], name)
	if len(c.vol.attached[node]) == 0 {
		delete(c.vol.attached, node)
	}
	c.dirty[node] = true
	c.poke()
}

// attachedPVChanged marks dirty the nodes a PV is attached to: what they
// count comes from the PV (its driver and handle). Caller holds mu.
func (c *clusterCache) attachedPVChanged(pv string) {
	for node, on := range c.vol.attached {
		for _, a := range on {
			if a.pv == pv {
				c.dirty[node] = true
			}
		}
	}
}

// attachmentsAllocation is the holding that stands for the volumes
// attached to node n that none of its pods' attachments (byPods) names,
// or false when none is left to count or n has no attach limits. Caller
// holds mu.
//
// A volume attached there but used by no pod counts as a slot of its own
// even against a new pod that would use that very volume, as
// kube-scheduler counts it (NodeVolumeLimits sets the pods' volumes
// already attached apart from the new pod's, not those of
// VolumeAttachments): its ID is marked so that no pod's attachment
// matches it.
func (c *clusterCache) attachmentsAllocation(n *model.Node, byPods map[model.Attachment]bool) (model.Allocation, bool) {
	on := c.vol.attached[n.Name]
	if n.Volumes == nil || len(on) == 0 {
		return model.Allocation{}, false
	}
	var attach []model.Attachment
	for _, a := range on {
		pv := c.vol.pvs[a.pv]
		if pv == nil || pv.Spec.CSI == nil {
			continue
		}
		if byPods[model.Attachment{Driver: a.attacher, ID: pv.Spec.CSI.VolumeHandle}] {
			continue
		}
		attach = append(attach, model.Attachment{Driver: a.attacher, ID: attachedMark + pv.Spec.CSI.VolumeHandle})
	}
	if len(attach) == 0 {
		return model.Allocation{}, false
	}
	slices.SortFunc(attach, func(x, y model.Attachment) int {
		return strings.Compare(x.Driver+"\x00"+x.ID, y.Driver+"\x00"+y.ID)
	})
	attach = slices.Compact(attach)
	name := attachmentPrefix + n.Name
	return model.Allocation{Pod: name, Group: name, Node: n.Name, Request: model.Request{NotPod: true, Volumes: &model.PodVolumes{Attach: attach}}, NonPreemptible: true}, true
}

// attachedMark starts the ID of a volume counted for its
// VolumeAttachment alone.
const attachedMark = "attached:"
