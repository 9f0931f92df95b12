package adapter

import (
	corev1 "k8s.io/api/core/v1"
)

// inTreeDisk names the in-tree disk a volume mounts, one of those whose
// users kube-scheduler's VolumeRestrictions keeps apart on a node (a disk
// attached read-write by two pods); "" for any other volume.
func inTreeDisk(v *corev1.Volume) string {
	switch {
	case v.GCEPersistentDisk != nil:
		return "gcePersistentDisk"
	case v.AWSElasticBlockStore != nil:
		return "awsElasticBlockStore"
	case v.RBD != nil:
		return "rbd"
	case v.ISCSI != nil:
		return "iscsi"
	}
	return ""
}

// inTreeDiskMarker is what the informers' cache keeps of such a volume
// (slimVolumes): its kind, so that unsupported can name it.
func inTreeDiskMarker(v *corev1.Volume) corev1.Volume {
	out := corev1.Volume{Name: v.Name}
	switch inTreeDisk(v) {
	case "gcePersistentDisk":
		out.GCEPersistentDisk = &corev1.GCEPersistentDiskVolumeSource{}
	case "awsElasticBlockStore":
		out.AWSElasticBlockStore = &corev1.AWSElasticBlockStoreVolumeSource{}
	case "rbd":
		out.RBD = &corev1.RBDVolumeSource{}
	case "iscsi":
		out.ISCSI = &corev1.ISCSIVolumeSource{}
	}
	return out
}

// unsupported refuses, naming the field, what a waiting pod asks that
// gpuplane-scheduler does not keep, so that it is never placed against
// it: the pod waits with the reason in its event and condition. nil when
// the scheduler keeps everything the pod asks.
func unsupported(p *corev1.Pod) *BadInputError {
	for i := range p.Spec.Volumes {
		if kind := inTreeDisk(&p.Spec.Volumes[i]); kind != "" {
			return badInput("UnsupportedVolume",
				"spec.volumes[%q].%s: gpuplane-scheduler does not keep in-tree disks apart from the other pods of a node (kube-scheduler's VolumeRestrictions); mount the disk through a PersistentVolumeClaim of its CSI driver",
				p.Spec.Volumes[i].Name, kind)
		}
	}
	return nil
}
