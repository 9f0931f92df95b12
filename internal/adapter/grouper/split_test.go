package grouper

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/gpuplane/gpuplane/api/scheduling/v1alpha1"
)

// resettable makes a fixed RESTMapper a ResettableRESTMapper.
type resettable struct{ meta.RESTMapper }

func (resettable) Reset() {}

// A LeaderWorkerSet's pods, leaders and workers alike, are grouped per
// replica: each replica's pods get a PodGroup of their own, sized by the
// rule, and two leaders of one leader StatefulSet (one owner, one cached
// decision) still land in different groups.
func TestSplitWorkload(t *testing.T) {
	const ns = "ml"
	lwsGVK := schema.GroupVersionKind{Group: "leaderworkerset.x-k8s.io", Version: "v1", Kind: "LeaderWorkerSet"}
	stsGVK := schema.GroupVersionKind{Group: "apps", Version: "v1", Kind: "StatefulSet"}
	mapper := meta.NewDefaultRESTMapper(nil)
	mapper.Add(lwsGVK, meta.RESTScopeNamespace)
	mapper.Add(stsGVK, meta.RESTScopeNamespace)
	mapper.Add(corev1.SchemeGroupVersion.WithKind("Pod"), meta.RESTScopeNamespace)

	ctrl := func(gvk schema.GroupVersionKind, name string, uid types.UID) []any {
		return []any{map[string]any{"apiVersion": gvk.GroupVersion().String(), "kind": gvk.Kind, "name": name, "uid": string(uid), "controller": true}}
	}
	lws := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
		"metadata": map[string]any{"name": "serve", "namespace": ns, "uid": "lws-uid"},
		"spec":     map[string]any{"replicas": int64(2), "leaderWorkerTemplate": map[string]any{"size": int64(3)}}}}
	leaders := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "apps/v1", "kind": "StatefulSet",
		"metadata": map[string]any{"name": "serve", "namespace": ns, "uid": "sts-uid", "ownerReferences": ctrl(lwsGVK, "serve", "lws-uid")}}}
	scheme := runtime.NewScheme()
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(scheme, map[schema.GroupVersionResource]string{
		v1alpha1.PodGroupsResource: "PodGroupList", {Group: "apps", Version: "v1", Resource: "statefulsets"}: "StatefulSetList",
		{Group: "leaderworkerset.x-k8s.io", Version: "v1", Resource: "leaderworkersets"}: "LeaderWorkerSetList",
	}, lws, leaders)

	pod := func(i string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "serve-" + i,
			Labels:          map[string]string{"leaderworkerset.sigs.k8s.io/group-index": i, "leaderworkerset.sigs.k8s.io/worker-index": "0"},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "StatefulSet", Name: "serve", UID: "sts-uid", Controller: new(true)}}},
			Spec: corev1.PodSpec{SchedulerName: "gpuplane-scheduler"}}
	}
	p0, p1 := pod("0"), pod("1")
	client := fake.NewClientset(p0, p1)
	g, err := New(Config{SchedulerName: "gpuplane-scheduler", Client: client, Dynamic: dyn, Mapper: resettable{mapper}, Log: logr.Discard()})
	if err != nil {
		t.Fatal(err)
	}
	settled := map[string]bool{}
	g.OnSettled(func(_, name string) { settled[name] = true })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	k, _ := groupRef(p0, WorkloadPodGroupAPIVersion)

	// Before the workload is known to split, the pods wait; once it is,
	// they are told to ask again, and their keys are worked out.
	for _, p := range []*corev1.Pod{p0, p1} {
		if aw, err := g.Awaiting(p); !aw || err != nil {
			t.Fatalf("%s: awaiting %v, %v; want it to wait", p.Name, aw, err)
		}
	}
	if err := g.process(ctx, k); err != nil {
		t.Fatal(err)
	}
	if !settled["serve-0"] || !settled["serve-1"] {
		t.Fatalf("settled %v; want both pods to ask again", settled)
	}
	for _, p := range []*corev1.Pod{p0, p1} {
		if aw, err := g.Awaiting(p); !aw || err != nil {
			t.Fatalf("%s: awaiting %v, %v; want it to wait for its key's group", p.Name, aw, err)
		}
	}
	if err := g.process(ctx, k); err != nil {
		t.Fatal(err)
	}
	groups := map[string]string{}
	for _, p := range []*corev1.Pod{p0, p1} {
		got, err := client.CoreV1().Pods(ns).Get(ctx, p.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		name := got.Labels[v1alpha1.PodGroupLabel]
		if name != SplitGroupName("LeaderWorkerSet", "serve", "lws-uid", p.Labels["leaderworkerset.sigs.k8s.io/group-index"]) {
			t.Errorf("%s labelled with group %q", p.Name, name)
		}
		groups[name] = p.Name
		pg, err := dyn.Resource(v1alpha1.PodGroupsResource).Namespace(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("%s's PodGroup: %v", p.Name, err)
		}
		if mm, _, _ := unstructured.NestedInt64(pg.Object, "spec", "minMember"); mm != 3 {
			t.Errorf("PodGroup %s minMember %d, want the LWS size 3", name, mm)
		}
		if from := pg.GetAnnotations()[v1alpha1.DerivedFromAnnotation]; !strings.Contains(from, `group "`+p.Labels["leaderworkerset.sigs.k8s.io/group-index"]+`"`) {
			t.Errorf("PodGroup %s derived-from %q does not name its key", name, from)
		}
	}
	if len(groups) != 2 {
		t.Errorf("groups %v; want one per replica", groups)
	}

	// A pod whose key cannot be worked out waits with the error, naming
	// spec.groupBy.
	bad := pod("0")
	bad.Name = "serve-x"
	delete(bad.Labels, "leaderworkerset.sigs.k8s.io/group-index")
	if aw, err := g.Awaiting(bad); !aw || err == nil || !strings.Contains(err.Error(), "spec.groupBy") {
		t.Errorf("a pod without the key's label: awaiting %v, %v; want it held with a spec.groupBy error", aw, err)
	}
	g.mu.Lock()
	held := g.held[k.UID]
	g.mu.Unlock()
	if held == nil || len(held.pods) != 1 {
		t.Errorf("held %+v; want the keyless pod held until the decision is made anew", held)
	}
}

func TestSplitGroupName(t *testing.T) {
	if a, b := SplitGroupName("LeaderWorkerSet", "serve", "u", "0"), SplitGroupName("LeaderWorkerSet", "serve", "u", "1"); a == b ||
		!strings.HasPrefix(a, "leaderworkerset-serve-0-") || !strings.HasPrefix(b, "leaderworkerset-serve-1-") {
		t.Errorf("keys 0 and 1: %q, %q; want names that differ and show the key", a, b)
	}
	if GroupName("Job", "train", "u") != SplitGroupName("Job", "train", "u", "") {
		t.Error("the unsplit group's name changed")
	}
	long := strings.Repeat("k", 63)
	for _, n := range []string{SplitGroupName("LeaderWorkerSet", strings.Repeat("a", 253), "u", "17"), SplitGroupName("X", "y", "u", long)} {
		if len(n) > 63 || strings.Contains(n, "--") {
			t.Errorf("%q: not a label value", n)
		}
	}
	if SplitGroupName("X", "y", "u", long) == SplitGroupName("X", "y", "u", long[:62]) {
		t.Error("two long keys give one name")
	}
}
