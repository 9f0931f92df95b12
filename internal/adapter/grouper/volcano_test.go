package grouper

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpuplane/gpuplane/api/scheduling/v1alpha1"
)

// What a gpuplane PodGroup takes from a Volcano PodGroup, and each way a
// Volcano PodGroup can be unusable, named by its field.
func TestFromVolcano(t *testing.T) {
	tests := []struct {
		name    string
		spec    string
		want    Derived
		explain []string
		wantErr string
	}{
		{name: "every field", spec: `{"minMember": 4, "queue": "research", "priorityClassName": "high", "minResources": {"cpu": "4", "nvidia.com/gpu": 4}}`,
			want: Derived{MinMember: 4, Queue: "research", PriorityClassName: "high",
				MinResources: corev1.ResourceList{"cpu": resource.MustParse("4"), "nvidia.com/gpu": resource.MustParse("4")}},
			explain: []string{"minMember 4 from spec.minMember", "queue research from spec.queue", "priorityClassName high from spec.priorityClassName", "minResources from spec.minResources"}},
		{name: "minMember alone", spec: `{"minMember": 2}`, want: Derived{MinMember: 2}, explain: []string{"minMember 2 from spec.minMember"}},
		{name: "minTaskMember is said not to be honoured", spec: `{"minMember": 2, "minTaskMember": {"worker": 2}}`, want: Derived{MinMember: 2},
			explain: []string{"spec.minTaskMember not honoured"}},
		{name: "subGroupPolicy is said not to be honoured", spec: `{"minMember": 2, "subGroupPolicy": [{"name": "a", "subGroupSize": 2}]}`, want: Derived{MinMember: 2},
			explain: []string{"spec.subGroupPolicy not honoured"}},
		{name: "no minMember", spec: `{"queue": "q"}`, wantErr: "spec.minMember: not set"},
		{name: "minMember 0", spec: `{"minMember": 0}`, wantErr: "spec.minMember: 0, want 1 to 100000"},
		{name: "negative minMember", spec: `{"minMember": -3}`, wantErr: "spec.minMember: -3, want 1 to 100000"},
		{name: "minMember too large", spec: `{"minMember": 100001}`, wantErr: "spec.minMember: 100001, want 1 to 100000"},
		{name: "fractional minMember", spec: `{"minMember": 2.5}`, wantErr: "spec.minMember: 2.5 is not an integer"},
		{name: "queue not a name", spec: `{"minMember": 2, "queue": "Team A"}`, wantErr: `spec.queue: "Team A" is not a valid queue name`},
		{name: "queue not a string", spec: `{"minMember": 2, "queue": 7}`, wantErr: "spec.queue: a int64, want a queue name"},
		{name: "priority class not a name", spec: `{"minMember": 2, "priorityClassName": "_x"}`, wantErr: "spec.priorityClassName: \"_x\" is not a valid priority class name"},
		{name: "negative minResources", spec: `{"minMember": 2, "minResources": {"nvidia.com/gpu": "-1"}}`, wantErr: "spec.minResources.nvidia.com/gpu: -1 is negative"},
		{name: "minResources not a quantity", spec: `{"minMember": 2, "minResources": {"memory": "lots"}}`, wantErr: `spec.minResources.memory: "lots" is not a quantity`},
		{name: "no spec", spec: `null`, wantErr: "spec.minMember: not set"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			// Decoded as the dynamic client decodes objects: whole numbers
			// as int64.
			var spec any
			if err := json.Unmarshal([]byte(tc.spec), &spec); err != nil {
				t.Fatal(err)
			}
			spec = intsOf(spec)
			d, err := FromVolcano(map[string]any{"spec": spec})
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if d.MinMember != tc.want.MinMember || d.Queue != tc.want.Queue || d.PriorityClassName != tc.want.PriorityClassName || len(d.MinResources) != len(tc.want.MinResources) {
				t.Errorf("got %+v, want %+v", d, tc.want)
			}
			for name, q := range tc.want.MinResources {
				if got := d.MinResources[name]; got.Cmp(q) != 0 {
					t.Errorf("minResources[%s] = %s, want %s", name, got.String(), q.String())
				}
			}
			for _, e := range tc.explain {
				if !strings.Contains(d.Explain, e) {
					t.Errorf("explain %q lacks %q", d.Explain, e)
				}
			}
		})
	}
}

// intsOf turns whole float64s into int64s, as the API machinery's JSON
// decoding of unstructured objects does.
func intsOf(v any) any {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			x[k] = intsOf(e)
		}
	case []any:
		for i, e := range x {
			x[i] = intsOf(e)
		}
	case float64:
		if x == float64(int64(x)) {
			return int64(x)
		}
	}
	return v
}

// A pod that names its group with Volcano's annotation waits while the
// Volcano PodGroup of that name is looked up and, once a PodGroup was
// mirrored from it, until the caller sees that PodGroup; with no Volcano
// PodGroup it goes on with the PodGroup its annotation names, as before;
// an invalid one holds it with the error. It is never labelled.
func TestAwaitingVolcano(t *testing.T) {
	g, err := New(Config{SchedulerName: "gpuplane-scheduler"})
	if err != nil {
		t.Fatal(err)
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: "w-0", Annotations: map[string]string{v1alpha1.VolcanoGroupAnnotation: "train"}},
		Spec: corev1.PodSpec{SchedulerName: "gpuplane-scheduler"}}
	if aw, err := g.Awaiting(pod); !aw || err != nil {
		t.Fatalf("before the lookup: %v, %v; want the pod to wait", aw, err)
	}
	k := volcanoKey("ml", "train")
	if g.queue.Len() != 1 {
		t.Fatalf("%d keys queued, want the Volcano PodGroup's", g.queue.Len())
	}
	decide := func(d *decision) {
		g.mu.Lock()
		d.at = g.now()
		g.decisions[k.UID] = d
		g.mu.Unlock()
	}
	decide(&decision{group: "train", mirror: true})
	if aw, err := g.Awaiting(pod); !aw || err != nil {
		t.Errorf("mirrored: %v, %v; want the pod to wait for the caller to see the mirror", aw, err)
	}
	if d := (&decision{group: "train", mirror: true}); d.needsLabel(pod) {
		t.Error("a pod of a mirrored Volcano PodGroup is to be labelled")
	}
	decide(&decision{mirror: true})
	if aw, err := g.Awaiting(pod); aw || err != nil {
		t.Errorf("no Volcano PodGroup: %v, %v; want the pod to go on", aw, err)
	}
	decide(&decision{mirror: true, err: errTest})
	if aw, err := g.Awaiting(pod); !aw || !errors.Is(err, errTest) {
		t.Errorf("invalid Volcano PodGroup: %v, %v; want the pod held with the error", aw, err)
	}
	// gpuplane's own label wins over the annotation: no lookup.
	own := pod.DeepCopy()
	own.Labels = map[string]string{v1alpha1.PodGroupLabel: "train"}
	if aw, err := g.Awaiting(own); aw || err != nil {
		t.Errorf("a pod naming its group by gpuplane's label: %v, %v; want no wait", aw, err)
	}
}

// A Volcano PodGroup is cluster input anyone who may create one writes:
// whatever its spec, FromVolcano returns an error or a group within
// PodGroup's bounds, and never panics.
func FuzzFromVolcano(f *testing.F) {
	for _, seed := range []string{
		`{"minMember": 4, "queue": "research", "priorityClassName": "high", "minResources": {"cpu": "4", "nvidia.com/gpu": 4}}`,
		`{"minMember": 2, "minTaskMember": {"worker": 2}}`,
		`{"minMember": 0}`, `{"minMember": -1}`, `{"minMember": 1e300}`, `{"minMember": "4"}`,
		`{"minMember": 1, "queue": ""}`, `{"minMember": 1, "minResources": {"memory": "-1Gi"}}`,
		`{"minMember": 1, "minResources": [1]}`, `null`, `[]`, `"spec"`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var spec any
		if json.Unmarshal(data, &spec) != nil {
			return
		}
		d, err := FromVolcano(map[string]any{"spec": intsOf(spec)})
		if err != nil {
			return
		}
		if d.MinMember < 1 || d.MinMember > MaxMinMember {
			t.Fatalf("minMember %d out of bounds for %s", d.MinMember, data)
		}
		for name, q := range d.MinResources {
			if q.Sign() < 0 {
				t.Fatalf("minResources[%s] = %s is negative for %s", name, q.String(), data)
			}
		}
	})
}
