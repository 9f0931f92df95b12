package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Queue shares cluster resources among the workloads submitted to it.
// Queues form a tree through spec.parent: a parent lends its children's
// unused guarantees to their siblings and reclaims them when the owner
// needs them back.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster,shortName=gq;gpuqueue
// +kubebuilder:subresource:status
// +kubebuilder:validation:XValidation:rule="!has(self.spec) || !has(self.spec.parent) || self.spec.parent != self.metadata.name",message="a queue cannot be its own parent"
// +kubebuilder:printcolumn:name="Parent",type=string,JSONPath=`.spec.parent`
// +kubebuilder:printcolumn:name="Priority",type=integer,JSONPath=`.spec.priority`
// +kubebuilder:printcolumn:name="Admitted",type=integer,JSONPath=`.status.admitted`
// +kubebuilder:printcolumn:name="Pending",type=integer,JSONPath=`.status.pending`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type Queue struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   QueueSpec   `json:"spec,omitempty"`
	Status QueueStatus `json:"status,omitempty"`
}

// QueueSpec is a queue's place in the hierarchy and its share of resources.
//
// +kubebuilder:validation:XValidation:rule="!has(self.parent) || size(self.parent) > 0",message="parent must be a queue name or omitted"
type QueueSpec struct {
	// Parent is the name of the parent Queue. A queue without a parent is a
	// root of the hierarchy.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	Parent string `json:"parent,omitempty"`

	// Resources are the queue's guarantees, limits and weights, one entry
	// per resource name (cpu, memory, nvidia.com/gpu, ...). A resource not
	// listed has no guarantee, no limit and weight 1.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=32
	Resources []QueueResource `json:"resources,omitempty"`

	// Priority orders this queue against its siblings: a higher-priority
	// queue's workloads are considered first.
	// +optional
	Priority int32 `json:"priority,omitempty"`

	// Preemption says whether workloads in this queue may evict
	// lower-priority workloads of the same queue.
	// +optional
	// +kubebuilder:default=LowerPriority
	Preemption PreemptionPolicy `json:"preemption,omitempty"`

	// Reclaim says whether this queue may take back its guaranteed share
	// (and its fair share) from queues that borrowed it.
	// +optional
	// +kubebuilder:default=Any
	Reclaim ReclaimPolicy `json:"reclaim,omitempty"`

	// NamespaceSelector says which namespaces may submit work to this queue
	// and to the queues below it: a pod from a namespace whose labels it
	// does not match waits with reason QueueNotAllowed. A queue admits a
	// namespace only if it and every queue above it do. Unset admits every
	// namespace. Select namespaces by name with the label the API server
	// sets on each, kubernetes.io/metadata.name.
	// +optional
	NamespaceSelector *metav1.LabelSelector `json:"namespaceSelector,omitempty"`

	// UsageHalfLife turns on fairness over time: the queue's usage counts
	// toward fair shares as an average that forgets the past with this
	// half-life, so that a queue that used less than its share lately
	// gets more of what is left once guarantees are met (and reclaims
	// it), and one that used more gets less. Unset or 0 counts only what
	// the queue holds now. At most 2160h (90 days).
	// +optional
	UsageHalfLife *metav1.Duration `json:"usageHalfLife,omitempty"`

	// MinRuntime is the least time a workload of this queue runs before
	// preemption or reclaim may evict it. A PriorityClass may set its own
	// with the annotation scheduling.gpuplane.io/min-runtime; the larger
	// applies. Unset or 0: none. At most 168h (7 days).
	// +optional
	MinRuntime *metav1.Duration `json:"minRuntime,omitempty"`

	// PreemptionGracePeriodSeconds is how long a workload of this queue
	// that preemption or reclaim evicts has between SIGTERM and SIGKILL.
	// The pod is first told with its PreemptionNotice condition and an
	// event, so that it can checkpoint. Unset: the pod's own
	// terminationGracePeriodSeconds.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=86400
	PreemptionGracePeriodSeconds *int64 `json:"preemptionGracePeriodSeconds,omitempty"`
}

// QueueResource is a queue's share of one resource. A guarantee above the
// limit is reported by the scheduler on the Queue's Valid condition: the API
// server's CEL cost budget cannot afford parsing two quantities per list
// item.
type QueueResource struct {
	// Name of the resource, as pods request it.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`

	// Guaranteed is what the queue can always get back, borrowing or not.
	// +optional
	Guaranteed *resource.Quantity `json:"guaranteed,omitempty"`

	// Limit caps what the queue may use, borrowed resources included.
	// Unset means no cap beyond the parent's.
	// +optional
	Limit *resource.Quantity `json:"limit,omitempty"`

	// Weight is the queue's share of this resource, relative to its
	// siblings, of whatever is left once every guarantee is met.
	// +optional
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1000000
	Weight int32 `json:"weight,omitempty"`
}

// PreemptionPolicy says which workloads a queue's workloads may evict.
// +kubebuilder:validation:Enum=LowerPriority;Never
type PreemptionPolicy string

// Preemption policies.
const (
	PreemptLowerPriority PreemptionPolicy = "LowerPriority"
	PreemptNever         PreemptionPolicy = "Never"
)

// ReclaimPolicy says whether a queue takes back lent resources.
// +kubebuilder:validation:Enum=Any;Never
type ReclaimPolicy string

// Reclaim policies.
const (
	ReclaimAny   ReclaimPolicy = "Any"
	ReclaimNever ReclaimPolicy = "Never"
)

// QueueStatus is what the scheduler last observed of a queue.
type QueueStatus struct {
	// Usage is what the queue's admitted workloads hold.
	// +optional
	Usage corev1.ResourceList `json:"usage,omitempty"`
	// FairShare is what the queue is entitled to now, given its siblings'
	// demand.
	// +optional
	FairShare corev1.ResourceList `json:"fairShare,omitempty"`
	// Pending counts pod groups waiting in the queue.
	// +optional
	Pending int32 `json:"pending,omitempty"`
	// Admitted counts pod groups placed from the queue.
	// +optional
	Admitted int32 `json:"admitted,omitempty"`
	// UsageOverTime is the queue's usage over time (spec.usageHalfLife)
	// as the scheduler last kept it, written about once a minute, so that
	// a scheduler that starts again (or a new leader) goes on from it
	// rather than from nothing. The scheduler checks it when it reads it
	// back and ignores a value it cannot use.
	// +optional
	UsageOverTime *QueueUsageOverTime `json:"usageOverTime,omitempty"`
	// Conditions: Valid says whether the queue's settings are consistent
	// with its parent and children.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// QueueUsageOverTime is a queue's usage averaged over time with its
// half-life, as of a time.
type QueueUsageOverTime struct {
	// Usage is the average, per resource (cpu, memory and GPUs).
	// +optional
	Usage corev1.ResourceList `json:"usage,omitempty"`
	// At is when the average was taken.
	At metav1.Time `json:"at"`
}

// QueueList is a list of Queues.
//
// +kubebuilder:object:root=true
type QueueList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Queue `json:"items"`
}
