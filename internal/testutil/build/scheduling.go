package build

import (
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/gpuplane/gpuplane/api/scheduling/v1alpha1"
)

// QueueBuilder builds a Queue. Start with Queue.
type QueueBuilder struct{ q v1alpha1.Queue }

// Queue returns a builder for a root Queue with no resources.
func Queue(name string) *QueueBuilder {
	return &QueueBuilder{q: v1alpha1.Queue{ObjectMeta: metav1.ObjectMeta{Name: name}}}
}

// Parent sets the parent queue.
func (b *QueueBuilder) Parent(parent string) *QueueBuilder {
	b.q.Spec.Parent = parent
	return b
}

// UsageHalfLife turns on the queue's fairness over time
// (spec.usageHalfLife).
func (b *QueueBuilder) UsageHalfLife(d time.Duration) *QueueBuilder {
	b.q.Spec.UsageHalfLife = &metav1.Duration{Duration: d}
	return b
}

// MinRuntime sets the queue's minimum runtime (spec.minRuntime).
func (b *QueueBuilder) MinRuntime(d time.Duration) *QueueBuilder {
	b.q.Spec.MinRuntime = &metav1.Duration{Duration: d}
	return b
}

// PreemptionGrace sets the grace period, in seconds, the queue's evicted
// workloads get (spec.preemptionGracePeriodSeconds).
func (b *QueueBuilder) PreemptionGrace(seconds int64) *QueueBuilder {
	b.q.Spec.PreemptionGracePeriodSeconds = &seconds
	return b
}

// GPUs adds nvidia.com/gpu to the queue's resources with weight 1 and the
// given guaranteed quantity and limit; an empty string leaves either
// unset.
func (b *QueueBuilder) GPUs(guaranteed, limit string) *QueueBuilder {
	r := v1alpha1.QueueResource{Name: string(ResourceGPU), Weight: 1}
	if guaranteed != "" {
		r.Guaranteed = ptr.To(resource.MustParse(guaranteed))
	}
	if limit != "" {
		r.Limit = ptr.To(resource.MustParse(limit))
	}
	b.q.Spec.Resources = append(b.q.Spec.Resources, r)
	return b
}

// Obj returns a copy of the built Queue.
func (b *QueueBuilder) Obj() *v1alpha1.Queue { return b.q.DeepCopy() }

// PodGroupBuilder builds a PodGroup. Start with PodGroup.
type PodGroupBuilder struct{ g v1alpha1.PodGroup }

// PodGroup returns a builder for a PodGroup of minMember pods. Its
// TypeMeta is set, as the dynamic client's unstructured objects need.
func PodGroup(namespace, name string, minMember int32) *PodGroupBuilder {
	return &PodGroupBuilder{g: v1alpha1.PodGroup{
		TypeMeta:   metav1.TypeMeta{APIVersion: v1alpha1.SchemeGroupVersion.String(), Kind: "PodGroup"},
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
		Spec:       v1alpha1.PodGroupSpec{MinMember: minMember}}}
}

// UID sets the group's UID.
func (b *PodGroupBuilder) UID(uid string) *PodGroupBuilder {
	b.g.UID = types.UID(uid)
	return b
}

// Queue sets the group's queue.
func (b *PodGroupBuilder) Queue(queue string) *PodGroupBuilder {
	b.g.Spec.Queue = queue
	return b
}

// Obj returns a copy of the built PodGroup.
func (b *PodGroupBuilder) Obj() *v1alpha1.PodGroup { return b.g.DeepCopy() }

// Topology sets the group's topology constraint.
func (b *PodGroupBuilder) Topology(c v1alpha1.TopologyConstraint) *PodGroupBuilder {
	b.g.Spec.Topology = &c
	return b
}

// Label sets one of the group's labels.
func (b *PodGroupBuilder) Label(key, value string) *PodGroupBuilder {
	if b.g.Labels == nil {
		b.g.Labels = map[string]string{}
	}
	b.g.Labels[key] = value
	return b
}

// Topology returns a Topology of the given levels (node label keys,
// widest first), with its TypeMeta set.
func Topology(name string, levels ...string) *v1alpha1.Topology {
	t := &v1alpha1.Topology{
		TypeMeta:   metav1.TypeMeta{APIVersion: v1alpha1.SchemeGroupVersion.String(), Kind: "Topology"},
		ObjectMeta: metav1.ObjectMeta{Name: name}}
	for _, l := range levels {
		t.Spec.Levels = append(t.Spec.Levels, v1alpha1.TopologyLevel{NodeLabel: l})
	}
	return t
}

// ForeignTopology returns another scheduler's Topology of the given
// levels as the dynamic client reads it: apiVersion kueue.x-k8s.io/v1beta2
// or kai.scheduler/v1alpha1, spec.levels[].nodeLabel.
func ForeignTopology(apiVersion, name string, levels ...string) *unstructured.Unstructured {
	ls := make([]any, len(levels))
	for i, l := range levels {
		ls[i] = map[string]any{"nodeLabel": l}
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": apiVersion, "kind": "Topology",
		"metadata": map[string]any{"name": name},
		"spec":     map[string]any{"levels": ls},
	}}
}
