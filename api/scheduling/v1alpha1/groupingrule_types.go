package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// GroupingRule tells gpuplane-scheduler how to make a PodGroup for a kind of
// workload, so that a training job submitted through its own operator is
// gang-scheduled without a PodGroup written by hand. The scheduler walks a
// pending pod's controller owner chain (pod, Job, JobSet, ...) and uses the
// rule of the topmost owner that has one; its expressions are CEL over that
// owner, bound to the variable `object`. A rule with GroupBy splits the
// workload into several groups, one per key its pods give (a
// LeaderWorkerSet's replicas). gpuplane-scheduler ships rules for the common
// kinds; a GroupingRule for the same kind replaces the shipped one.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster,shortName=gr
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Group",type=string,JSONPath=`.spec.target.group`
// +kubebuilder:printcolumn:name="Kind",type=string,JSONPath=`.spec.target.kind`
// +kubebuilder:printcolumn:name="Valid",type=string,JSONPath=`.status.conditions[?(@.type=="Valid")].status`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type GroupingRule struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   GroupingRuleSpec   `json:"spec,omitempty"`
	Status GroupingRuleStatus `json:"status,omitempty"`
}

// GroupingRuleSpec names a workload kind and says how its PodGroup is made.
type GroupingRuleSpec struct {
	// Target is the kind of workload the rule applies to.
	Target GroupKind `json:"target"`

	// GroupBy, when set, splits the workload into several groups: a CEL
	// expression over `pod` (the pending pod's metadata: name, namespace,
	// labels, annotations) and `object` giving the key of the group the
	// pod joins (a string: "" for the workload's one group, else a DNS
	// label of at most 63 characters, such as a LeaderWorkerSet's
	// `pod.metadata.labels['leaderworkerset.sigs.k8s.io/group-index']`).
	// Each key's group is a PodGroup of its own, named after the workload
	// and the key; the other expressions are worked out per group, with
	// the key bound to `group`. Unset, the workload is one group and
	// `group` is "".
	// +optional
	// +kubebuilder:validation:MaxLength=4096
	GroupBy string `json:"groupBy,omitempty"`

	// MinMember is a CEL expression over `object` (and `group`, the key
	// GroupBy gave) giving the number of pods that must be placeable
	// before any is bound (an int, at least 1): `object.spec.parallelism`,
	// say. Elastic workloads give their minimum; pods above it join the
	// group and are placed as room appears. 1 makes no PodGroup: the pods
	// are placed one by one as they fit.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=4096
	MinMember string `json:"minMember"`

	// Queue is a CEL expression over `object` and `group` giving the
	// Queue's name (a string; "" for none). Unset, the workload's own labels and
	// annotations name it, as a pod's would (kueue.x-k8s.io/queue-name,
	// scheduling.gpuplane.io/queue, ...); with neither, the namespace's
	// default queue.
	// +optional
	// +kubebuilder:validation:MaxLength=4096
	Queue string `json:"queue,omitempty"`

	// PriorityClassName is a CEL expression over `object` and `group`
	// giving the group's priority class (a string; "" for none).
	// +optional
	// +kubebuilder:validation:MaxLength=4096
	PriorityClassName string `json:"priorityClassName,omitempty"`

	// Topology is the topology constraint of every group the rule makes,
	// unless the workload's annotations say otherwise (the topology
	// annotations of gpuplane, Kueue or KAI on the workload or its pods).
	// +optional
	Topology *TopologyConstraint `json:"topology,omitempty"`
}

// GroupKind names a kind of object by its API group ("" for the core
// group) and kind.
type GroupKind struct {
	// +optional
	// +kubebuilder:validation:MaxLength=253
	Group string `json:"group,omitempty"`
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	Kind string `json:"kind"`
}

// GroupingRuleStatus says whether the rule's expressions compile.
type GroupingRuleStatus struct {
	// Conditions: Valid is False, naming the field and the compiler's
	// message, when an expression does not compile or has the wrong type.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// GroupingRuleList is a list of GroupingRules.
//
// +kubebuilder:object:root=true
type GroupingRuleList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []GroupingRule `json:"items"`
}

// Keys by which gpuplane-scheduler records a PodGroup it derived.
const (
	// DerivedFromAnnotation on a derived PodGroup names the workload it was
	// made for ("batch/Job ml/train") and how each number was worked out.
	DerivedFromAnnotation = "scheduling.gpuplane.io/derived-from"
	// DerivedLabel marks PodGroups gpuplane-scheduler made itself.
	DerivedLabel = "scheduling.gpuplane.io/derived"
	// GangAnnotation set to "true" on a workload asks for a gang where the
	// shipped rule would not make one (a batch Job that is not Indexed).
	GangAnnotation = "scheduling.gpuplane.io/gang"
)
