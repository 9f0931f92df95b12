package build

import (
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
