package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// PodGroup is a gang: its pods are bound only once at least minMember of
// them have a place, all at the same time, or not at all.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:shortName=pg
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Min",type=integer,JSONPath=`.spec.minMember`
// +kubebuilder:printcolumn:name="Queue",type=string,JSONPath=`.spec.queue`
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Scheduled",type=integer,JSONPath=`.status.scheduled`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type PodGroup struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   PodGroupSpec   `json:"spec,omitempty"`
	Status PodGroupStatus `json:"status,omitempty"`
}

// PodGroupSpec says how many pods make the gang and where it queues.
type PodGroupSpec struct {
	// MinMember is how many of the group's pods must be placeable before
	// any of them is bound.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100000
	// +kubebuilder:default=1
	MinMember int32 `json:"minMember"`

	// MinResources, when set, is checked against the queue's quota before
	// the group's pods are considered one by one.
	// +optional
	MinResources corev1.ResourceList `json:"minResources,omitempty"`

	// Queue is the Queue the group is submitted to. Unset means the
	// namespace's default queue.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	Queue string `json:"queue,omitempty"`

	// PriorityClassName gives the group's priority; pods without their own
	// priority class take it.
	// +optional
	PriorityClassName string `json:"priorityClassName,omitempty"`

	// ScheduleTimeoutSeconds is how long the group may wait unplaced before
	// it is marked Unschedulable. Unset waits forever.
	// +optional
	// +kubebuilder:validation:Minimum=1
	ScheduleTimeoutSeconds *int32 `json:"scheduleTimeoutSeconds,omitempty"`

	// Topology places the gang by the network's topology (a Topology's
	// levels): inside one rack, one NVLink domain, as few blocks as it
	// can.
	// +optional
	Topology *TopologyConstraint `json:"topology,omitempty"`
}

// PodGroupPhase is where a group is in its life.
// +kubebuilder:validation:Enum=Pending;Scheduled;Running;Succeeded;Failed;Unschedulable
type PodGroupPhase string

// Pod group phases.
const (
	PodGroupPending       PodGroupPhase = "Pending"
	PodGroupScheduled     PodGroupPhase = "Scheduled"
	PodGroupRunning       PodGroupPhase = "Running"
	PodGroupSucceeded     PodGroupPhase = "Succeeded"
	PodGroupFailed        PodGroupPhase = "Failed"
	PodGroupUnschedulable PodGroupPhase = "Unschedulable"
)

// PodGroupStatus is what the scheduler last observed of a group.
type PodGroupStatus struct {
	// +optional
	Phase PodGroupPhase `json:"phase,omitempty"`
	// Scheduled counts the group's pods bound to nodes.
	// +optional
	Scheduled int32 `json:"scheduled,omitempty"`
	// Running, Succeeded and Failed count the group's pods by phase.
	// +optional
	Running int32 `json:"running,omitempty"`
	// +optional
	Succeeded int32 `json:"succeeded,omitempty"`
	// +optional
	Failed int32 `json:"failed,omitempty"`
	// Conditions: Schedulable says why the group waits ("gang 2/8
	// placeable: ...").
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// Placement is the gang's committed placement: where each member goes.
	// The scheduler writes it in one update before it binds any member, so
	// a gang with some members bound always has a whole placement on
	// record; a scheduler that takes over after a crash finishes the binds
	// from it rather than tearing the gang down.
	// +optional
	// +listType=map
	// +listMapKey=pod
	// +kubebuilder:validation:MaxItems=100000
	Placement []MemberPlacement `json:"placement,omitempty"`
}

// MemberPlacement is where one member of a gang goes.
type MemberPlacement struct {
	// Pod is the member's name.
	// +kubebuilder:validation:MaxLength=253
	Pod string `json:"pod"`
	// UID is the member's UID, so that a pod recreated under the same name
	// is not taken for the placed one.
	// +kubebuilder:validation:MaxLength=64
	UID string `json:"uid"`
	// Node is the node the member is bound to.
	// +kubebuilder:validation:MaxLength=253
	Node string `json:"node"`
	// GPUs are the GPUs it gets there, as in the pod's gpuplane.io/gpus
	// annotation ("0,1"; "3:250" for a share; "2:m3" for a MIG slice).
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	GPUs string `json:"gpus,omitempty"`
}

// PodGroupList is a list of PodGroups.
//
// +kubebuilder:object:root=true
type PodGroupList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []PodGroup `json:"items"`
}
