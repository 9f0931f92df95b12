package dev_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gpuplane/gpuplane/api/gpunode"
	"github.com/gpuplane/gpuplane/api/gpupod"
	helmchart "github.com/gpuplane/gpuplane/deploy/helm"
	"github.com/gpuplane/gpuplane/test/integration/framework"
)

// TestMIGBothSchedulersSeeNewDevices re-partitions GPU 3 of a dev
// cluster's MIG node through its nvidia.com/mig.config label (a config
// added to the ConfigMap dev up creates, as an operator adds one): then
// kube-scheduler and gpuplane-scheduler each place two pods of one
// nvidia.com/mig-3g.40gb device there, four in all, which only the new
// devices beside the old ones make room for, and the node gives each pod a
// device of its own.
func TestMIGBothSchedulersSeeNewDevices(t *testing.T) {
	_, client := cluster(t, "--node-profiles", "dgxh100:mig-mixed", "--scheduler", "gpuplane")
	const node, res = "gpu-node-1", "nvidia.com/mig-3g.40gb"
	ctx := t.Context()
	cm, err := client.CoreV1().ConfigMaps(helmchart.DefaultNamespace).Get(ctx, helmchart.MIGConfigMap, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("dev up's MIG ConfigMap: %v", err)
	}
	// mig-configs is the file's last key: a config appended belongs to it.
	cm.Data[helmchart.MIGConfigKey] += "  gpu3-3g:\n    - devices: [3]\n      mig-enabled: true\n      mig-devices:\n        \"3g.40gb\": 2\n"
	if _, err := client.CoreV1().ConfigMaps(helmchart.DefaultNamespace).Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"labels": map[string]string{gpunode.LabelMIGConfig: "gpu3-3g"}}})
	if _, err := client.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	// The mig-mixed node starts with two 3g.40gb devices on GPU 1.
	framework.Eventually(t, 90*time.Second, node+" re-partitioned with 4 "+res, func(ctx context.Context) (bool, error) {
		n, err := client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		q := n.Status.Allocatable[corev1.ResourceName(res)]
		st := n.Labels[gpunode.LabelMIGConfigState]
		return st == gpunode.MIGConfigStateSuccess && q.Value() == 4, fmt.Errorf("state %q, %s allocatable %s", st, res, q.String())
	})
	// Four pods of one 3g.40gb device each, two per scheduler: together
	// they need the two devices GPU 1 had and the two GPU 3 has now
	// (gpuplane-scheduler places one MIG instance per pod).
	pods := []struct{ name, scheduler string }{
		{"default-a", ""}, {"default-b", ""}, {"gpuplane-a", "gpuplane-scheduler"}, {"gpuplane-b", "gpuplane-scheduler"},
	}
	for _, p := range pods {
		b := framework.Pod("default", p.name).Limit(corev1.ResourceName(res), "1")
		if p.scheduler != "" {
			b = b.SchedulerName(p.scheduler)
		}
		if _, err := client.CoreV1().Pods("default").Create(ctx, b.Obj(), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	held := map[string]string{}
	for _, p := range pods {
		framework.Eventually(t, 90*time.Second, "pod "+p.name+" Running with a "+res, func(ctx context.Context) (bool, error) {
			got, err := client.CoreV1().Pods("default").Get(ctx, p.name, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			if got.Status.Phase != corev1.PodRunning {
				return false, fmt.Errorf("phase %v, conditions %+v", got.Status.Phase, got.Status.Conditions)
			}
			a, err := gpupod.ReadAllocation(got)
			if err != nil || a == nil {
				return false, err
			}
			ids := a.DeviceIDs(res)
			if len(ids) != 1 || !strings.HasPrefix(ids[0], "MIG-") {
				return false, fmt.Errorf("devices %v", ids)
			}
			if other, dup := held[ids[0]]; dup {
				return false, fmt.Errorf("device %s given to %s and %s", ids[0], other, p.name)
			}
			held[ids[0]] = p.name
			return true, nil
		})
	}
}
