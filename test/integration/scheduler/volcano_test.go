package scheduler_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/gpuplane/gpuplane/api/scheduling/v1alpha1"
	"github.com/gpuplane/gpuplane/internal/adapter"
	"github.com/gpuplane/gpuplane/test/integration/framework"
)

var volcanoPodGroups = schema.GroupVersionResource{Group: "scheduling.volcano.sh", Version: "v1beta1", Resource: "podgroups"}

// volcanoCRDs is where `make third-party-crds` puts Volcano's PodGroup CRD,
// taken from Volcano's Go module: bin/crds/volcano beside the control
// plane's binaries.
func volcanoCRDs(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(env.ControlPlane.BinDir(), "crds", "volcano")
	if _, err := os.Stat(dir); err != nil {
		t.Fatalf("no Volcano CRDs at %s (run make third-party-crds): %v", dir, err)
	}
	return dir
}

// volcanoServed reports whether the API server serves Volcano's PodGroup.
func volcanoServed(t *testing.T) bool {
	t.Helper()
	_, err := env.Client.Discovery().ServerResourcesForGroupVersion(volcanoPodGroups.GroupVersion().String())
	if err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	return err == nil
}

// volcanoPodGroup creates a Volcano PodGroup with the given spec.
func (c *cluster) volcanoPodGroup(name string, spec map[string]any) *unstructured.Unstructured {
	c.t.Helper()
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": volcanoPodGroups.GroupVersion().String(), "kind": "PodGroup",
		"metadata": map[string]any{"name": name, "namespace": c.ns},
		"spec":     spec,
	}}
	out, err := c.dyn.Resource(volcanoPodGroups).Namespace(c.ns).Create(c.t.Context(), u, metav1.CreateOptions{})
	if err != nil {
		c.t.Fatalf("creating Volcano PodGroup %s: %v", name, err)
	}
	return out
}

// volcanoPods creates n pods of gpus GPUs each that name Volcano group
// group by its annotation, as pods written for Volcano do.
func (c *cluster) volcanoPods(group string, n, gpus int) {
	c.t.Helper()
	for i := range n {
		c.create(c.pod(fmt.Sprintf("%s-%d", group, i)).GPUs(gpus).Label("vc", group).Annotation(v1alpha1.VolcanoGroupAnnotation, group))
	}
}

// Pods written for Volcano, naming a Volcano PodGroup (scheduling.volcano.sh)
// by annotation, are a gang of its spec.minMember in its spec.queue: the
// scheduler mirrors it into a PodGroup of gpuplane's owned by it, with no
// PodGroup written by hand. With room for 3 of 4 nothing binds; with room
// for 4 all bind at once. Without the Volcano CRD the annotation names a
// PodGroup of gpuplane's, as before; an invalid Volcano PodGroup holds its
// pods with the field named.
func TestVolcanoPodGroup(t *testing.T) {
	c := newCluster(t, gpuNodes(2, "volcano")...)
	q := c.ns + "-vq"
	c.queue(q, "", 0, 0)
	c.restrictQueue(q, c.ns)
	// As its ServiceAccount: the chart's RBAC must let it read Volcano's
	// PodGroups, make the mirrors and record events on them.
	cfg := asSchedulerServiceAccount(t)
	schedulerMayGet(t, c.ns, "scheduling.volcano.sh", "podgroups")
	c.run(adapter.Config{RESTConfig: cfg})

	if !volcanoServed(t) {
		t.Run("without the Volcano CRD the annotation names a PodGroup of gpuplane's", func(t *testing.T) {
			c.volcanoPods("before", 1, 1)
			c.waitCondition("before-0", "PodGroupNotFound", "pod group "+c.ns+"/before does not exist", 30*time.Second)
		})
	}
	env.InstallCRDs(t, volcanoCRDs(t))

	// A pod of 4 GPUs keeps 4 of the 16 busy: room for 3 of the gang's 4.
	c.create(c.pod("filler").GPUs(4))
	env.WaitPodPhase(t, c.ns, "filler", corev1.PodRunning, 30*time.Second)
	vpg := c.volcanoPodGroup("train", map[string]any{"minMember": int64(4), "queue": q, "minResources": map[string]any{"nvidia.com/gpu": "16"}})
	c.volcanoPods("train", 4, 4)

	var mirror *v1alpha1.PodGroup
	framework.Eventually(t, 30*time.Second, "a PodGroup mirrored from Volcano PodGroup train", func(ctx context.Context) (bool, error) {
		pg, err := c.getPodGroup(ctx, "train")
		if err != nil {
			return false, err
		}
		mirror = pg
		return true, nil
	})
	from := mirror.Annotations[v1alpha1.DerivedFromAnnotation]
	owner := metav1.GetControllerOf(mirror)
	if mirror.Spec.MinMember != 4 || mirror.Spec.Queue != q || owner == nil || owner.UID != vpg.GetUID() || mirror.Labels[v1alpha1.DerivedLabel] != "true" {
		t.Errorf("mirror: minMember %d, queue %q, owner %+v, labels %v; want 4 in %s, owned by the Volcano PodGroup, labelled derived",
			mirror.Spec.MinMember, mirror.Spec.Queue, owner, mirror.Labels, q)
	}
	for _, want := range []string{"PodGroup.scheduling.volcano.sh " + c.ns + "/train", "minMember 4 from spec.minMember", "queue " + q + " from spec.queue", "minResources from spec.minResources"} {
		if !strings.Contains(from, want) {
			t.Errorf("derived-from %q lacks %q", from, want)
		}
	}
	if got := mirror.Spec.MinResources[framework.ResourceGPU]; got.Value() != 16 {
		t.Errorf("mirror minResources %v, want nvidia.com/gpu 16", mirror.Spec.MinResources)
	}

	t.Run("with room for 3 of 4 nothing binds", func(t *testing.T) {
		framework.Eventually(t, 30*time.Second, "the mirrored group waits", func(ctx context.Context) (bool, error) {
			pg, err := c.getPodGroup(ctx, "train")
			if err != nil {
				return false, err
			}
			cd := meta.FindStatusCondition(pg.Status.Conditions, v1alpha1.ConditionSchedulable)
			return cd != nil && cd.Status == metav1.ConditionFalse && strings.Contains(cd.Message, "gang 3/4 placeable"), fmt.Errorf("conditions %v", pg.Status.Conditions)
		})
		if n, total, err := c.bound(t.Context(), "vc=train"); err != nil || n != 0 || total != 4 {
			t.Fatalf("%d of %d pods bound (%v), want 0 of 4", n, total, err)
		}
	})

	t.Run("with room for 4 the gang binds whole into its queue", func(t *testing.T) {
		if err := env.Client.CoreV1().Pods(c.ns).Delete(t.Context(), "filler", deleteNow()); err != nil {
			t.Fatal(err)
		}
		c.waitBound("vc=train", 4, 60*time.Second)
		framework.Eventually(t, 30*time.Second, "queue "+q+" counts the gang", func(ctx context.Context) (bool, error) {
			u, err := c.dyn.Resource(v1alpha1.QueuesResource).Get(ctx, q, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			got, _, _ := unstructured.NestedString(u.Object, "status", "usage", string(framework.ResourceGPU))
			return got == "16", fmt.Errorf("usage %q", got)
		})
	})

	t.Run("a PodGroup of gpuplane's of the same name made by hand is not taken over", func(t *testing.T) {
		c.podGroup("clash", 1, "")
		c.volcanoPodGroup("clash", map[string]any{"minMember": int64(1)})
		c.volcanoPods("clash", 1, 1)
		c.waitCondition("clash-0", "GroupingFailed", "names both Volcano PodGroup "+c.ns+"/clash and a PodGroup of gpuplane's", 30*time.Second)
	})

	t.Run("an invalid Volcano PodGroup holds its pods with the field named", func(t *testing.T) {
		bad := c.volcanoPodGroup("broken", map[string]any{"minMember": int64(0)})
		c.volcanoPods("broken", 1, 1)
		c.waitCondition("broken-0", "GroupingFailed", "Volcano PodGroup "+c.ns+"/broken: spec.minMember: 0, want 1 to 100000", 30*time.Second)
		framework.Eventually(t, 30*time.Second, "an InvalidPodGroup event on the Volcano PodGroup", func(ctx context.Context) (bool, error) {
			evs, err := env.Client.CoreV1().Events(c.ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.uid=" + string(bad.GetUID())})
			if err != nil {
				return false, err
			}
			for _, e := range evs.Items {
				if e.Reason == "InvalidPodGroup" && strings.Contains(e.Message, "spec.minMember") {
					return true, nil
				}
			}
			return false, errors.New("no such event yet")
		})
	})
}
