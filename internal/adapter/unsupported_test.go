package adapter

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// A waiting pod that mounts an in-tree disk is never placed: it waits
// with a condition naming the volume, as the informers' cache keeps it.
// A bound one still counts for what it holds.
func TestLoopRefusesInTreeDisks(t *testing.T) {
	for _, src := range []corev1.VolumeSource{
		{GCEPersistentDisk: &corev1.GCEPersistentDiskVolumeSource{PDName: "pd"}},
		{AWSElasticBlockStore: &corev1.AWSElasticBlockStoreVolumeSource{VolumeID: "vol"}},
		{RBD: &corev1.RBDVolumeSource{CephMonitors: []string{"m"}, RBDImage: "i"}},
		{ISCSI: &corev1.ISCSIVolumeSource{TargetPortal: "t", IQN: "q"}},
	} {
		kind := inTreeDisk(&corev1.Volume{VolumeSource: src})
		t.Run(kind, func(t *testing.T) {
			f := newLoopFixture(t, Config{}, gpuNode("a", 8))
			cached := func(p *corev1.Pod) *corev1.Pod {
				p.Spec.Volumes = []corev1.Volume{{Name: "disk", VolumeSource: src}}
				obj, err := forCache(p)
				if err != nil {
					t.Fatal(err)
				}
				return obj.(*corev1.Pod)
			}
			f.cache.upsertPod(cached(newPod("ns", "running").GPUs(7).NodeName("a").Obj()))
			f.cache.upsertPod(cached(newPod("ns", "p").GPUs(1).Obj()))
			f.cache.upsertPod(newPod("ns", "big").GPUs(2).Obj())
			f.cycle()
			if len(f.api.binds) != 0 {
				t.Fatalf("bound %v; want the disk's pod to wait and the running one to hold its 7 GPUs", f.api.binds)
			}
			if got := f.status.conditions["ns/p"]; !strings.Contains(got, `spec.volumes["disk"].`+kind) || !strings.Contains(got, "UnsupportedVolume") {
				t.Errorf("condition %q, want UnsupportedVolume naming spec.volumes[\"disk\"].%s", got, kind)
			}
		})
	}
}
